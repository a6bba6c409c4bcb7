"""placeholder docstring"""
from __future__ import annotations

import bisect
import ctypes
import functools
import heapq
import operator
from dataclasses import dataclass
from typing import Callable

import torch

# --------------------------------------------------------------------------------------------------
# The contract
# --------------------------------------------------------------------------------------------------

SF_VEC_SIZE = 16  # one e4m3 scale per 16 FP4 values along K
SF_BLOCK_ROWS = 128  # the blocked scale layout pads rows to 128 ...
SF_BLOCK_COLS = 4  # ... and scale columns to 4 (64 values of K)
K_MULTIPLE = 256  # every K must be a multiple of the largest K tile (B200: 256)
N_MULTIPLE = 128  # both kernels cut the weights (N) into 128-row tiles: one CTA's MMA rows
MAX_GROUPS = 32  # per-group TMA descriptors are kernel parameters (32 KiB of parameter space)
SUPPORTED_GPUS = "B200 (compute capability 10.0) and H100/H200 (9.0)"


def _ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


def _sf_reordered_shape_and_strides(rows: int, k: int):
    """Shape and strides of the board's reordered scales: a permuted view of a contiguous
    (1, ceil(rows/128), ceil(k/64), 32, 4, 4) buffer."""
    row_blocks = _ceil_div(rows, SF_BLOCK_ROWS)
    col_blocks = _ceil_div(k // SF_VEC_SIZE, SF_BLOCK_COLS)
    block = 32 * 4 * 4
    shape = (32, 4, row_blocks, 4, col_blocks, 1)
    strides = (16, 4, col_blocks * block, 1, block)
    return shape, strides


def _contract_error(group: int, problem, what: str) -> ValueError:
    return ValueError(f"group {group} (problem {tuple(problem)}): {what}")


def validate_inputs(data) -> tuple:
    """Check `data` against the board's contract; return ((m, n, k), ...) per group.

    Raises ValueError naming the group and its problem. Nothing is written before this passes."""
    if not isinstance(data, (tuple, list)) or len(data) != 4:
        raise ValueError("data must be (abc_tensors, sfasfb_tensors, sfasfb_reordered_tensors, problem_sizes)")
    abc, sf, sf_reordered, problem_sizes = data
    counts = {len(abc), len(sf), len(sf_reordered), len(problem_sizes)}
    if len(counts) != 1:
        raise ValueError(
            f"list lengths differ: {len(abc)} abc, {len(sf)} sf, {len(sf_reordered)} sf_reordered, "
            f"{len(problem_sizes)} problem sizes"
        )
    if not 1 <= len(abc) <= MAX_GROUPS:
        raise ValueError(f"{len(abc)} groups: this kernel takes 1 to {MAX_GROUPS}")
    device = abc[0][0].device
    sizes = []
    for g, ((a, b, c), (sfa, sfb), problem) in enumerate(zip(abc, sf_reordered, problem_sizes)):
        if len(problem) != 4:
            raise _contract_error(g, problem, "problem size must be (M, N, K, L)")
        m, n, k, l = (int(x) for x in problem)
        if l != 1:
            raise _contract_error(g, problem, f"L must be 1, got {l}")
        if m < 1 or n < 1 or k < 1:
            raise _contract_error(g, problem, "M, N and K must be positive")
        if k % K_MULTIPLE:
            raise _contract_error(g, problem, f"K must be a multiple of {K_MULTIPLE}")
        if n % N_MULTIPLE:
            raise _contract_error(g, problem, f"N must be a multiple of {N_MULTIPLE}")
        expected = (
            ("a", a, torch.float4_e2m1fn_x2, (m, k // 2, 1), (k // 2, 1)),
            ("b", b, torch.float4_e2m1fn_x2, (n, k // 2, 1), (k // 2, 1)),
            ("c", c, torch.float16, (m, n, 1), (n, 1)),
            ("sfa_reordered", sfa, torch.float8_e4m3fn, *_sf_reordered_shape_and_strides(m, k)),
            ("sfb_reordered", sfb, torch.float8_e4m3fn, *_sf_reordered_shape_and_strides(n, k)),
        )
        for name, t, dtype, shape, strides in expected:
            if not isinstance(t, torch.Tensor):
                raise _contract_error(g, problem, f"{name} is not a tensor")
            if t.dtype != dtype:
                raise _contract_error(g, problem, f"{name} has dtype {t.dtype}, expected {dtype}")
            if tuple(t.shape) != shape:
                raise _contract_error(g, problem, f"{name} has shape {tuple(t.shape)}, expected {shape}")
            if tuple(t.stride())[: len(strides)] != strides:
                raise _contract_error(
                    g, problem, f"{name} has strides {tuple(t.stride())}, expected {strides} (+ any L stride)"
                )
            if t.device != device:
                raise _contract_error(g, problem, f"{name} is on {t.device}, group 0's a is on {device}")
            if t.data_ptr() % 16:
                raise _contract_error(g, problem, f"{name} is not 16-byte aligned")
        sizes.append((m, n, k))
    return tuple(sizes)


# --------------------------------------------------------------------------------------------------
# Tile schedule, shared by both kernels (pure Python: built once per shape signature)
# --------------------------------------------------------------------------------------------------

RECORD_FIELDS = ("group", "n0", "t0", "variant", "m_end", "n", "k", "spare")  # one int32 each


@dataclass(frozen=True)
class ScheduleShape:
    """How an arch cuts the outputs into tiles and spreads them over its workers (CTAs or pairs)."""

    weight_rows: int  # weight rows (N) per tile: one CTA's (Hopper 128) or one CTA pair's (B200 256)
    token_chunks: tuple  # candidate token-tile heights; the planner keeps the best modeled makespan
    token_variants: tuple  # compiled token widths (MMA N), ascending; a tile runs the smallest that fits
    tile_cost: Callable  # (variant width, K) -> modeled time of one tile, in any unit
    job_cost: Callable  # (sum of the job's tile costs, K) -> modeled time of a job (tile_costs + fixed)
    balance_floor: float  # measured ratio busiest / mean worker that no balancing beats
    group_by_variant: bool  # a worker's tiles sorted by variant, one offset per variant (Hopper)
    weight_block_jobs: bool  # a weight block's token tiles form one job, run back to back (B200)


def _token_tiles(m: int, chunk: int, variants: tuple):
    """(t0, m_end, variant index) of the token tiles of a group of m tokens cut every `chunk` rows.
    A sliver shorter than the smallest variant is folded into the previous tile when that still
    fits the largest variant."""
    starts = list(range(0, m, chunk))
    if len(starts) > 1 and m - starts[-1] < variants[0] and m - starts[-2] <= variants[-1]:
        starts.pop()
    return [
        (t0, m_end, bisect.bisect_left(variants, m_end - t0))
        for t0, m_end in zip(starts, starts[1:] + [m])
    ]


def _balance(jobs, num_workers):
    """Spread (cost, payload) jobs over min(num_workers, #jobs) workers: longest processing time
    first (biggest job to the least loaded worker), then moves and swaps that lower the most loaded
    worker. LPT alone left the busiest Hopper CTA 12-17% above the mean on the benchmarks; a few
    hundred swaps bring the model within a few percent."""
    count = min(num_workers, len(jobs))
    heap = [(0, w) for w in range(count)]
    bins = [[] for _ in range(count)]
    for job in sorted(jobs, key=lambda j: -j[0]):
        load, w = heapq.heappop(heap)
        bins[w].append(job)
        heapq.heappush(heap, (load + job[0], w))
    loads = [sum(cost for cost, _ in b) for b in bins]
    for _ in range(20 * count):
        hi = max(range(count), key=loads.__getitem__)
        best = None  # (new local max, other worker, index in hi, index in other or None for a move)
        for j in range(count):
            if j == hi:
                continue
            gap = loads[hi] - loads[j]
            options = [(a, None, bins[hi][a][0]) for a in range(len(bins[hi]))]
            options += [
                (a, b, bins[hi][a][0] - bins[j][b][0]) for a in range(len(bins[hi])) for b in range(len(bins[j]))
            ]
            for a, b, delta in options:
                if 0 < delta < gap:
                    local_max = max(loads[hi] - delta, loads[j] + delta)
                    if best is None or local_max < best[0]:
                        best = (local_max, j, a, b)
        if best is None:
            break
        _, j, a, b = best
        job = bins[hi].pop(a)
        if b is not None:
            other = bins[j].pop(b)
            bins[hi].append(other)
            loads[hi] += other[0]
            loads[j] -= other[0]
        bins[j].append(job)
        loads[hi] -= job[0]
        loads[j] += job[0]
    return max(loads), [[payload for _, payload in b] for b in bins]


def build_tile_schedule(sizes, num_workers: int, shape: ScheduleShape):
    """The tile records and per-worker offsets of one problem set.

    records: list of int32 rows RECORD_FIELDS = (group, n0, t0, variant, m_end, n, k, spare): the
    tile computes tokens t0..m_end-1 of `group` against weight rows n0..n0 + weight_rows - 1 (clipped
    at n) over the whole K, with token width shape.token_variants[variant].
    offsets: one row per worker. With shape.group_by_variant, worker w runs variant v on records
    [offsets[w][v], offsets[w][v + 1]); otherwise it runs records [offsets[w][0], offsets[w][1]) in
    order. Workers' ranges are contiguous and in worker order.

    Among shape.token_chunks the planner keeps the one whose balanced schedule has the smallest
    modeled makespan: short token tiles cost more weight traffic but fill more workers when a
    problem has few weight blocks (two groups of 3072 x 4096 make 24 weight blocks of 256 rows)."""
    best = None
    for chunk in shape.token_chunks:
        jobs = []
        for group, (m, n, k) in enumerate(sizes):
            token_tiles = _token_tiles(m, chunk, shape.token_variants)
            for n0 in range(0, n, shape.weight_rows):
                tiles = [(group, n0, t0, v, m_end, n, k, 0) for t0, m_end, v in token_tiles]
                costs = [shape.tile_cost(shape.token_variants[v], k) for _, _, v in token_tiles]
                if shape.weight_block_jobs:
                    jobs.append((shape.job_cost(sum(costs), k), tiles))
                else:
                    jobs.extend((shape.job_cost(cost, k), [tile]) for cost, tile in zip(costs, tiles))
        makespan, assigned = _balance(jobs, num_workers)
        makespan = max(makespan, shape.balance_floor * sum(cost for cost, _ in jobs) / len(assigned))
        if best is None or makespan < best[0]:
            best = (makespan, assigned)
    records, offsets = [], []
    for worker_jobs in best[1]:
        tiles = [tile for job in sorted(worker_jobs) for tile in job]  # by group, weight block, t0
        row = [len(records)]
        if shape.group_by_variant:
            for v in range(len(shape.token_variants)):
                records.extend(sorted((t for t in tiles if t[3] == v), key=lambda t: (t[0], t[2], t[1])))
                row.append(len(records))
        else:
            records.extend(tiles)
            row.append(len(records))
        offsets.append(row)
    return records, offsets


# --------------------------------------------------------------------------------------------------
# Launch arguments and descriptor selection, shared by both kernels
# --------------------------------------------------------------------------------------------------

import cuda.bindings.driver as cuda  # noqa: E402
import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from cutlass._mlir.dialects import cuda as _cuda_dialect  # noqa: E402
from cutlass._mlir.dialects import cute as _cute_ir  # noqa: E402
from cutlass._mlir.dialects import cute_nvgpu as _cute_nvgpu_ir  # noqa: E402

INPUT_FIELDS = ("a", "b", "c", "sfa", "sfb")  # the addresses every call brings, per group
SIZE_FIELDS = ("m", "n", "k")  # int32 per group, fixed by the shape signature
TMA_DESC_BYTES = 128


class LaunchArgs:
    """Every runtime argument of one compiled launch, in ctypes storage that each call rewrites in
    place, and the CUDA stream.

    It is a CuTe DSL JIT argument (__get_mlir_types__, __c_pointers__, __new_from_mlir_values__):
    inside @cute.jit it becomes a LaunchArgsView with the same field names. The int64 block holds
    first the inputs' addresses in the order the host gathers them (a, b, c of every group, then
    sfa, sfb of every group), then the arch's own per-group addresses, then launch-wide addresses;
    the int32 block holds m, n, k of every group, then launch-wide integers."""

    def __init__(self, num_groups: int, group_addresses=(), addresses=(), integers=()):
        self.num_groups = num_groups
        self.layout = _ArgsLayout(num_groups, tuple(group_addresses), tuple(addresses), tuple(integers))
        self.i64 = (ctypes.c_int64 * self.layout.num_i64)()
        self.i32 = (ctypes.c_int32 * self.layout.num_i32)()
        self.stream = ctypes.c_void_p(0)
        base64, base32 = ctypes.addressof(self.i64), ctypes.addressof(self.i32)
        self._c_pointers = (
            [base64 + 8 * i for i in range(self.layout.num_i64)]
            + [base32 + 4 * i for i in range(self.layout.num_i32)]
            + [ctypes.addressof(self.stream)]
        )

    def set(self, name: str, values) -> None:
        """Write a field: a list with one value per group, or a single launch-wide value."""
        block, start, count = self.layout.slot(name)
        block = self.i64 if block == "i64" else self.i32
        if name in self.layout.addresses or name in self.layout.integers:
            block[start] = values
        else:
            block[start : start + count] = list(values)

    def set_inputs(self, pointers) -> None:
        """The 5G input addresses in gather order (see the class docstring)."""
        self.i64[: len(pointers)] = pointers

    # CuTe DSL JIT argument protocol
    def __get_mlir_types__(self):
        return (
            [cutlass.Int64.mlir_type] * self.layout.num_i64
            + [cutlass.Int32.mlir_type] * self.layout.num_i32
            + [_cuda_dialect.StreamType.get()]
        )

    def __c_pointers__(self):
        return self._c_pointers

    def __new_from_mlir_values__(self, values):
        n64, n32 = self.layout.num_i64, self.layout.num_i32
        return LaunchArgsView(
            self.layout,
            [cutlass.Int64(v) for v in values[:n64]] + [cutlass.Int32(v) for v in values[n64 : n64 + n32]],
            values[n64 + n32],
        )


@dataclass(frozen=True)
class _ArgsLayout:
    num_groups: int
    group_addresses: tuple
    addresses: tuple
    integers: tuple

    @property
    def num_i64(self) -> int:
        return self.num_groups * (len(INPUT_FIELDS) + len(self.group_addresses)) + len(self.addresses)

    @property
    def num_i32(self) -> int:
        return self.num_groups * len(SIZE_FIELDS) + len(self.integers)

    def slot(self, name: str):
        """(block, first index, count) of a field; per-group fields other than the inputs are
        stored group after group."""
        g = self.num_groups
        inputs = len(INPUT_FIELDS) * g
        if name in self.group_addresses:
            return "i64", inputs + self.group_addresses.index(name) * g, g
        if name in self.addresses:
            return "i64", inputs + len(self.group_addresses) * g + self.addresses.index(name), 1
        if name in SIZE_FIELDS:
            return "i32", SIZE_FIELDS.index(name) * g, g
        if name in self.integers:
            return "i32", len(SIZE_FIELDS) * g + self.integers.index(name), 1
        raise KeyError(name)

    def index(self, name: str, group: int) -> tuple:
        """(block, index) of one group's value of a per-group field."""
        g = self.num_groups
        if name in ("a", "b", "c"):
            return "i64", 3 * group + ("a", "b", "c").index(name)
        if name in ("sfa", "sfb"):
            return "i64", 3 * g + 2 * group + ("sfa", "sfb").index(name)
        block, start, _ = self.slot(name)
        return block, start + group


class LaunchArgsView:
    """LaunchArgs inside @cute.jit and @cute.kernel code: `view.a[g]` is group g's address of a
    (Int64), `view.m[g]` its M (Int32), `view.tiles` a launch-wide value, `view.stream` the stream."""

    def __init__(self, layout: _ArgsLayout, values: list, stream):
        self._layout, self._values, self.stream = layout, values, stream

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        layout = self.__dict__["_layout"]
        values = self.__dict__["_values"]
        if name in INPUT_FIELDS or name in layout.group_addresses or name in SIZE_FIELDS:
            found = []
            for g in range(layout.num_groups):
                block, i = layout.index(name, g)
                found.append(values[i if block == "i64" else layout.num_i64 + i])
            return tuple(found)
        try:
            block, start, _ = layout.slot(name)
        except KeyError:
            raise AttributeError(name) from None
        return values[start if block == "i64" else layout.num_i64 + start]

    # passing the view on to a @cute.kernel: its values become kernel parameters (the stream stays)
    def __extract_mlir_values__(self):
        return [v.ir_value() for v in self._values]

    def __new_from_mlir_values__(self, values):
        return LaunchArgsView(self._layout, [type(o)(v) for o, v in zip(self._values, values)], self.stream)


def select_by_group(group, values):
    """values[group] for a runtime group index: a chain of selects, no branches (values are
    kernel parameters, one per group)."""
    chosen = values[0]
    for g in range(1, len(values)):
        chosen = type(chosen)(cutlass.select_(group == g, values[g], chosen))
    return chosen


def _tma_desc_type():
    return _cute_ir.PtrType.get(_cute_nvgpu_ir.TmaDescriptorTiledType.get(), _cute_ir.AddressSpace.generic, 64)


def tma_desc_address(atom) -> cutlass.Int64:
    """Generic address of a TMA atom's descriptor: a __grid_constant__ kernel parameter that the
    host code encoded at launch (the TMA unit reads descriptors through generic addresses)."""
    exec_atom = _cute_nvgpu_ir.atom_make_exec_tma(atom._trait.value)
    return _cute_nvgpu_ir.get_tma_desc_addr(_tma_desc_type(), exec_atom).toint()


def group_tma_desc(group, atoms):
    """The descriptor of `group`'s atom among `atoms` (one per group), as the pointer a TMA copy
    takes in tma_desc_ptr=: host-built descriptors, no tensormap writes in the kernel."""
    address = select_by_group(group, [tma_desc_address(atom) for atom in atoms])
    aligned = _cute_ir.assume(_cute_ir.ConstrainedIntType.get(64, 64), address.ir_value())
    return _cute_ir.inttoptr(_tma_desc_type(), aligned)


def gmem_matrix(dtype, address, rows, cols, row_stride=None):
    """A (rows, cols) global tensor at `address`, rows `row_stride` elements apart (default cols)."""
    ptr = cute.make_ptr(dtype, address, cute.AddressSpace.gmem, assumed_align=16)
    return cute.make_tensor(ptr, cute.make_layout((rows, cols), stride=(cols if row_stride is None else row_stride, 1)))


class CompiledLaunch:
    """A compiled launch bound to its LaunchArgs: a call writes the stream into the arguments and
    runs the compiled host function. The packed argument array (addresses of the LaunchArgs fields)
    is built once, so a call costs one ctypes call into the generated host code, which encodes the
    per-group TMA descriptors and launches. Uses CuTe DSL 4.3.5's JitExecutor (to(), the packed
    argument helper, capi_func and cuda_result), which requirements.txt pins."""

    def __init__(self, compiled, args: LaunchArgs, buffers=()):
        self.args = args
        self.buffers = buffers  # device tables and scratch that args point into, kept alive here
        self._executor = compiled.to(None)
        self._packed = self._executor._get_invoke_packed_args(list(args.__c_pointers__()))
        self._run = self._executor.jit_module.capi_func
        self._result = self._executor.cuda_result

    def __call__(self, stream_handle: int) -> None:
        self.args.stream.value = stream_handle
        self._run(self._packed)
        if self._result is not None and self._result.value != 0:
            raise RuntimeError(f"kernel launch failed: CUDA error {self._result.value}")


# --------------------------------------------------------------------------------------------------
# Plans: everything that depends only on the shapes, cached by shape signature
# --------------------------------------------------------------------------------------------------


def _signature(problem_sizes) -> tuple:
    return tuple(map(tuple, problem_sizes))


def _input_tensors(data) -> list:
    """The 5G input tensors in gather order: a, b, c of every group, then sfa, sfb of every group."""
    return [t for group in data[0] for t in group] + [t for group in data[2] for t in group]


def _metadata(tensors) -> list:
    return [(t.dtype, t.shape, t.stride(), t.device) for t in tensors]


class ShapePlan:
    """One shape signature's compiled launch, schedule tables and scratch (built on its first call).

    A call checks the inputs' dtypes, shapes, strides and devices against the first call's (one list
    comparison; a mismatch reruns the full validation, which names the group), writes the 5G input
    addresses into the launch arguments and launches. Nothing here holds a user tensor."""

    def __init__(self, sizes: tuple, metadata: list, launch: CompiledLaunch):
        self.sizes = sizes
        self.metadata = metadata
        self.launch = launch

    def run(self, data) -> None:
        tensors = _input_tensors(data)
        if _metadata(tensors) != self.metadata:
            validate_inputs(data)  # raises naming the group, unless only the (unused) L strides differ
        pointers = [t.data_ptr() for t in tensors]
        if functools.reduce(operator.or_, pointers) % 16:
            validate_inputs(data)  # names the misaligned tensor
        self.launch.args.set_inputs(pointers)
        self.launch(torch.cuda.current_stream(self.metadata[0][3]).cuda_stream)


_plans: dict = {}


def _build_plan(data) -> ShapePlan:
    sizes = validate_inputs(data)
    tensors = _input_tensors(data)
    device = tensors[0].device
    if device.type != "cuda":
        raise ValueError(f"custom_kernel needs CUDA tensors on a {SUPPORTED_GPUS} GPU; the inputs are on {device}")
    major, minor = torch.cuda.get_device_capability(device)
    if major == 10:
        launch = make_sm100_launch(sizes, device)
    elif (major, minor) == (9, 0):
        import sm90_kernel  # only on Hopper: keeps this file self-contained for the board

        launch = sm90_kernel.make_sm90_launch(sizes, device)
    else:
        raise ValueError(f"no kernel for compute capability {major}.{minor}: this submission runs on {SUPPORTED_GPUS}")
    return ShapePlan(sizes, _metadata(tensors), launch)


def make_sm100_launch(sizes, device):
    raise NotImplementedError


# --------------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------------


def custom_kernel(data):
    """Write each group's C = A @ B^T (block-scaled, vector 16) into its `c`; return the list of c."""
    try:
        key = (_signature(data[3]), data[0][0][0].device)
    except (TypeError, IndexError, AttributeError):
        validate_inputs(data)  # says what is wrong with `data`
        raise
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = _build_plan(data)
    plan.run(data)
    return [c for _, _, c in data[0]]
