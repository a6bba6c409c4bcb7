"""A third ground truth: NVIDIA's grouped block-scaled GEMM (CUTLASS v4.5.0 example `grouped_blockscaled_gemm.py`,
the copy in flashinfer-python 0.6.17's wheel data; it compiles with nvidia-cutlass-dsl 4.5.2, not 4.3.5),
the design the board's problem mirrors: one persistent launch over G groups of different M, N, K, whose
pointers, strides and shapes the kernel reads from global arrays, and whose TMA descriptors it patches on
the device (`tensormap.replace` on a copy in shared memory, then a `tensormap.cp_fenceproxy` into a
per-CTA workspace in global memory; emulator/isa/tensormap.py).

    case = NvidiaGrouped([(256, 128, 256), (128, 256, 512)], mma_tiler_mn=(128, 128), cluster_mn=(1, 1))
    case.register(emu); emu.call(case.compiled, *case.args); case.compare()

The host set-up is the example's own (its `run()`): per group A (M, K) and B (N, K) K-major packed e2m1,
C (M, N) fp16, scale factors in the 128 x 4 blocked layout; the int32 (G, 4) MNKL shapes, the int32
(G, 3, 2) strides of A, B, C in elements, the int64 (G, 3) A, B, C addresses and (G, 2) SFA, SFB
addresses; the int64 tensormap workspace (CTAs, 5, 16); the "initial" tensors that carry only dtypes and
majors; the grid sized from the host-known shapes (`total_num_clusters`). Every one of these is a CPU
tensor registered as global memory (the workspace included: the kernel writes its descriptors there).
Inputs: FP4 in every byte pattern, e4m3 scales of both signs and several exponents (never all equal), C
poisoned with NaN; each C must match the exact reference in every cell.
"""

import importlib.metadata
import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import torch

from .nvidia import SF_VEC, blocked_scales, dequantize, example_candidates

EXAMPLE = "grouped_blockscaled_gemm.py"
DSL_SERIES = "4.5."  # the example uses DSL APIs 4.3.5 lacks
TENSORMAPS, TENSORMAP_BYTES = 5, 128  # per CTA: A, B, SFA, SFB, C (the example's class constants)


class ExampleNotFound(FileNotFoundError):
    pass


def example_path() -> Path:
    """The grouped example beside wherever groundtruth/nvidia.py looks for the dense one (FlashInfer's wheel)."""
    for dense in example_candidates():
        path = dense.parent / EXAMPLE
        if path.is_file():
            return path
    raise ExampleNotFound(f"NVIDIA's {EXAMPLE} not found: install flashinfer-python 0.6.17 (its wheel carries "
                          "CUTLASS v4.5.0's examples) beside nvidia-cutlass-dsl 4.5.2")


