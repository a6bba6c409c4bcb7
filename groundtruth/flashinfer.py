"""The second ground truth: FlashInfer's masked grouped NVFP4 GEMM (`flashinfer-python`,
`flashinfer/gemm/kernels/grouped_gemm_masked_blackwell.py`), the CuTe DSL kernel SGLang and vLLM run as their
NVFP4 MoE backend on B200s, compiled for sm_100a through FlashInfer's own host entry
(`MaskedBatchedMatmulCuteDSL`) on random NVFP4 inputs.

Versions: 0.6.7.post3 is the newest that installs beside nvidia-cutlass-dsl 4.3.5, 0.6.17 the newest beside
4.5.2 (requirements-test.txt). 0.6.7.post3 carries a field bug: its scheduler reads `masked_m[L]`, one
element past the end (FlashInfer fixed it later; 0.6.17 has a comment about CUDA error 700). `masked_m` is
therefore registered as a region of exactly its L elements, in a buffer whose tail no region covers, so the
over-read is a `global-bounds` error; `masked_m_slack` registers that many elements more (holding garbage)
for runs that check the rest of 0.6.7.post3.

    case = FlashInferMasked([100, 37], n=256, k=256, mma_tiler_mn=(128, 128), cluster_mn=(1, 1))
    case.register(emu); emu.call(case.compiled, *case.args); case.compare()

The layout is FlashInfer's (DeepGEMM's masked convention): A (L, M_max, K / 2) and B (L, N, K / 2) packed
e2m1, C (L, M_max, N) fp16, scale factors per group in the 128 x 4 blocked layout, `masked_m[g]` valid rows
of group g. Inputs: FP4 in every byte pattern, e4m3 scales of both signs and several exponents (never all
equal), C poisoned with NaN. A row below `masked_m[g]` must match the exact reference. Rows past it may be
written (FlashInfer's contract: C is padded to M_max): the scheduler counts CTA tiles of M per group and steps
whole clusters, so group g's tiles cover ceil(masked_m[g] / CTA tile M) cluster tiles of rows; a cell written
past those is OUTSIDE.
The timed mode builds its large cases (G = 4..18, N, K = 4096, 7168) from this class: the reference is only
computed when asked for, and only for the valid rows.

The package's `__init__` modules are not run (0.6.17's queries a GPU at import, and they pull in most of
FlashInfer): `kernel_module()` imports the kernel file with every `flashinfer` package stubbed to its path.
"""

import copy
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import inspect
import os
import sys

import numpy as np
import torch

from .nvidia import SF_VEC, blocked_scales, dequantize

KERNEL_MODULE = "flashinfer.gemm.kernels.grouped_gemm_masked_blackwell"
SLACK_GARBAGE = 0x5A5A5A5A  # what a slack element of masked_m holds


class FlashInferMissing(ImportError):
    pass


def version() -> str | None:
    """The installed flashinfer-python's version, or None (read from its metadata: nothing is imported)."""
    try:
        return importlib.metadata.version("flashinfer-python")
    except importlib.metadata.PackageNotFoundError:
        return None


