"""The ground truth: NVIDIA's dense block-scaled persistent GEMM (CUTLASS v4.3.5 example
`dense_blockscaled_gemm_persistent.py`), a kernel that runs on B200s, compiled for sm_100a on random NVFP4
inputs.

Where the example is read from (`example_path()`), the first that exists and has v4.3.5's interface (the one
`NvidiaExample` drives): the file or CUTLASS checkout that `NVFP4_NVIDIA_EXAMPLE` names; the copy torch ships
under `torch/_inductor/kernel/vendored_templates/cutedsl/` (torch 2.9, 2.10, 2.12, 2.13; not 2.11); the
copy in FlashInfer's wheel data (`flashinfer/data/cutlass/examples/python/CuTeDSL/blackwell/`: 0.6.7.post3
and 0.6.17 carry a later form, skipped; nvidia_grouped.py finds its grouped example there). Without any,
`ExampleNotFound` says in one line what is needed, how to get it, and which copies it passed over.

`NvidiaExample(mma_tiler_mn, cluster_mn, m, n, k)` builds the inputs on the CPU (FP4 A and B in every byte
pattern, e4m3 scale factors drawn from both signs and a range of exponents, never all equal; C poisoned
with NaN), compiles the example as for a B200 and holds what a run needs: `compiled`, `args`, `tensors`
(to register as global memory), `output()` and the exact `reference()`; `with_inputs(seed)` is the same
compiled kernel on other inputs (the next call of a stream).
"""

import ast
import copy
import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import torch

SF_VEC = 16
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])
# e4m3 scale bytes: exponents 2^-2 .. 2^1 with every mantissa, both signs
SCALE_BYTES = np.array([b | s for b in range(0x28, 0x40) for s in (0x00, 0x80)], np.uint8)
WARP_ROLES = {0: "epilogue", 1: "epilogue", 2: "epilogue", 3: "epilogue", 4: "MMA", 5: "TMA"}


EXAMPLE = "dense_blockscaled_gemm_persistent.py"
CHECKOUT_PATH = "examples/python/CuTeDSL/blackwell"  # the example inside a CUTLASS checkout
ENV_VAR = "NVFP4_NVIDIA_EXAMPLE"


class ExampleNotFound(FileNotFoundError):
    pass


def example_candidates() -> list[Path]:
    """Where NVIDIA's example may lie, in the order they are tried."""
    candidates = []
    named = os.environ.get(ENV_VAR)
    if named:
        named = Path(named).expanduser()
        candidates += [named] if named.suffix == ".py" else [named / CHECKOUT_PATH / EXAMPLE, named / EXAMPLE]
    candidates.append(Path(torch.__file__).parent / "_inductor/kernel/vendored_templates/cutedsl" / EXAMPLE)
    flashinfer = importlib.util.find_spec("flashinfer")  # its wheel's data, without importing it
    if flashinfer is not None and flashinfer.submodule_search_locations:
        for folder in flashinfer.submodule_search_locations:
            candidates.append(Path(folder) / "data/cutlass" / CHECKOUT_PATH / EXAMPLE)
    return candidates


# Sm100BlockScaledPersistentDenseGemmKernel.can_implement's parameters in v4.3.5, as NvidiaExample calls it
CAN_IMPLEMENT = ("ab_dtype", "sf_dtype", "sf_vec_size", "c_dtype", "mma_tiler_mn", "cluster_shape_mn", "m", "n", "k",
                 "l", "a_major", "b_major", "c_major")


def has_v435_interface(path: Path) -> bool:
    """Whether the example at `path` is the form this module drives (read, not imported): copies of other
    CUTLASS versions differ in can_implement's parameters (FlashInfer's have 10) and may differ elsewhere."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef) and node.name == "Sm100BlockScaledPersistentDenseGemmKernel":
            for method in node.body:
                if isinstance(method, ast.FunctionDef) and method.name == "can_implement":
                    return tuple(arg.arg for arg in method.args.args) == CAN_IMPLEMENT
    return False


def example_path() -> Path:
    other_forms = []
    for path in example_candidates():
        if path.is_file():
            if has_v435_interface(path):
                return path
            other_forms.append(str(path))
    named = f" ({ENV_VAR}={os.environ[ENV_VAR]} holds none)" if os.environ.get(ENV_VAR) else ""
    skipped = f" (skipped, another CUTLASS version's form: {', '.join(other_forms)})" if other_forms else ""
    raise ExampleNotFound(
        f"NVIDIA's {EXAMPLE} in CUTLASS v4.3.5's form not found{named}{skipped}: torch {torch.__version__} ships "
        f"no copy; set {ENV_VAR} to the file or to a CUTLASS checkout (git clone --depth 1 -b v4.3.5 "
        f"https://github.com/NVIDIA/cutlass)")


def _load_example():
    spec = importlib.util.spec_from_file_location("nvidia_dense_blockscaled_gemm_persistent", example_path())
    module = importlib.util.module_from_spec(spec)
    # registered as an import registers it (importlib's recipe): the DSL names each operation's source line
    # through inspect.getmodule, which otherwise scans every loaded module once per operation (DSL 4.5.x)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def e4m3_values(raw: np.ndarray) -> np.ndarray:
    return torch.from_numpy(raw.copy()).view(torch.float8_e4m3fn).to(torch.float64).numpy()


def dequantize(codes: torch.Tensor, scales: np.ndarray) -> np.ndarray:
    """FP4 codes (two per byte, element 2i in the low nibble) times their e4m3 scales (one per 16), in float64:
    the exact operands every ground-truth kernel's reference multiplies."""
    raw = codes.numpy()
    values = np.empty((raw.shape[0], raw.shape[1] * 2))
    values[:, 0::2] = E2M1[raw & 0xF]
    values[:, 1::2] = E2M1[raw >> 4]
    return values * np.repeat(scales, SF_VEC, axis=1)