def _load_example():
    dsl = importlib.metadata.version("nvidia-cutlass-dsl")
    if not dsl.startswith(DSL_SERIES):
        raise ExampleNotFound(f"NVIDIA's {EXAMPLE} compiles with nvidia-cutlass-dsl 4.5.2; {dsl} is installed")
    spec = importlib.util.spec_from_file_location("nvidia_grouped_blockscaled_gemm", example_path())
    module = importlib.util.module_from_spec(spec)
    # registered as an import registers it (importlib's recipe): the DSL names each operation's source line
    # through inspect.getmodule, which otherwise scans every loaded module once per operation (DSL 4.5.x)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class NvidiaGrouped:
    """One grouped GEMM: `problems` [(M, N, K)] per group; `max_active_clusters` caps the persistent grid
    (default 2 clusters, so workers wrap over tiles and groups)."""

    def __init__(self, problems, *, mma_tiler_mn=(128, 128), cluster_mn=(1, 1), seed: int = 0,
                 max_active_clusters: int | None = None):
        import cuda.bindings.driver as cuda

        import cutlass
        import cutlass.cute as cute
        from cutlass.cute.runtime import from_dlpack

        os.environ.setdefault("CUTE_DSL_KEEP_PTX", "1")
        example = _load_example()
        kernel_class = example.Sm100GroupedBlockScaledGemmKernel
        self.problems = [tuple(int(x) for x in p) for p in problems]
        mnkl = [(m, n, k, 1) for m, n, k in self.problems]
        if not kernel_class.can_implement(cutlass.Float4E2M1FN, cutlass.Float8E4M3FN, SF_VEC, cutlass.Float16,
                                          tuple(mma_tiler_mn), tuple(cluster_mn), mnkl, "k", "k", "n"):
            raise ValueError(f"NVIDIA's grouped example cannot implement mma_tiler {mma_tiler_mn}, cluster "
                             f"{cluster_mn}, problems {self.problems}")
        rng = np.random.default_rng(seed)
        self.a, self.b, self.c, self.sfa, self.sfb = [], [], [], [], []
        self.sfa_values, self.sfb_values = [], []
        for m, n, k in self.problems:
            self.a.append(torch.from_numpy(rng.integers(0, 256, size=(m, k // 2), dtype=np.uint8)))
            self.b.append(torch.from_numpy(rng.integers(0, 256, size=(n, k // 2), dtype=np.uint8)))
            sfa, sfa_values = blocked_scales(m, k, rng)
            sfb, sfb_values = blocked_scales(n, k, rng)
            self.sfa.append(sfa)
            self.sfb.append(sfb)
            self.sfa_values.append(sfa_values)
            self.sfb_values.append(sfb_values)
            self.c.append(torch.full((m, n), float("nan"), dtype=torch.float16))

        # the example's device arrays: shapes, strides (elements; A and B K-major, C N-major), addresses
        self.shapes = torch.tensor(mnkl, dtype=torch.int32)
        self.strides = torch.tensor([[[k, 1], [k, 1], [n, 1]] for m, n, k in self.problems], dtype=torch.int32)
        self.addresses_abc = torch.tensor([[a.data_ptr(), b.data_ptr(), c.data_ptr()]
                                           for a, b, c in zip(self.a, self.b, self.c)], dtype=torch.int64)
        self.addresses_sf = torch.tensor([[sfa.data_ptr(), sfb.data_ptr()]
                                          for sfa, sfb in zip(self.sfa, self.sfb)], dtype=torch.int64)

        cta_tile_m = 128  # the example's cluster tile: 128 rows per CTA (a 256-row MMA spans a CTA pair)
        cluster_tile = (cta_tile_m * cluster_mn[0], mma_tiler_mn[1] * cluster_mn[1])
        total_clusters = sum(-(-m // cluster_tile[0]) * -(-n // cluster_tile[1]) for m, n, _ in self.problems)
        clusters = max_active_clusters or 2
        self.ctas = min(total_clusters, clusters) * cluster_mn[0] * cluster_mn[1]
        self.tensormaps = torch.zeros((self.ctas, TENSORMAPS, TENSORMAP_BYTES // 8), dtype=torch.int64)

        gemm = kernel_class(SF_VEC, tuple(mma_tiler_mn), tuple(cluster_mn))
        self.warp_roles = {**{w: "epilogue" for w in gemm.epilog_warp_id}, gemm.mma_warp_id: "MMA",
                           gemm.tma_warp_id: "TMA"}

        def initial_tensor(rows: int, cols: int, dtype, torch_dtype=torch.int8):
            """An (rows, cols, 1) row-major tensor with a dynamic layout, as the example's helper makes them:
            the initial tensors carry only dtypes and majors (their bytes are never read)."""
            held = torch.zeros((1, rows, cols), dtype=torch_dtype).permute(1, 2, 0)
            tensor = from_dlpack(held, assumed_align=16)
            tensor.element_type = dtype
            self.initial.append(held)
            return tensor.mark_layout_dynamic(leading_dim=1)

        self.initial = []
        initial = [initial_tensor(32, 32, cutlass.Float4E2M1FN), initial_tensor(32, 32, cutlass.Float4E2M1FN),
                   initial_tensor(16, 16, cutlass.Float16, torch.float16),
                   initial_tensor(16, 16, cutlass.Float8E4M3FN), initial_tensor(16, 16, cutlass.Float8E4M3FN)]

        def static(tensor: torch.Tensor):
            return from_dlpack(tensor, assumed_align=16)

        arrays = [static(t) for t in (self.shapes, self.strides, self.addresses_abc, self.addresses_sf)]
        workspace = static(self.tensormaps)
        stream = cuda.CUstream(0)
        # the compile takes the constexprs (group count, total clusters, max active clusters); the call not
        self.compiled = cute.compile(gemm, *initial, len(self.problems), *arrays, total_clusters, workspace,
                                     clusters, stream)
        self.args = (*initial, *arrays, workspace, stream)

    def register(self, emu) -> None:
        emu.register(*self.a, *self.b, *self.sfa, *self.sfb, *self.c, *self.initial, self.shapes, self.strides,
                     self.addresses_abc, self.addresses_sf, self.tensormaps)

    def reference(self, group: int) -> np.ndarray:
        """C_g = (A_g * SFA_g) (B_g * SFB_g)^T, exact (float64)."""
        return dequantize(self.a[group], self.sfa_values[group]) @ \
            dequantize(self.b[group], self.sfb_values[group]).T

    def compare(self, atol: float = 1e-3, rtol: float = 1e-3) -> tuple:
        """(verdict word, (worst error / tolerance, worst absolute error), message): FAIL on any cell of any
        group off the reference, else PASS."""
        worst = worst_ratio = 0.0
        for g in range(len(self.problems)):
            out = self.c[g].to(torch.float64).numpy()
            ref = self.reference(g)
            err = np.abs(out - ref)
            tolerance = atol + rtol * np.abs(ref)
            worst = max(worst, float(np.nan_to_num(err, nan=np.inf).max(initial=0.0)))
            worst_ratio = max(worst_ratio, float(np.nan_to_num(err / tolerance, nan=np.inf).max(initial=0.0)))
            bad = ~(err <= tolerance)
            if bad.any():
                idx = tuple(int(i) for i in np.argwhere(bad)[0])
                return "FAIL", (worst_ratio, worst), (f"group {g}: {int(bad.sum())} of {bad.size} outputs wrong, "
                                                      f"first at {idx}: {out[idx]} vs {ref[idx]}")
        return "PASS", (worst_ratio, worst), ""