class _PackagesWithoutInit(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds every `flashinfer` package as an empty module on its path: submodules import, __init__s don't."""

    def find_spec(self, name, path, target=None):
        if name != "flashinfer" and not name.startswith("flashinfer."):
            return None
        found = importlib.machinery.PathFinder.find_spec(name, path)
        if found is None or found.submodule_search_locations is None:
            return None
        spec = importlib.machinery.ModuleSpec(name, self, is_package=True)
        spec.submodule_search_locations = list(found.submodule_search_locations)
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        pass


def kernel_module():
    """grouped_gemm_masked_blackwell.py, imported without running any flashinfer package's __init__."""
    if version() is None:
        raise FlashInferMissing("flashinfer-python is not installed (requirements-test.txt says which version "
                                "goes with which nvidia-cutlass-dsl)")
    if not any(isinstance(f, _PackagesWithoutInit) for f in sys.meta_path):
        sys.meta_path.insert(0, _PackagesWithoutInit())
    return importlib.import_module(KERNEL_MODULE)


def e4m3_values_of(raw: np.ndarray) -> np.ndarray:
    return torch.from_numpy(raw.copy()).view(torch.float8_e4m3fn).to(torch.float64).numpy()


class FlashInferMasked:
    """One masked grouped GEMM: inputs, FlashInfer's compiled kernel, the regions to register and the checks.

    `masked_m`: valid rows per group; `m_max` (default: the rows the largest group's tiles cover, plus one
    CTA tile of rows no tile may write); `max_active_clusters`: the persistent grid (default: 2 clusters, so workers wrap
    over tiles); `masked_m_slack`: elements registered past masked_m's end (0: the over-read is an error)."""

    def __init__(self, masked_m, n: int, k: int, *, mma_tiler_mn=(128, 128), cluster_mn=(1, 1),
                 m_max: int | None = None, seed: int = 0, max_active_clusters: int | None = None,
                 masked_m_slack: int = 0):
        import cutlass
        import cutlass.cute as cute

        os.environ.setdefault("CUTE_DSL_KEEP_PTX", "1")
        module = kernel_module()
        self.masked_m = [int(m) for m in masked_m]
        groups = len(self.masked_m)
        self.cta_tile_m = mma_tiler_mn[0] // (2 if mma_tiler_mn[0] == 256 else 1)  # 256: a CTA pair's MMA
        self.cluster_m = cluster_mn[0]
        if m_max is None:
            m_max = self.rows_covered(max(self.masked_m)) + self.cta_tile_m
        if min(self.masked_m) < 0 or max(self.masked_m) > m_max:
            raise ValueError(f"masked_m {self.masked_m}: each in 0..M_max = {m_max}")
        self.groups, self.m_max, self.n, self.k = groups, m_max, n, k

        self.masked_m_slack = masked_m_slack
        kernel_class = module.Sm100BlockScaledPersistentDenseGemmKernel
        roles = kernel_class(sf_vec_size=SF_VEC, mma_tiler_mn=tuple(mma_tiler_mn),
                             cluster_shape_mn=tuple(cluster_mn), sm_version="sm_100")
        self.warp_roles = {**{w: "epilogue" for w in roles.epilog_warp_id}, roles.mma_warp_id: "MMA",
                           roles.tma_warp_id: "TMA"}
        clusters = max_active_clusters or 2
        # FlashInfer sizes its persistent grid from the device (get_max_active_clusters); here the caller does
        module.get_max_active_clusters = lambda cluster_size: clusters
        try:
            host = module.MaskedBatchedMatmulCuteDSL(
                m=m_max, n=n, k=k, l=groups, a_major="k", b_major="k", c_major="n", ab_dtype=cutlass.Float4E2M1FN,
                sf_dtype=cutlass.Float8E4M3FN, c_dtype=cutlass.Float16, alpha_dtype=None, sf_vec_size=SF_VEC,
                mma_tiler_mn=tuple(mma_tiler_mn), cluster_shape_mn=tuple(cluster_mn), sm_count=148,
                sm_version="sm_100")
        except TypeError as e:  # FlashInfer's can_implement refused the shape or configuration
            raise ValueError(str(e)) from None

        # the optional pointers (dst_signals, alpha; 0.6.17 adds the combine-fusion ones) stay None
        self.parameters = len(inspect.signature(type(host).__call__).parameters) - 1  # less self
        self._inputs(seed)
        self.compiled = cute.compile(host, *self.args)

    def _inputs(self, seed: int) -> None:
        """New inputs drawn from `seed` (C poisoned, masked_m the same), and the arguments that point at them."""
        import cuda.bindings.driver as cuda

        import cutlass
        import cutlass.cute as cute

        groups, m_max, n, k = self.groups, self.m_max, self.n, self.k
        self.seed = seed
        rng = np.random.default_rng(seed)
        self.a = torch.from_numpy(rng.integers(0, 256, size=(groups, m_max, k // 2), dtype=np.uint8))
        self.b = torch.from_numpy(rng.integers(0, 256, size=(groups, n, k // 2), dtype=np.uint8))
        sfa = [blocked_scales(m_max, k, rng) for _ in range(groups)]
        sfb = [blocked_scales(n, k, rng) for _ in range(groups)]
        self.sfa = torch.cat([s for s, _ in sfa])  # (L, row blocks, column blocks, 32, 4, 4) bytes
        self.sfb = torch.cat([s for s, _ in sfb])
        self.sfa_values = [v for _, v in sfa]
        self.sfb_values = [v for _, v in sfb]
        self.c = torch.full((groups, m_max, n), float("nan"), dtype=torch.float16)
        # masked_m at the start of a buffer whose tail (16 int32) no region covers: a read past the L
        # elements (plus the slack) is outside every region, wherever the allocator put its neighbours
        self.masked_m_buffer = torch.full((groups + self.masked_m_slack + 16,), SLACK_GARBAGE, dtype=torch.int32)
        self.masked_m_buffer[:groups] = torch.tensor(self.masked_m, dtype=torch.int32)

        def ptr(dtype, tensor):
            return cute.runtime.make_ptr(dtype, tensor.data_ptr(), cute.AddressSpace.gmem, assumed_align=16)

        args = [ptr(cutlass.Float4E2M1FN, self.a), ptr(cutlass.Float4E2M1FN, self.b),
                ptr(cutlass.Float8E4M3FN, self.sfa), ptr(cutlass.Float8E4M3FN, self.sfb),
                ptr(cutlass.Float16, self.c), ptr(cutlass.Int32, self.masked_m_buffer)]
        args += [None] * (self.parameters - len(args) - 1) + [cuda.CUstream(0)]
        self.args = tuple(args)

    def with_inputs(self, seed: int) -> "FlashInferMasked":
        """The same compiled kernel on new inputs drawn from `seed` (another call of a stream)."""
        other = copy.copy(self)
        other._inputs(seed)
        return other

    def rows_covered(self, rows: int) -> int:
        """Rows of C the tiles of a group with `rows` valid rows cover (see the module's docstring)."""
        return -(-rows // self.cta_tile_m) * self.cta_tile_m * self.cluster_m

    def register(self, emu) -> None:
        """Every tensor as global memory; masked_m as exactly its L elements (plus the slack)."""
        emu.register(self.a, name="A")
        emu.register(self.b, name="B")
        emu.register(self.sfa, name="SFA")
        emu.register(self.sfb, name="SFB")
        emu.register(self.c, name="C")
        emu.memory.register(self.masked_m_buffer.data_ptr(), 4 * (self.groups + self.masked_m_slack), "masked_m")

    def reference(self, group: int) -> np.ndarray:
        """Group g's valid rows of C = (A * SFA) (B * SFB)^T, exact (float64)."""
        rows = self.masked_m[group]

        return dequantize(self.a[group, :rows], self.sfa_values[group][:rows]) @ \
            dequantize(self.b[group], self.sfb_values[group]).T

    def compare(self, atol: float = 1e-3, rtol: float = 1e-3) -> tuple:
        """(verdict word, (worst error / tolerance, worst absolute error) or None, message): FAIL on a valid
        row off the reference, OUTSIDE on a written row past the rows masked_m's tiles cover, else PASS."""
        worst = worst_ratio = 0.0
        for g, rows in enumerate(self.masked_m):
            out = self.c[g].to(torch.float64).numpy()
            first_unowned = self.rows_covered(rows)
            written = ~np.isnan(out[first_unowned:])
            if written.any():
                row = first_unowned + int(np.argwhere(written)[0][0])
                return "OUTSIDE", None, (f"group {g}: {int(written.sum())} cells written in rows past its last "
                                         f"tile (masked_m {rows}), first in row {row}")
            ref = self.reference(g)
            err = np.abs(out[:rows] - ref)
            tolerance = atol + rtol * np.abs(ref)
            bad = ~(err <= tolerance)
            worst = max(worst, float(np.nan_to_num(err, nan=np.inf).max(initial=0.0)))
            worst_ratio = max(worst_ratio, float(np.nan_to_num(err / tolerance, nan=np.inf).max(initial=0.0)))
            if bad.any():
                idx = tuple(int(i) for i in np.argwhere(bad)[0])
                return "FAIL", (worst_ratio, worst), (f"group {g}: {int(bad.sum())} of {bad.size} valid outputs "
                                                      f"wrong, first at {idx}: {out[idx]} vs {ref[idx]}")
        return "PASS", (worst_ratio, worst), ""