def blocked_scales(rows: int, k: int, rng) -> tuple[torch.Tensor, np.ndarray]:
    """Scale factors in the layout the example reads (32 x 4 rows by 4 scale columns per 512-byte block,
    blocks row-block-major): the bytes, and the (rows, k / 16) matrix of their values."""
    row_blocks, col_blocks = -(-rows // 128), -(-(k // SF_VEC) // 4)
    raw = rng.choice(SCALE_BYTES, size=(row_blocks, col_blocks, 32, 4, 4))
    # element [rb, cb, r32, r4, c4] is the scale of row rb*128 + r4*32 + r32, column cb*4 + c4
    matrix = raw.transpose(0, 3, 2, 1, 4).reshape(row_blocks * 128, col_blocks * 4)[:rows, :k // SF_VEC]
    return torch.from_numpy(raw.reshape(-1).copy()), e4m3_values(matrix)


class NvidiaExample:
    def __init__(self, mma_tiler_mn, cluster_mn, m: int, n: int, k: int, *, seed: int = 0,
                 max_active_clusters: int | None = None):
        import cuda.bindings.driver as cuda

        import cutlass
        import cutlass.cute as cute

        os.environ.setdefault("CUTE_DSL_KEEP_PTX", "1")
        example = _load_example()
        gemm_class = example.Sm100BlockScaledPersistentDenseGemmKernel
        if not gemm_class.can_implement(cutlass.Float4E2M1FN, cutlass.Float8E4M3FN, SF_VEC, cutlass.Float16,
                                        tuple(mma_tiler_mn), tuple(cluster_mn), m, n, k, 1, "k", "k", "n"):
            raise ValueError(f"NVIDIA's example cannot implement mma_tiler {mma_tiler_mn}, cluster {cluster_mn}, "
                             f"M, N, K = {m}, {n}, {k}")
        self.mnk = (m, n, k)
        self._inputs(seed)
        self.warp_roles = WARP_ROLES
        cluster_size = cluster_mn[0] * cluster_mn[1]
        clusters = max_active_clusters or max(1, 2 // cluster_size * 1)
        gemm = gemm_class(SF_VEC, tuple(mma_tiler_mn), tuple(cluster_mn))

        # (no `from __future__ import annotations` in this module: DSL 4.5.2 evaluates these annotations in
        # the module's globals, where cute is not)
        @cute.jit
        def entry(a_ptr: cute.Pointer, b_ptr: cute.Pointer, sfa_ptr: cute.Pointer, sfb_ptr: cute.Pointer,
                  c_ptr: cute.Pointer, stream: cuda.CUstream):
            # the example's torch convention: A (M, K), B (K, N) K-contiguous, C (M, N)
            a = cute.make_tensor(a_ptr, cute.make_layout((m, k), stride=(k, 1)))
            b = cute.make_tensor(b_ptr, cute.make_layout((k, n), stride=(1, k)))
            c = cute.make_tensor(c_ptr, cute.make_layout((m, n), stride=(n, 1)))
            sfa = cute.make_tensor(sfa_ptr, cute.make_layout(self.sfa.numel()))
            sfb = cute.make_tensor(sfb_ptr, cute.make_layout(self.sfb.numel()))
            gemm(a, b, sfa, sfb, c, clusters, stream)

        self.compiled = cute.compile(entry, *self.args)

    def _inputs(self, seed: int) -> None:
        """New inputs drawn from `seed` (C poisoned), and the arguments that point at them."""
        import cuda.bindings.driver as cuda

        import cutlass
        import cutlass.cute as cute

        m, n, k = self.mnk
        rng = np.random.default_rng(seed)
        self.a = torch.from_numpy(rng.integers(0, 256, size=(m, k // 2), dtype=np.uint8))
        self.b = torch.from_numpy(rng.integers(0, 256, size=(n, k // 2), dtype=np.uint8))
        self.sfa, self.sfa_values = blocked_scales(m, k, rng)
        self.sfb, self.sfb_values = blocked_scales(n, k, rng)
        self.c = torch.full((m, n), float("nan"), dtype=torch.float16)
        self.tensors = (self.a, self.b, self.sfa, self.sfb, self.c)

        def ptr(dtype, tensor):
            return cute.runtime.make_ptr(dtype, tensor.data_ptr(), cute.AddressSpace.gmem, assumed_align=16)

        self.args = (ptr(cutlass.Float4E2M1FN, self.a), ptr(cutlass.Float4E2M1FN, self.b),
                     ptr(cutlass.Float8E4M3FN, self.sfa), ptr(cutlass.Float8E4M3FN, self.sfb),
                     ptr(cutlass.Float16, self.c), cuda.CUstream(0))

    def with_inputs(self, seed: int) -> "NvidiaExample":
        """The same compiled kernel on new inputs drawn from `seed` (another call of a stream)."""
        other = copy.copy(self)
        other._inputs(seed)
        return other

    def output(self) -> torch.Tensor:
        return self.c.to(torch.float64)

    def reference(self) -> torch.Tensor:
        """C = (A * SFA) (B * SFB)^T, exact: every FP4 x e4m3 product and their sums in float64."""
        return torch.from_numpy(dequantize(self.a, self.sfa_values) @ dequantize(self.b, self.sfb_values).T)
