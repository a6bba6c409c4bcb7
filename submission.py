"""NVFP4 block-scaled grouped GEMM for GPU MODE's `nvfp4_group_gemm` (B200, CuTe DSL).

For every group g: C_g[m, n] = sum_k A_g[m, k] * SFA_g[m, k // 16] * B_g[n, k] * SFB_g[n, k // 16],
A (tokens) and B (weights) FP4 e2m1, scales e4m3 in the cuBLAS 128x4 blocked layout, C fp16.
One launch covers all groups. sm90_kernel.py is the Hopper path (imported only on 9.0). Figures,
and the ladder of what each design step gained or lost, live in BENCHMARKS.md, keyed by commit.

Design note (sm_100a path)
--------------------------
Configuration. The kernel is built from an Sm100Config; the line SM100_CONFIG = "..." below this
note picks it for the whole file ("shipped", "safe", or either with fields changed). Each field
switches one departure from NVIDIA's tested dense_blockscaled_gemm_persistent.py (cutlass v4.3.5):
the table at the end names it and the risk it isolates, so that tools/check.py can bisect a failing
first run down to the example's form (SM100_SAFE). A combination that cannot run is refused with one
ValueError naming the switches (NEEDS), never rewritten. One choice is made per shape, and tools
print it: sm100_shape_config keeps the 192-token variant and the clusters of two pairs only where
the schedule says they pay.

Operands. The weights B_g (N x K) are the MMA's A operand: 256 rows per worker, a 2-CTA pair
(tcgen05.mma.cta_group::2, M = 256, 128 rows in each CTA; cta_group 1: one CTA of 128 rows). The
tokens A_g (M = 1 to a few hundred) are its N side, the width chosen per tile among token_variants
(64, 128, 192): a 40-token group computes 64 columns. TMEM holds C^T of a tile (lane = weight row,
column = token).

Host path (shared with Hopper). custom_kernel looks the plan up by shape signature (problem sizes,
device, SM100_CONFIG). A plan is built on the first call of a signature: full validation, the tile
schedule (device tables), the compiled launch for the group count and configuration, its
LaunchArgs. Every later call checks the inputs' dtypes, shapes, strides and devices in one list
comparison, writes the 5G input addresses into the LaunchArgs ctypes block and calls the compiled
host function, which encodes every group's TMA descriptors (cuTensorMapEncodeTiled) and launches:
no allocation, no copy, no synchronization, no compile, and no cache holds a user tensor.

Descriptors. One TMA atom per group and operand (weights, tokens per variant, weight scales, token
scales, and C for the staged tail) is built in the host JIT, so each descriptor is a
__grid_constant__ kernel parameter (MAX_GROUPS = 32 fits the 32 KB parameter space). A warp picks
its group's descriptor by address: cvta.param of each group's descriptor, selected by selp on the
group index (descriptors="branch": each group's copy behind `if group == g`, with its own atom).
Nothing in the kernel writes a descriptor (no tensormap.replace, no fences). TMA coordinates come
from group 0's coordinate tensors: they are tile indices, and the group's descriptor bounds them.

Schedule (shared with Hopper: build_tile_schedule). On the host, per shape signature, each group is
cut into weight blocks of the worker's rows and token tiles of up to 128 tokens starting at
multiples of 128 (one block of the scale layout); a last sliver of fewer than 64 tokens joins the
tile before it into one of up to 192 tokens where that tile starts at a multiple of 192. With
jobs="tiles" every tile is its own job, so a block's tiles run on several pairs at about the same
time and share its weights in L2; "hybrid" (SM100_SAFE's) and "weight_blocks" run a block's tiles
back to back on one worker. Jobs are spread over the co-resident workers (the driver's occupancy
answer for the cluster size) longest-processing-time first by the modeled mainloop time (B200Model),
then improved by moves and swaps. Each worker walks its records (RECORD_FIELDS: group, n0, t0,
variant, m_end, n, k_end, sole_reader_ends) in order; tests/kernel/test_schedule.py walks the
table in Python as the kernel does and checks that every output element is written once.

Roles (192 threads a CTA, one CTA an SM, clusters of 2 CTAs, or 4 with cluster_pairs 2):
  warp   method     waits on                         signals
  5      load       stage empty (each pair's MMA     the leader's stage full (expect-tx of the
                    commit)                          pair's bytes for the tile's variant)
  4      mma        stage full, accumulator empty    stage empty in every CTA of the cluster,
         (leader    (4 epilogue warps x the pair's   accumulator full in both CTAs
         CTA)       CTAs)                            (tcgen05.commit, multicast)
  0-3    epilogue   accumulator full                 the leader's accumulator empty
Warp 0 allocates TMEM (512 columns: two accumulators of the widest variant and the scales) and frees
it at the end. Named barriers: Barrier (epilogue, TMEM allocation). With cta_group 1 every CTA is
its own leader and 4 warps release an accumulator.

The data's way. Per 256-deep k-tile the TMA warp of each CTA loads its 128 weight rows, its half of
the token rows and the weight scales into one shared-memory stage (2-CTA TMA, completing on the
leader's full barrier) and its half of the token scales, multicast to both CTAs of the pair (with
cluster_pairs 2: half of its token rows to its counterpart in the other pair, a quarter of the
token scales to all four). The stages fill all of shared memory but the barriers (8 with the
64/128 kernel, 6 with 192). The leader's MMA warp copies the stage's scales to TMEM (tcgen05.cp)
and issues 4 block-scaled tcgen05.mma (kind::mxf4nvf4, K = 64) into the tile's accumulator; its
commit frees the stage. Two accumulators let the epilogue of one tile overlap the next tile's
mainloop. L2 policies: tokens evict-last (every weight block re-reads them), weights evict-first on
the last tile of their sole reader. Token rows past M are zero-filled by the TMA; a pair's second
CTA past N has every box out of bounds and stores nothing.

Clusters of two pairs (cluster_pairs 2). Where the schedule leaves pairs idle, their loads from L2,
not the tensor pipe, pace the mainloop, and every weight block's pair re-reads each token k-tile.
Two pairs then run one token tile on two neighbouring weight blocks in step (records of 512 weight
rows; the second pair adds 256 to n0), and each token k-tile crosses L2 once for both. A stage is
refilled once both pairs' MMA commits arrived on its empty barrier (arrival count 2, as NVIDIA's
example counts its multicast producers).

Start-up. Programmatic dependent launch (pdl): each kernel lets the next call's kernel launch as
soon as all its CTAs run, so the next launch and its prologue overlap this kernel's tail; the TMA
warp waits for the previous grid (griddepcontrol.wait) before its first load, and every other role
depends on loads. Before that wait the TMA warp prefetches its first record's descriptors
(prefetch.tensormap) and, with self_warm, the boxes of its first k-tiles into L2
(cp.async.bulk.prefetch.tensor): none of it depends on the previous grid, and L2 is the point of
coherence, so the loads after the wait still read what that grid wrote. With warmers, the
co-resident workers the schedule leaves idle launch first and prefetch the call's inputs into L2
while the previous call runs, then exit without waiting. With lean_walk each worker's first record
rides in its row of the offsets table, read before the cluster barrier's wait, so the first copy
follows the waits with no memory read between.

Epilogue ("tma_last"). The accumulator holds C^T, so a lane owns one weight column and 32
consecutive token rows. Every tile but a worker's last is stored from registers (_store_direct):
inline tcgen05.ld 32x32b.x32, neighbouring lanes swap halves with one shuffle (row_pair_word,
shared with Hopper) so each lane stores 4 bytes, every store predicated on its token row being
below M (store_words_if, shared with Hopper); it overlaps the next tile's mainloop. The worker's
last tile is the call's tail and goes NVIDIA's way for a C whose contiguous mode is the MMA's M
(_store_staged): the TMEM-load atom get_tmem_load_op picks (tcgen05.ld 16x256b), one wait and the
accumulator's release, stmatrix.trans into C staging in the weights' stages (idle once the last
accumulator is full), fence.proxy.async, a warp barrier and a TMA store of the warp's own 32 x 32
box, clipped at M and N; the CTA waits for its stores before it exits. "atoms" stores every tile
from registers through the library's TMEM-load atom.

Departures from NVIDIA's dense_blockscaled_gemm_persistent.py (cutlass v4.3.5), by switch:
  field           shipped   safe     the example                    risk the switch isolates
  cta_group       2         1        2 when mma_tiler M is 256      2-CTA MMA and TMEM alloc, the pair's
                                                                    TMA completing on the leader's
                                                                    barrier, out-of-bounds boxes
  token_variants  64/128/   128      one MMA N per kernel           several tiled MMAs in one kernel,
                  192                                               expect-tx per variant, two scale
                                                                    blocks per 192-token k-tile
  multicast       on        off      multicast when the cluster     multicast TMA of the token scales
                                     allows
  pdl             on        off      no PDL                         griddepcontrol across calls
  l2_hints        on        off      no createpolicy                createpolicy, cache-hint operands
  epilogue        tma_last  atoms    TMEM-load atoms, C staged,     inline tcgen05.ld, direct stores
                                     TMA store                      predicated on M
  descriptors     selp      branch   each atom's own descriptor     descriptor addresses by cvta.param
                                                                    and selp (tma_desc_ptr)
  jobs            tiles     hybrid   a linear tile scheduler        none on B200 alone: the Hopper path
                                                                    runs the same table walk
  warmers         on        off      a grid of working CTAs only    idle workers that prefetch and exit
                                                                    without the dependency wait
  self_warm       on        off      no prefetch before the wait    tensor prefetch before the
                                                                    dependency wait
  cluster_pairs   2         1        clusters of (4, 1), B          4-CTA clusters, multicast tokens,
                                     multicast across M             stages freed by two commits
  lean_walk       on        off      a scheduler that computes      the first record read from the
                                     its tiles (no table)           worker's row, fields by shifts
Departures no switch removes: one launch for all groups with one TMA atom per group and operand;
a tile's trip count and token range from the host's table; token boxes partly past M, zero-filled by
the TMA; the descriptor prefetch before the dependency wait (as the example prefetches its atoms').

Verified here without a B200 (README): compiled for sm_100a and inspected (tools/inspect_sm100.py),
executed by the emulator (tools/emulate.py, emulator/DESIGN.md) in every configuration against the
exact reference with race detection, and timed there; the host path, the schedule, descriptors as
kernel parameters, the row-paired predicated stores and PDL run on the H200 through the Hopper path.
Only a B200 shows its timing, the effect of the L2 hints, how its dispatcher places warmers and
clusters, and what ptxas makes of this PTX.
"""
from __future__ import annotations

# The B200 configuration this file runs: "shipped", "safe", or either with fields changed, e.g.
# "shipped,multicast=off" (Sm100Config below lists the fields; tools/check.py names this line);
# "cublas", the last rung, runs no kernel of this file but cuBLAS per group (CublasPlan).
SM100_CONFIG = "shipped"

import bisect
import ctypes
import enum
import functools
import heapq
import operator
import threading
import dataclasses
from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np
import torch

# --------------------------------------------------------------------------------------------------
# The contract
# --------------------------------------------------------------------------------------------------

SF_VEC_SIZE = 16  # one e4m3 scale per 16 FP4 values along K
SF_BLOCK_ROWS = 128  # the blocked scale layout pads rows to 128 ...
SF_BLOCK_COLS = 4  # ... and scale columns to 4 (64 values of K)
SF_BLOCK_BYTES = SF_BLOCK_ROWS * SF_BLOCK_COLS  # one contiguous 128 x 4 block of e4m3 scales
K_MULTIPLE = 256  # every K must be a multiple of the largest K tile (B200: 256)
N_MULTIPLE = 128  # both kernels cut the weights (N) into 128-row tiles: one CTA's MMA rows
MAX_GROUPS = 32  # per-group TMA descriptors are kernel parameters (32 KiB of parameter space)
SUPPORTED_GPUS = "B200 (compute capability 10.0) or H100/H200 (9.0)"


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
    for g, (abc_g, sf_g, problem) in enumerate(zip(abc, sf_reordered, problem_sizes)):
        if len(problem) != 4:
            raise _contract_error(g, problem, "problem size must be (M, N, K, L)")
        if not isinstance(abc_g, (tuple, list)) or len(abc_g) != 3:
            raise _contract_error(g, problem, "abc_tensors entry must be (a, b, c)")
        if not isinstance(sf_g, (tuple, list)) or len(sf_g) != 2:
            raise _contract_error(g, problem, "sfasfb_reordered_tensors entry must be (sfa_reordered, sfb_reordered)")
        (a, b, c), (sfa, sfb) = abc_g, sf_g
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

RECORD_FIELDS = ("group", "n0", "t0", "variant", "m_end", "n", "k_end", "sole_reader_ends")  # one int32 each
JOB_POLICIES = ("tiles", "weight_blocks", "hybrid")


@dataclass(frozen=True)
class ScheduleShape:
    """How an arch cuts the outputs into tiles and spreads them over its workers (CTAs or pairs)."""

    weight_rows: int  # weight rows (N) per tile: one CTA's (Hopper 128) or one CTA pair's (B200 256)
    token_chunks: tuple  # candidate token-tile heights; the planner keeps the best modeled makespan
    token_variants: tuple  # compiled token widths (MMA N), ascending; a tile runs the smallest that fits
    tile_cost: Callable  # (variant width, K) -> modeled time of one tile, in any unit; a job's is the sum
    balance_floor: float  # measured ratio busiest / mean worker that no balancing beats
    group_by_variant: bool  # a worker's tiles sorted by variant, one offset per variant (Hopper)
    # What one worker runs back to back: "tiles" (every tile its own job), "weight_blocks" (a
    # weight block's token tiles, so its later tiles find the weights in L2) or "hybrid" (weight
    # blocks, the costliest split into their tiles until there are as many jobs as workers).
    jobs: str
    # A token tile starts at a multiple of its variant's width (the B200 kernel finds a tile's token
    # box by t0 // width): a sliver joins the tile before it only where that tile stays aligned.
    aligned_tiles: bool = False


def _token_tiles(m: int, chunk: int, variants: tuple, aligned: bool = False):
    """(t0, m_end, variant index) of the token tiles of a group of m tokens cut every `chunk` rows.
    A sliver shorter than the smallest variant is folded into the previous tile when that still
    fits the largest variant (and, `aligned`, the tile starts at a multiple of the variant it then
    runs)."""
    starts = list(range(0, m, chunk))
    if len(starts) > 1 and m - starts[-1] < variants[0] and m - starts[-2] <= variants[-1]:
        width = variants[bisect.bisect_left(variants, m - starts[-2])]
        if not aligned or starts[-2] % width == 0:
            starts.pop()
    return [
        (t0, m_end, bisect.bisect_left(variants, m_end - t0))
        for t0, m_end in zip(starts, starts[1:] + [m])
    ]


def _added_in_order(costs) -> float:
    """The float costs added one after another, left to right, as Python 3.11's sum() adds them. From
    3.12 sum() compensates its rounding, so the same schedule's loads would differ in their last bits
    between interpreters and _balance's near-ties break the other way: the board runs Python 3.13,
    CI 3.11, and a shape must get the same tiles under both."""
    return functools.reduce(operator.add, costs, 0.0)


def _longest_first(jobs, count):
    """Longest processing time first: each (cost, payload) job, biggest first, to the least loaded of
    `count` workers. Returns each worker's jobs and its load (its costs added in the order its jobs
    went in)."""
    heap = [(0, w) for w in range(count)]
    bins = [[] for _ in range(count)]
    for job in sorted(jobs, key=lambda j: -j[0]):
        load, w = heapq.heappop(heap)
        bins[w].append(job)
        heapq.heappush(heap, (load + job[0], w))
    loads = [0] * count
    for load, w in heap:
        loads[w] = load
    return bins, loads


def _move(bins, loads, hi, j, a, b):
    """Job `a` of worker `hi` to worker `j`, and job `b` of `j` (None: none) to `hi`."""
    job = bins[hi].pop(a)
    if b is not None:
        other = bins[j].pop(b)
        bins[hi].append(other)
        loads[hi] += other[0]
        loads[j] -= other[0]
    bins[j].append(job)
    loads[hi] -= job[0]
    loads[j] += job[0]


def _balance(jobs, num_workers):
    """Spread (cost, payload) jobs over min(num_workers, #jobs) workers: longest processing time
    first, then moves and swaps that lower the most loaded worker. LPT alone left the busiest Hopper
    CTA 12-17% above the mean on the benchmarks; a few hundred swaps bring the model within a few
    percent.

    Each step takes, of every move of one of the busiest worker's jobs to another worker and every
    swap of two jobs between them that lowers the pair's higher load, the one whose higher load is
    least; on a tie the first in the order: other worker, then moves before swaps, then the busiest
    worker's job, then the other's. The candidates of one step are weighed at once as arrays (the
    same float operations as one at a time: tests/kernel/test_schedule.py holds the two equal)."""
    count = min(num_workers, len(jobs))
    bins, loads = _longest_first(jobs, count)

    def fill(table, w):  # row w: bins[w]'s costs, NaN past its jobs
        table[w] = np.nan
        table[w, :len(bins[w])] = [cost for cost, _ in bins[w]]

    def cost_table():  # [w, i]: bins[w][i]'s cost; room for two more jobs per worker
        table = np.empty((count, max(len(b) for b in bins) + 2))
        for w in range(count):
            fill(table, w)
        return table

    costs = cost_table()
    for _ in range(20 * count):
        hi = max(range(count), key=loads.__getitem__)
        top, mine, load = loads[hi], costs[hi, :len(bins[hi])], np.array(loads, dtype=np.float64)
        gap = top - load
        with np.errstate(invalid="ignore"):  # NaN (no job) compares False: not a candidate
            moved = (mine[None, :] > 0) & (mine[None, :] < gap[:, None])
            move = np.where(moved, np.maximum(top - mine[None, :], load[:, None] + mine[None, :]), np.inf)
            delta = mine[None, :, None] - costs[:, None, :]
            swapped = (delta > 0) & (delta < gap[:, None, None])
            swap = np.where(swapped, np.maximum(top - delta, load[:, None, None] + delta), np.inf)
        move[hi] = swap[hi] = np.inf
        # one row per other worker: its moves, then its swaps (row-major): argmin's first minimum is the tie rule
        candidates = np.concatenate([move, swap.reshape(count, -1)], axis=1)
        k = int(np.argmin(candidates))
        if candidates.flat[k] == np.inf:
            break
        j, r = divmod(k, candidates.shape[1])
        a, b = (r, None) if r < len(mine) else divmod(r - len(mine), costs.shape[1])
        _move(bins, loads, hi, j, a, b)
        if max(len(bins[hi]), len(bins[j])) > costs.shape[1]:
            costs = cost_table()
        else:
            fill(costs, hi)
            fill(costs, j)
    return max(loads), [[payload for _, payload in b] for b in bins]


def _split_jobs(blocks, num_workers: int):
    """The hybrid policy: weight-block jobs, where there are enough of them to fill the workers;
    otherwise the costliest blocks are cut into single tiles until every worker can get a job
    (benchmarks 3 and 4 have 24 and 32 weight blocks of 256 rows for 74 SM pairs: all are cut)."""
    jobs = sorted(blocks, key=lambda job: -job[0])
    split = []
    while len(jobs) + len(split) < num_workers:
        # The costliest block that has tiles to split: a costlier one-tile block cannot help.
        splittable = next((i for i, job in enumerate(jobs) if len(job[2]) > 1), None)
        if splittable is None:
            break
        _, _, tiles, costs = jobs.pop(splittable)
        # Several workers read this block now: none of them may evict it.
        split.extend((cost, [_not_sole_reader(tile)]) for cost, tile in zip(costs, tiles))
    return [(cost, tiles) for cost, _, tiles, _ in jobs] + split


def _not_sole_reader(tile):
    """The record with sole_reader_ends cleared: other workers read its weight block too."""
    return tile[:7] + (0,)


def build_tile_schedule(sizes, num_workers: int, shape: ScheduleShape):
    """The tile records and per-worker offsets of one problem set.

    records: list of int32 rows RECORD_FIELDS = (group, n0, t0, variant, m_end, n, k_end,
    sole_reader_ends): the record computes tokens t0..m_end-1 of `group` against weight rows
    n0..n0 + weight_rows - 1 (clipped at n) over the whole K (k_end), with token width
    shape.token_variants[variant]; sole_reader_ends is 1 on the last tile of a weight block whose
    tiles all run as one job (one worker reads the block, and this tile reads it for the last time:
    the B200 kernel streams it evict-first), else 0.
    offsets: one row per worker. With shape.group_by_variant, worker w runs variant v on records
    [offsets[w][v], offsets[w][v + 1]); otherwise it runs records [offsets[w][0], offsets[w][1]) in
    order. Workers' ranges are contiguous and in worker order.

    Among shape.token_chunks the planner keeps the one whose balanced schedule has the smallest
    modeled makespan: short token tiles cost more weight traffic but fill more workers when a
    problem has few weight blocks (two groups of 3072 x 4096 make 24 weight blocks of 256 rows)."""
    best = None
    for chunk in shape.token_chunks:
        blocks = []  # (job cost, block, its tiles, their costs) per weight block
        for group, (m, n, k) in enumerate(sizes):
            token_tiles = _token_tiles(m, chunk, shape.token_variants, shape.aligned_tiles)
            for n0 in range(0, n, shape.weight_rows):
                tiles = [
                    (group, n0, t0, v, m_end, n, k, int(i == len(token_tiles) - 1))
                    for i, (t0, m_end, v) in enumerate(token_tiles)
                ]
                costs = [shape.tile_cost(shape.token_variants[v], k) for _, _, v in token_tiles]
                blocks.append((_added_in_order(costs), (group, n0), tiles, costs))
        if shape.jobs == "weight_blocks":
            jobs = [(cost, tiles) for cost, _, tiles, _ in blocks]
        elif shape.jobs == "hybrid":
            jobs = _split_jobs(blocks, num_workers)
        else:  # every tile its own job: several readers per block
            jobs = [
                (cost, [tile if len(tiles) == 1 else _not_sole_reader(tile)])
                for _, _, tiles, costs in blocks
                for cost, tile in zip(costs, tiles)
            ]
        total = _added_in_order(cost for cost, _ in jobs)
        makespan, assigned = _balance(jobs, num_workers)
        makespan = max(makespan, shape.balance_floor * total / len(assigned))
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

    def set_sizes(self, sizes) -> None:
        """m, n, k of every group, from ((m, n, k), ...)."""
        for i, field in enumerate(SIZE_FIELDS):
            self.set(field, [size[i] for size in sizes])

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


# A worker's row of the offsets table with lean_walk: its first and end record, then a copy of its
# first record, padded to 64 bytes so that no row straddles two 128-byte lines (torch aligns the
# table to 512 bytes); without lean_walk a row is the two offsets alone.
WORKER_ROW = 16
# The fields of a record the TMA warp reads: group, n0, t0, variant, k_end, sole_reader_ends.
LOAD_FIELDS = (0, 1, 2, 3, 6, 7)


def _load_fields(tiles, t) -> tuple:
    """The LOAD_FIELDS of record t of the kernel's record table."""
    return tuple(tiles[t, field] for field in LOAD_FIELDS)


def worker_rows(records, offsets, lean_walk: bool) -> list:
    """The offsets table as the B200 kernel reads it: per worker its (first, end) record and, with
    lean_walk, a copy of its first record (zeros for a worker without records), WORKER_ROW int32 each."""
    if not lean_walk:
        return [list(row[:2]) for row in offsets]
    pad = [0] * (WORKER_ROW - 2 - len(RECORD_FIELDS))
    return [list(row[:2]) + (list(records[row[0]]) if row[0] < row[1] else [0] * len(RECORD_FIELDS)) + pad
            for row in offsets]


def tiles_of(value, size: int, shift: bool):
    """value // size: with `shift`, one arithmetic shift where size is a power of 2 (it rounds toward
    minus infinity as Python's floor division does, which compiles to ten instructions)."""
    if shift and size & (size - 1) == 0:
        return value >> (size.bit_length() - 1)
    return value // size


def gmem_matrix(dtype, address, rows, cols):
    """A row-major (rows, cols) global tensor at `address`."""
    ptr = cute.make_ptr(dtype, address, cute.AddressSpace.gmem, assumed_align=16)
    return cute.make_tensor(ptr, cute.make_layout((rows, cols), stride=(cols, 1)))


class CompiledLaunch:
    """A compiled launch bound to its LaunchArgs: a call writes the stream into the arguments and
    runs the compiled host function. The packed argument array (addresses of the LaunchArgs fields)
    is built once, so a call costs one ctypes call into the generated host code, which encodes the
    per-group TMA descriptors and launches. Uses the JitExecutor internals (to(), the packed
    argument helper, capi_func and cuda_result) of nvidia-cutlass-dsl 4.3.5 and 4.5.2, the versions
    requirements.txt accepts; 4.5.2's packed arguments live in a buffer its executor reuses on its
    next call, so the executor is called only here, once."""

    def __init__(self, compiled, args: LaunchArgs, buffers=(), config=None):
        self.compiled = compiled  # the kernel the shape runs (tools/emulate.py executes its PTX)
        self.args = args
        self.buffers = buffers  # device tables and scratch that args point into, kept alive here
        self.config = config  # the configuration the shape runs with (sm100_shape_config), as tools print it
        self._executor = compiled.to(None)
        self._packed = self._executor._get_invoke_packed_args(list(args.__c_pointers__()))
        self._run = self._executor.jit_module.capi_func
        self._result = self._executor.cuda_result

    def __call__(self, stream: torch.cuda.Stream) -> None:
        self.args.stream.value = stream.cuda_stream
        self._run(self._packed)
        if self._result is not None and self._result.value != 0:
            raise RuntimeError(f"kernel launch failed: CUDA error {self._result.value}")


# --------------------------------------------------------------------------------------------------
# The device: the facts the host path asks for, in one place
# --------------------------------------------------------------------------------------------------


class CudaDevice:
    """What the host path asks of the GPU: its compute capability, how many workers (clusters of
    cta_group CTAs) can be resident at once, and the current stream. tools/emulate.py replaces
    `DEVICE` with a B200 of its own to run the sm_100a kernel through this same host path on a CPU."""

    def capability(self, device) -> tuple:
        if device.type != "cuda":
            raise ValueError(f"custom_kernel needs CUDA tensors on a {SUPPORTED_GPUS} GPU; the inputs are on {device}")
        return torch.cuda.get_device_capability(device)

    @functools.cache
    def co_resident_workers(self, device, cluster_size: int) -> int:
        """Clusters of `cluster_size` CTAs (a worker's, one CTA a SM) that can all be resident at
        once (a persistent grid larger than that would run its last workers after the others): the
        driver's occupancy answer, as NVIDIA's examples size their grids, at most the SMs /
        cluster_size."""
        with torch.cuda.device(device):
            torch.cuda.synchronize()  # the device's context must be current for the driver's query
            workers = utils.HardwareInfo(torch.cuda.current_device()).get_max_active_clusters(cluster_size)
        return min(workers, torch.cuda.get_device_properties(device).multi_processor_count // cluster_size)

    def stream(self, device) -> "StreamHandle":
        """The current stream of `device`, as its handle: torch's raw query, without building a
        torch.cuda.Stream on every call (issue 21, item 8)."""
        return StreamHandle(torch._C._cuda_getCurrentRawStream(device.index))


class StreamHandle(NamedTuple):
    """A CUDA stream as the host path uses it: the handle that CompiledLaunch writes into the launch
    arguments (a torch.cuda.Stream has the same attribute)."""

    cuda_stream: int


DEVICE = CudaDevice()


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
        self.launch_lock = threading.Lock()
        self.stream = None  # handle of the stream the previous call launched on

    def run(self, data) -> None:
        tensors = _input_tensors(data)
        if _metadata(tensors) != self.metadata:
            validate_inputs(data)  # raises naming the group, unless only the (unused) L strides differ
        pointers = [t.data_ptr() for t in tensors]
        if functools.reduce(operator.or_, pointers) % 16:
            validate_inputs(data)  # names the misaligned tensor
        stream = DEVICE.stream(self.metadata[0][3])
        # The launch arguments are one block per plan: two threads calling with one shape must not
        # launch with each other's addresses (the call into the host function releases the GIL).
        with self.launch_lock:
            if stream.cuda_stream != self.stream:
                self._follow_previous_call(stream.cuda_stream)
            self.launch.args.set_inputs(pointers)
            self.launch(stream)

    def _follow_previous_call(self, handle: int) -> None:
        """A call on another stream than the previous call's: its stream first waits, on the GPU,
        for all that is queued on the previous one, the previous call's kernels included, which may
        still read what the plan holds once (the Hopper kernel's fp16 token scratch). Calls on one
        stream are ordered by it; only a switch pays (a per-call event cost each call 3-5 us of host
        time, issue 21, item 8). In a CUDA graph capture the graph orders its own nodes, and an
        outside stream must not enter it."""
        if self.stream is not None:
            if torch.cuda.is_current_stream_capturing():
                return
            device = self.metadata[0][3]
            previous = torch.cuda.ExternalStream(self.stream, device=device)
            torch.cuda.ExternalStream(handle, device=device).wait_stream(previous)
        self.stream = handle


class CublasPlan:
    """SM100_CONFIG = "cublas", the last rung of tools/check.py's bisection: every group through
    torch._scaled_mm, cuBLAS's FP4 block-scaled GEMM, as the board's reference computes on a B200,
    written into its c. The pre-reordered scales are cuBLAS's 128x4 blocked layout already: each is a
    permuted view of a contiguous (1, M/128, K/64, 32, 4, 4) buffer, passed as a flat view of that
    buffer (L = 1), so a call converts no layout and allocates nothing beyond what _scaled_mm does.
    cuBLAS has FP4 GEMMs on compute capability 10.x only (not on Hopper).

    It is cuBLAS, not this file's kernel: a bring-up fallback and the baseline of `eval.py benchmark
    --baseline cublas`, not a submission to rank (KernelGuard's _scaled_mm rule reads top-level
    functions and custom_kernel, not this method, so the file rates valid with this line too)."""

    def __init__(self, sizes: tuple, metadata: list):
        self.sizes = sizes
        self.metadata = metadata

    def run(self, data) -> None:
        if _metadata(_input_tensors(data)) != self.metadata:
            validate_inputs(data)
        for (a, b, c), (sfa, sfb) in zip(data[0], data[2]):
            torch._scaled_mm(a[:, :, 0], b[:, :, 0].transpose(0, 1), _blocked_scales(sfa), _blocked_scales(sfb),
                             out_dtype=torch.float16, out=c[:, :, 0])


def _blocked_scales(reordered: torch.Tensor) -> torch.Tensor:
    """A (32, 4, M/128, 4, K/64, 1) reordered scale tensor as the flat buffer it views (the order of
    reference.to_blocked, which _scaled_mm reads): a view, never a copy."""
    return reordered.permute(5, 2, 4, 0, 1, 3).view(-1)


_plans: dict = {}


def _build_plan(data):
    sizes = validate_inputs(data)
    tensors = _input_tensors(data)
    device = tensors[0].device
    if sm100_rung() == CUBLAS:
        try:
            major, minor = DEVICE.capability(device)
        except ValueError:
            raise ValueError(f'SM100_CONFIG = "{CUBLAS}" runs cuBLAS\'s FP4 GEMM on a B200; the inputs are on '
                             f"{device}") from None
        if major != 10:
            raise ValueError(f'SM100_CONFIG = "{CUBLAS}" needs a B200: cuBLAS has no FP4 GEMM on compute '
                             f"capability {major}.{minor}")
        return CublasPlan(sizes, _metadata(tensors))
    major, minor = DEVICE.capability(device)
    if major == 10:
        launch = make_sm100_launch(sizes, device, sm100_config())
    elif (major, minor) == (9, 0):
        import sm90_kernel  # only on Hopper: keeps this file self-contained for the board

        launch = sm90_kernel.make_sm90_launch(sizes, device, sm100_config())
    else:
        raise ValueError(f"no kernel for compute capability {major}.{minor}: this submission runs on {SUPPORTED_GPUS}")
    return ShapePlan(sizes, _metadata(tensors), launch)


# --------------------------------------------------------------------------------------------------
# Epilogue stores, shared by both kernels: two lanes pair up so each stores 4 bytes of one C row,
# and every store is predicated on its row being below M (C is never written outside c)
# --------------------------------------------------------------------------------------------------

from cutlass._mlir.dialects import llvm  # noqa: E402
from cutlass.cutlass_dsl import T, dsl_user_op  # noqa: E402


def ir_i32(x, loc=None, ip=None):
    return cutlass.Int32(x).ir_value(loc=loc, ip=ip)


def asm(ret, args, text, constraints, side_effects):
    """Inline PTX. Memory operations are marked side-effecting so that LLVM keeps them ordered with
    the barriers around them."""
    return llvm.inline_asm(
        ret, args, text, constraints, has_side_effects=side_effects, is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
    )


@dsl_user_op
def pack_f16x2(lo, hi, *, loc=None, ip=None):
    """f16x2 of two fp32 values, rounded to nearest even (lo in the low half)."""
    return cutlass.Int32(
        asm(
            T.i32(),
            [cutlass.Float32(hi).ir_value(loc=loc, ip=ip), cutlass.Float32(lo).ir_value(loc=loc, ip=ip)],
            "cvt.rn.f16x2.f32 $0, $1, $2;",
            "=r,f,f",
            False,
        )
    )


@dsl_user_op
def pack_f16x2_bits(lo, hi, *, loc=None, ip=None):
    """pack_f16x2 of two fp32 values given as their b32 bits (registers a tcgen05.ld wrote: read
    only here, after its wait, as the ISA requires; a b32 -> f32 conversion in LLVM would be placed
    right after the load)."""
    return cutlass.Int32(
        asm(
            T.i32(),
            [ir_i32(hi, loc, ip), ir_i32(lo, loc, ip)],
            "cvt.rn.f16x2.f32 $0, $1, $2;",  # .b32 registers agree with .f32 operands (PTX ISA: bit-size types)
            "=r,r,r",
            False,
        )
    )


@dsl_user_op
def row_pair_word(mine, odd, lane_xor: int, *, loc=None, ip=None):
    """The 4 bytes this lane stores, given `mine` = f16x2 (C[j, n], C[j + 1, n]) of its output
    column n, where lane ^ lane_xor holds column n ^ 1 (odd = n is odd): for even n, C[j, n..n+1];
    for odd n, C[j + 1, n-1..n]. One shuffle and one byte permute."""
    other = asm(
        T.i32(), [ir_i32(mine, loc, ip)], f"shfl.sync.bfly.b32 $0, $1, {lane_xor}, 0x1f, 0xffffffff;", "=r,r", True
    )
    selector = cutlass.Int32(odd) * (0x3276 - 0x5410) + 0x5410
    return cutlass.Int32(
        asm(T.i32(), [ir_i32(mine, loc, ip), other, ir_i32(selector, loc, ip)], "prmt.b32 $0, $1, $2, $3;", "=r,r,r,r", False)
    )


@dsl_user_op
def store_words_if(addr, words, rows_left, row: int, spacing: int, *, loc=None, ip=None):
    """Store 32-bit words[i] at addr + i * spacing bytes if rows_left > row (one predicate)."""
    stores = "".join(f" @p st.global.b32 [$0+{i * spacing}], ${i + 2};\n" for i in range(len(words)))
    asm(
        None,
        [cutlass.Int64(addr).ir_value(loc=loc, ip=ip), ir_i32(rows_left, loc, ip)] + [ir_i32(w, loc, ip) for w in words],
        "{\n .reg .pred p;\n" f" setp.gt.s32 p, $1, {row};\n" + stores + "}",
        ",".join(["l", "r"] + ["r"] * len(words)),
        True,
    )


# --------------------------------------------------------------------------------------------------
# B200 (sm_100a): configuration
# --------------------------------------------------------------------------------------------------

import cutlass.pipeline as pipeline  # noqa: E402
import cutlass.utils as utils  # noqa: E402
import cutlass.utils.blackwell_helpers as sm100_utils  # noqa: E402
import cutlass.utils.blockscaled_layout as blockscaled_utils  # noqa: E402
from cutlass.cute.nvgpu import cpasync, tcgen05  # noqa: E402


class TmemAllocator(utils.TmemAllocator):
    """The DSL's tensor memory allocator, carried into each warp's branch without running its constructor
    again. DSL 4.3.5's `__new_from_mlir_values__` calls `TmemAllocator(...)`, which with cta_group 2
    re-initializes the 2-CTA dealloc mbarrier in every dynamic region the object enters: after the cluster
    sync, unordered with the peer CTA's arrive on that barrier in `free()` (a worker of one or two tiles has
    no other order; the emulator's --races reported it). DSL 4.5.2 passes `initialize_mbarrier=False` there;
    this does the same on both: the copy keeps every field and takes the region's pointer values."""

    def __new_from_mlir_values__(self, values):
        from cutlass.cutlass_dsl import new_from_mlir_values

        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__)
        copy._alloc_result_dst_smem_ptr = new_from_mlir_values(self._alloc_result_dst_smem_ptr, [values[0]])
        if self._is_two_cta:
            copy._two_cta_tmem_dealloc_mbar_ptr = new_from_mlir_values(self._two_cta_tmem_dealloc_mbar_ptr,
                                                                       [values[1]])
        return copy


AB_DTYPE = cutlass.Float4E2M1FN
SF_DTYPE = cutlass.Float8E4M3FN
ACC_DTYPE = cutlass.Float32

CTA_WEIGHT_ROWS = 128  # MMA M per CTA: one TMEM lane per weight row
TOKEN_CHUNK = 128  # token tiles start at multiples of 128: one block of the blocked scale layout
K_TILE = 256  # per smem stage: 4 MMAs of K = 64
ACC_STAGES = 2  # TMEM accumulators: the epilogue of tile i overlaps the mainloop of tile i + 1
TMEM_COLUMNS = 512  # 2 accumulators of the widest variant + 16 SFA + 16 SFB columns per 128 tokens: 2 x 128 + 32
# or 2 x 192 + 48, rounded to a power of two
EPILOGUE_COLUMNS = 32  # tokens per TMEM load (32x32b.x32) in the epilogue
C_DTYPE = cutlass.Float16
# epilogue="tma_last": a warp's TMA store box, its 32 weight rows (TMEM lanes) x EPILOGUE_COLUMNS
# tokens, staged in shared memory; a stage holds the 4 warps' boxes (8 KB per CTA).
C_WARP_ROWS = 32
C_STAGE_BYTES = CTA_WEIGHT_ROWS * EPILOGUE_COLUMNS * 2
# The staged tile loads at most this many 32-token chunks into registers before storing them: 4 x
# 32 registers a thread; a 192-token tile goes in two batches.
BOX_BATCH_CHUNKS = 4
SMEM_BYTES = 232448  # 227 KiB: sm_100's dynamic shared memory per block
# Besides the stages: the mbarriers and the TMEM address, padded to the stages' 1024-byte alignment,
# and the 1024 bytes the allocator keeps to align the block's base (measured: the launch asks for
# stages + 2 KiB)
SMEM_RESERVED_BYTES = 2048

EPILOGUE_WARPS = (0, 1, 2, 3)
MMA_WARP = 4
TMA_WARP = 5
THREADS_PER_CTA = 32 * (len(EPILOGUE_WARPS) + 2)


class Barrier(enum.IntEnum):
    """Named barrier ids (0 is __syncthreads)."""

    EPILOGUE = 1  # the 4 epilogue warps, before freeing TMEM
    TMEM_ALLOC = 2  # the epilogue warps (allocator) and the MMA warp read the TMEM address


EPILOGUE_KINDS = ("tma_last", "atoms")
TOKEN_VARIANT_SETS = ((64, 128), (128,), (64, 128, 192))
_ON = {"on": True, "true": True, "1": True, "off": False, "false": False, "0": False}


@dataclass(frozen=True)
class Sm100Config:
    """What the sm_100a kernel is built with. Each field switches one departure from NVIDIA's tested
    dense_blockscaled_gemm_persistent.py (cutlass v4.3.5) on or off, so that a first run that fails
    can be bisected down to the example's form (SM100_SAFE; tools/check.py). The defaults are
    SM100_SHIPPED. A combination that cannot run is refused (ValueError naming the switches), never
    rewritten: NEEDS lists what each switch needs."""

    # 2: tcgen05.mma.cta_group::2, 256 weight rows per SM pair (half each), clusters of 2, the
    # pair's TMA completing on the leader's barrier; 1: 128 rows per SM, no pairing.
    cta_group: int = 2
    # MMA N widths compiled; a tile runs the smallest that covers its tokens (a 40-token group
    # computes 64 columns); (128,) is one tiled MMA with a fixed transaction size, as the example.
    # (64, 128, 192): a group's last sliver of fewer than 64 tokens joins the tile before it into
    # one 192-token tile (a 176-token group is one tile, not 128 + 48), so the weights stream once
    # for it; its token scales are two 128-row blocks, its accumulators 192 TMEM columns each.
    # sm100_shape_config picks 64/128 for a shape where the model says 192 does not pay.
    token_variants: tuple = (64, 128, 192)
    # The pair's token scales: each CTA loads half and multicasts it to both (cta_group 2 only).
    multicast: bool = True
    # Programmatic dependent launch across calls: the next call's launch and prologue overlap this
    # kernel's tail; loads wait for the previous grid (griddepcontrol).
    pdl: bool = True
    # L2 cache policies on the loads (createpolicy): tokens evict-last, weights evict-first on the
    # last tile of their sole reader.
    l2_hints: bool = True
    # "tma_last": every tile but each worker's last stores C from registers (inline tcgen05.ld
    # 32x32b.x32, st.global predicated on M); the last goes NVIDIA's way, through C staging in the
    # then idle weight stages and a TMA store per warp. "atoms": every tile from registers, loaded
    # by the library's TMEM-load copy atom (tcgen05.Ld32x32bOp), no TMA store.
    epilogue: str = "tma_last"
    # "selp": a copy takes its group's descriptor by address, picked by selects over the kernel
    # parameters (tma_desc_ptr); "branch": one copy per group behind `if group == g`, each with
    # its own atom's descriptor, as the example uses its atoms.
    descriptors: str = "selp"
    # The schedule's jobs (JOB_POLICIES); host-side, the same walk as the Hopper path.
    jobs: str = "tiles"
    # Warm L2 from idle SMs: the co-resident workers the schedule leaves without a tile launch
    # first, as warmers, and prefetch the call's inputs into L2 by the loads' own TMA boxes
    # (cp.async.bulk.prefetch.tensor), then exit.
    warmers: bool = True
    # Warm L2 from the workers themselves where no warmer launches: before the wait for the
    # previous grid, each worker's TMA warp prefetches the boxes of its first record's first
    # k-tiles.
    self_warm: bool = True
    # 2: clusters of two SM pairs (4 CTAs) that run one token tile on two neighbouring weight
    # blocks in step, each CTA multicasting half of its token rows to its counterpart in the other
    # pair. sm100_shape_config runs a shape's pairs alone where the clusters do not pay.
    cluster_pairs: int = 2
    # Each worker's first record rides in its row of the offsets table, read before the cluster
    # barrier's wait, and the TMA warp divides record fields by shifts; off: the first record is read
    # from the record table after that wait, and divided by Python's floor division.
    lean_walk: bool = True

    def __post_init__(self):
        if self.cta_group not in (1, 2):
            raise ValueError(f"cta_group must be 1 or 2, got {self.cta_group!r}")
        if self.cluster_pairs not in (1, 2):
            raise ValueError(f"cluster_pairs must be 1 or 2, got {self.cluster_pairs!r}")
        if tuple(self.token_variants) not in TOKEN_VARIANT_SETS:
            raise ValueError(f"token_variants must be one of {TOKEN_VARIANT_SETS}, got {self.token_variants!r}")
        for name, allowed in (("epilogue", EPILOGUE_KINDS), ("descriptors", ("selp", "branch")), ("jobs", JOB_POLICIES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        object.__setattr__(self, "token_variants", tuple(self.token_variants))
        unmet = self.unmet_needs()
        if unmet:
            raise ValueError("; ".join(
                f"{_setting(needed, getattr(self, needed))} cannot run {_setting(name, value)}: set "
                f"{_setting(name, off)}, or {_setting(needed, needed_value)}"
                for name, value, off, needed, needed_value in unmet
            ))

    def unmet_needs(self, values: dict | None = None) -> list:
        """The rows of NEEDS this configuration (or `values`, field -> value) breaks."""
        values = self.__dict__ if values is None else values
        return [need for need in NEEDS if values[need[0]] == need[1] and values[need[3]] != need[4]]

    def with_needs(self, **changes) -> "Sm100Config":
        """This configuration with `changes` and what they need, for tools that flip one switch
        (tools/check.py's bisection, tools/b200_model.py's table): a switch whose need a change takes
        away goes to its value without it (cta_group=1 turns multicast and the clusters off and drops
        the 192-token variant), and the need of a switch a change turns on is met (multicast=on
        brings cta_group=2). What it returns says every change (describe()); the kernel itself never
        rewrites a configuration. ValueError if two changes conflict."""
        values = {**self.__dict__, **changes}
        fixed = set(changes)
        while True:
            unmet = self.unmet_needs(values)
            if not unmet:
                return dataclasses.replace(self, **values)
            name, _, off, needed, needed_value = unmet[0]
            if name not in fixed:
                values[name] = off
            elif needed not in fixed:
                values[needed] = needed_value
                fixed.add(needed)
            else:
                return dataclasses.replace(self, **values)  # refused: the ValueError names both

    @property
    def weight_rows(self) -> int:
        """Weight rows (MMA M) of one worker: a CTA (cta_group 1) or an SM pair."""
        return CTA_WEIGHT_ROWS * self.cta_group

    @property
    def cluster_size(self) -> int:
        """CTAs of one cluster: a worker's (its pair, or its CTA), times cluster_pairs."""
        return self.cta_group * self.cluster_pairs

    @property
    def schedule_rows(self) -> int:
        """Weight rows (N) of one schedule record: a cluster's pairs take neighbouring blocks."""
        return self.weight_rows * self.cluster_pairs

    @property
    def accumulator_columns(self) -> int:
        """TMEM columns of one accumulator: the widest variant's tokens."""
        return self.token_variants[-1]

    @property
    def token_scale_blocks(self) -> int:
        """128-row blocks of token scales a stage holds: the widest variant's."""
        return -(-self.token_variants[-1] // TOKEN_CHUNK)

    @property
    def stage_bytes(self) -> int:
        """Shared memory of one stage in one CTA: its 128 weight rows, its share of the widest
        token tile (a pair splits the tokens), a 128-row scale block of weights and the widest
        tile's blocks of token scales."""
        tokens = self.token_variants[-1] // self.cta_group
        scale_block = TOKEN_CHUNK * K_TILE // SF_VEC_SIZE
        return (CTA_WEIGHT_ROWS + tokens) * K_TILE // 2 + (1 + self.token_scale_blocks) * scale_block

    @property
    def stages(self) -> int:
        """As many operand stages as shared memory holds, all of it but the barriers (the staged
        last tile's C reuses the weights' stages)."""
        return (SMEM_BYTES - SMEM_RESERVED_BYTES) // self.stage_bytes

    @property
    def c_stages(self) -> int:
        """C staging stages of epilogue="tma_last": one per 32 tokens of the widest tile, in the
        weights' stages (none is reused, so no store is waited for before the exit); 0 with "atoms"."""
        return self.accumulator_columns // EPILOGUE_COLUMNS if self.epilogue == "tma_last" else 0

    @classmethod
    def parse(cls, text: str) -> "Sm100Config":
        """"shipped" or "safe", optionally followed by ",field=value" changes ("safe,pdl=on"); a
        bare "field=value,..." changes the shipped configuration. Booleans: on/off; token_variants:
        64/128, 128 or 64/128/192. ValueError in one line naming the part that is wrong."""
        parts = [p.strip() for p in str(text).split(",") if p.strip()]
        base = SM100_SHIPPED
        if parts and "=" not in parts[0]:
            named = {"shipped": SM100_SHIPPED, "safe": SM100_SAFE}
            if parts[0] not in named:
                raise ValueError(f"unknown configuration {parts[0]!r}: shipped, safe, or field=value changes")
            base = named[parts.pop(0)]
        changes = {}
        types = {f.name: type(getattr(SM100_SHIPPED, f.name)) for f in dataclasses.fields(cls)}
        for part in parts:
            name, _, value = part.partition("=")
            name, value = name.strip(), value.strip()
            if name not in types or not value:
                raise ValueError(f"{part!r}: expected field=value with a field of {', '.join(types)}")
            try:
                if types[name] is bool:
                    changes[name] = _ON[value.lower()]
                elif types[name] is tuple:
                    changes[name] = tuple(int(w) for w in value.strip("()").replace("/", " ").split())
                elif types[name] is int:
                    changes[name] = int(value)
                else:
                    changes[name] = value
            except (KeyError, ValueError):
                raise ValueError(f"{part!r}: {name} is {_FIELD_SYNTAX.get(types[name], 'a word')}") from None
        return dataclasses.replace(base, **changes)

    def changes_from(self, base: "Sm100Config") -> list:
        """"field=value" for every field where this configuration differs from `base`."""
        return [
            f"{f.name}={_config_value(getattr(self, f.name))}"
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(base, f.name)
        ]

    def describe(self) -> str:
        """The shortest text that parse() turns back into this configuration."""
        options = [",".join([name] + self.changes_from(base)) for name, base in (("shipped", SM100_SHIPPED), ("safe", SM100_SAFE))]
        return min(options, key=lambda text: text.count(","))


# What a switch needs, (switch, value, its value without the need, needed switch, its value): a
# configuration that breaks a row is refused. A pair (cta_group 2) is what multicast shares with and
# what a 192-token tile's two scale blocks are multicast within; two pairs share their tokens by
# multicast.
NEEDS = (
    ("multicast", True, False, "cta_group", 2),
    ("cluster_pairs", 2, 1, "multicast", True),
    ("token_variants", (64, 128, 192), (64, 128), "cta_group", 2),
)
_FIELD_SYNTAX = {bool: "on or off", int: "an integer", tuple: "token widths as 64/128"}


def _setting(name: str, value) -> str:
    return f"{name}={_config_value(value)}"


def _config_value(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        return "/".join(map(str, value))
    return str(value)


SM100_SHIPPED = Sm100Config()
SM100_SAFE = Sm100Config(
    cta_group=1, token_variants=(128,), multicast=False, pdl=False, l2_hints=False, epilogue="atoms",
    descriptors="branch", jobs="hybrid", warmers=False, self_warm=False, cluster_pairs=1, lean_walk=False,
)


CUBLAS = "cublas"  # SM100_CONFIG's last rung: no kernel of this file, cuBLAS per group (CublasPlan)


def sm100_rung(text: str | None = None):
    """What an SM100_CONFIG text names, by default the file's line: CUBLAS, or the Sm100Config it
    parses to. ValueError in one line naming the text if it is neither."""
    text = SM100_CONFIG if text is None else text
    if str(text).strip() == CUBLAS:
        return CUBLAS
    try:
        return _parsed_config(text)
    except ValueError as error:
        raise ValueError(f"SM100_CONFIG = {text!r}: {error} (or {CUBLAS!r})") from None


def sm100_config(text: str | None = None) -> Sm100Config:
    """The kernel configuration named by `text`, by default the file's SM100_CONFIG line (read when
    a plan is built, so a tool may set it before the first call); ValueError for "cublas", which
    builds no kernel."""
    rung = sm100_rung(text)
    if rung == CUBLAS:
        raise ValueError(f'SM100_CONFIG = "{CUBLAS}" builds no kernel: it runs cuBLAS per group')
    return rung


_parsed_config = functools.cache(Sm100Config.parse)


@dataclass(frozen=True)
class B200Model:
    """The analytic B200 time model's constants: public B200 figures, and five constants fitted to
    published B200 times (tools/b200_model.py fits them, evaluates the model on the schedules that
    sm100_schedule builds, and reports its held-out error). The schedule balances tiles with
    tile_us; everything else of the model lives in the tool."""

    sm_count: int = 148  # 2 dies x 74 SMs (chipsandcheese.com, "Nvidia's B200: Keeping the CUDA Juggernaut Rolling")
    mma_clock_mhz: float = 1860  # tensor clock (hmc-tech.com/gpus/nvidia-b200-vs-nvidia-b100)
    fp4_fma_per_clock_per_sm: int = 16384  # NVIDIA's 9 PFLOPS dense FP4 / 2 / 148 SMs / 1.86 GHz
    dram_bytes_per_us: float = 7.68e6  # 8192-bit HBM3e at 7.5 GT/s; the board's speed of light uses it
    store_bytes_per_us: float = 64 * 1860  # assumed: one CTA stores C at 64 B per clock
    # Fitted (tools/b200_model.py, least squares of the relative error over 16 published rows):
    dram_efficiency: float = 0.79  # achieved / peak DRAM bandwidth (set by v6b's DRAM-bound benchmark 1)
    stage_round_trip_us: float = 1.9  # TMA issue to MMA commit of one stage (Little's law over the stages)
    start_us: float = 4.6  # launch gap, prologue, first stage's latency: once per call
    tma_store_epilogue_us: float = 1.6  # per tile, an epilogue staged through smem (other designs)
    descriptor_patch_us: float = 0.7  # per descriptor rewritten and fenced in the kernel (other designs)

    def k_tile_us(self, tokens: int, stages: int) -> float:
        """One CTA's 256-deep k-tile: its MMAs (128 weight rows x `tokens`), or the pipeline's
        refill rate with `stages` stages in flight, whichever is slower."""
        mma_us = CTA_WEIGHT_ROWS * tokens * K_TILE / (self.fp4_fma_per_clock_per_sm * self.mma_clock_mhz)
        return max(mma_us, self.stage_round_trip_us / stages)


B200_MODEL = B200Model()


def sm100_schedule_shape(config: Sm100Config) -> ScheduleShape:
    """How `config`'s kernel cuts the outputs: weight blocks of its worker's rows, token tiles of
    its variants, balanced by the model's mainloop time of a tile."""
    stages = config.stages
    return ScheduleShape(
        weight_rows=config.schedule_rows,
        token_chunks=(TOKEN_CHUNK,),
        token_variants=config.token_variants,
        aligned_tiles=True,
        tile_cost=lambda tokens, k: (k // K_TILE) * B200_MODEL.k_tile_us(tokens, stages),
        balance_floor=1.0,
        group_by_variant=False,
        jobs=config.jobs,
    )


def sm100_schedule(sizes, num_workers: int, config: Sm100Config, num_clusters: int | None = None):
    """The records and per-worker offsets that `config`'s kernel walks for `sizes` on
    `num_workers` co-resident workers (SM pairs, or SMs with cta_group 1); with cluster_pairs 2
    its workers are the `num_clusters` clusters of two pairs (default half the pairs):
    build_tile_schedule's output, which the launch copies to the device and tools/b200_model.py
    evaluates."""
    if config.cluster_pairs == 2:
        num_workers = num_workers // 2 if num_clusters is None else num_clusters
        if num_workers < 1:
            raise ValueError("cluster_pairs 2 needs room for a cluster of two pairs (sm100_shape_config runs pairs alone)")
    return build_tile_schedule(sizes, num_workers, sm100_schedule_shape(config))


def sm100_shape_config(sizes, num_workers: int, config: Sm100Config, num_clusters: int | None = None) -> Sm100Config:
    """The configuration `sizes` run with on `num_workers` SM pairs (or SMs), of which
    `num_clusters` clusters of two pairs can be resident (default half the pairs): `config`, but
    - with token_variants 64/128/192 a shape keeps the 192-token variant only where its schedule
      has such a tile and the model's busiest worker is less loaded than without it (the wider
      stage leaves 6 stages of 8, and a 192-token tile's MMAs take 1.5 times a 128-token tile's);
      otherwise it runs the 64/128 kernel;
    - with cluster_pairs 2 a shape keeps the clusters only where its schedule without them leaves
      pairs idle (few tiles: their loads, not HBM, pace the call) and the model's busiest cluster is
      no more loaded than the busiest pair (records of two weight blocks balance more coarsely; the
      tokens' L2 traffic they halve is not in the model)."""
    def busiest(candidate):
        shape = sm100_schedule_shape(candidate)
        records, offsets = sm100_schedule(sizes, num_workers, candidate, num_clusters)
        widths = [candidate.token_variants[r[3]] for r in records]
        loads = [_added_in_order(shape.tile_cost(widths[i], records[i][6])
                                 for i in range(row[0], row[-1]))
                 for row in offsets]
        return max(loads), max(widths), len(offsets)

    alone = dataclasses.replace(config, cluster_pairs=1)
    if config.token_variants[-1] > TOKEN_CHUNK:
        narrow = dataclasses.replace(alone, token_variants=config.token_variants[:-1])
        wide_load, widest, _ = busiest(alone)
        if not (widest > TOKEN_CHUNK and wide_load < busiest(narrow)[0]):
            config, alone = dataclasses.replace(config, token_variants=narrow.token_variants), narrow
    if config.cluster_pairs == 1:
        return config
    if (num_workers // 2 if num_clusters is None else num_clusters) < 1:
        return alone
    pair_load, _, busy_pairs = busiest(alone)
    return config if busy_pairs < num_workers and busiest(config)[0] <= pair_load else alone


# --------------------------------------------------------------------------------------------------
# B200 kernel
# --------------------------------------------------------------------------------------------------


@dsl_user_op
def _l2_policy(evict: str, *, loc=None, ip=None):
    """An L2 cache policy for TMA loads: 'first' (read for the last time), 'normal', 'last' (re-read
    by other tiles: tokens)."""
    return cutlass.Int64(
        asm(T.i64(), [], f"createpolicy.fractional.L2::evict_{evict}.b64 $0, 1.0;", "=l", False)
    )


@dsl_user_op
def _prefetch_tensormap(address, *, loc=None, ip=None):
    """prefetch.tensormap of a descriptor given by its generic address (a kernel parameter)."""
    asm(None, [cutlass.Int64(address).ir_value(loc=loc, ip=ip)], "prefetch.tensormap [$0];", "l", True)


@dsl_user_op
def _tmem_load_32_columns(address, *, loc=None, ip=None):
    """tcgen05.ld 32x32b.x32: this thread's TMEM lane (the warp's quarter of the 128 lanes), 32
    consecutive fp32 columns from `address`, waited for."""
    outs = ",".join(f"${i}" for i in range(EPILOGUE_COLUMNS))
    res = asm(
        llvm.StructType.get_literal([T.i32()] * EPILOGUE_COLUMNS),
        [ir_i32(address, loc, ip)],
        f"tcgen05.ld.sync.aligned.32x32b.x32.b32 {{{outs}}}, [${EPILOGUE_COLUMNS}];\n"
        "tcgen05.wait::ld.sync.aligned;",
        ",".join(["=r"] * EPILOGUE_COLUMNS + ["r"]),
        True,
    )
    return [cutlass.Float32(llvm.bitcast(T.f32(), llvm.extractvalue(T.i32(), res, [i]))) for i in range(EPILOGUE_COLUMNS)]


@dsl_user_op
def _tcgen05_fence(kind: str, *, loc=None, ip=None):
    """tcgen05.fence::before_thread_sync / ::after_thread_sync: orders this thread's tcgen05
    operations (MMA, TMEM loads) with the barrier arrive after it / the barrier wait before it."""
    asm(None, [], f"tcgen05.fence::{kind};", "", True)


@dataclass(frozen=True)
class _Variant:
    """Everything that depends on the token width N of the MMA."""

    tokens: int
    tiled_mma: object
    b_smem_layout: object  # staged, the first tokens // cta_group rows of each token stage
    sfb_smem_layout: object  # staged, the first scale_blocks blocks of each token-scale stage
    scale_blocks: int  # 128-row blocks of token scales a k-tile loads
    tx_bytes: int  # bytes a worker's stage receives (the leader's full barrier expects them all)


@dataclass(frozen=True)
class _SmemViews:
    """A CTA's shared memory as the roles see it (built in the kernel, passed to each role)."""

    a: object  # (MMA, MMA_M, MMA_K, STAGE): the weights
    b: list  # per variant, (MMA, MMA_N, MMA_K, STAGE): the tokens, at the widest variant's stage stride
    sfa: object  # the weight scales' stages
    sfb: list  # per 128-row block, every stage's b-th block of token scales (the TMA's view)
    sfb_variants: list  # per variant, its token scales of every stage (the MMA's view)
    c: object  # epilogue="tma_last": (EPI_M = 128, EPI_N = 32, C_STAGE) over the weights' stages; else None


@dataclass(frozen=True)
class _AtomLoad:
    """epilogue="atoms": the library's TMEM-load copy of 32 columns, for this thread."""

    tiled_copy: object
    sources: object  # (T2R, T2R_M, T2R_N, 1, chunks, ACC_STAGE): every chunk of both accumulators
    registers: object  # this thread's 32 fp32 values


@dataclass(frozen=True)
class _StagedC:
    """epilogue="tma_last": one warp's way from TMEM through C staging to a TMA store of its box."""

    chunks: int  # 32-token chunks of the widest tile
    batch: int  # chunks loaded into registers before their stores (BOX_BATCH_CHUNKS at most)
    t2r: object  # the TMEM load (tcgen05.ld 16x256b) of the accumulator's bits as b32
    tTR_tAcc: object  # (T2R, T2R_M, T2R_N, 1, chunks, ACC_STAGE): its sources
    tTR_rAcc: list  # (T2R, T2R_M, T2R_N) per chunk of a batch: its registers
    r2s: object  # the stmatrix.trans copy into the staging buffer
    r2s_registers: object  # (R2S, R2S_M, R2S_N): one chunk's fp16 values
    c_words: object  # the same registers as b32 words (two fp16 each)
    r2s_smem: object  # (R2S, R2S_M, R2S_N, C_STAGE): the staging stages
    smem: object  # ((ATOM_V, REST_V), C_STAGE): this warp's box in each stage
    gmem: object  # ((ATOM_V, REST_V), N / 32, M / 32, L): C's boxes
    atoms: tuple  # C's TMA store atom per group
    pipeline: object  # the warp's bulk groups (wait_group.read before a stage is rewritten)


class Sm100GroupedGemm:
    """Persistent, warp-specialized block-scaled grouped GEMM for one group count and one
    Sm100Config (2-CTA pairs or single CTAs)."""

    def __init__(self, num_groups: int, config: Sm100Config):
        self.num_groups = num_groups
        self.config = config
        self.cta_group = config.cta_group
        self.mma_cta_group = tcgen05.CtaGroup.TWO if config.cta_group == 2 else tcgen05.CtaGroup.ONE
        self.cluster_shape_mn = (config.cluster_size, 1)
        self.tma_last = config.epilogue == "tma_last"  # each worker's last tile's C through C staging
        self.epilogue_barrier = pipeline.NamedBarrier(Barrier.EPILOGUE, 32 * len(EPILOGUE_WARPS))
        self.tmem_alloc_barrier = pipeline.NamedBarrier(Barrier.TMEM_ALLOC, 32 * (len(EPILOGUE_WARPS) + 1))

    # ---- everything derived from the configuration (traced inside the host JIT) ----
    def _tiled_mma(self, n, cta_group):
        """The block-scaled MMA of n tokens: the worker's weight rows (2-CTA), or one CTA's."""
        rows = self.config.weight_rows if cta_group == tcgen05.CtaGroup.TWO else CTA_WEIGHT_ROWS
        return sm100_utils.make_blockscaled_trivial_tiled_mma(
            AB_DTYPE, tcgen05.OperandMajorMode.K, tcgen05.OperandMajorMode.K, SF_DTYPE, SF_VEC_SIZE,
            cta_group, (rows, n),
        )

    def _setup(self):
        tiled_mma = self._tiled_mma
        token_variants = self.config.token_variants
        widest = tiled_mma(token_variants[-1], self.mma_cta_group)
        mma_k = cute.size(widest.shape_mnk, mode=[2])
        self.k_blocks = K_TILE // mma_k
        self.mma_tiler = (self.config.weight_rows, token_variants[-1], K_TILE)
        # Token scales are consumed per 128 tokens by a 1-CTA view (as in NVIDIA's
        # dense_blockscaled_gemm_persistent.py); with multicast each CTA of the cluster loads its share
        # (a half, or a quarter with cluster_pairs 2) and sends it to all, otherwise each CTA loads all of them.
        self.tiled_mma_sfb = tiled_mma(TOKEN_CHUNK, tcgen05.CtaGroup.ONE)
        self.mma_tiler_sfb = (CTA_WEIGHT_ROWS, TOKEN_CHUNK, K_TILE)
        cluster = cute.make_layout((*self.cluster_shape_mn, 1))
        self.cluster_layout_vmnk = cute.tiled_divide(cluster, (widest.thr_id.shape,))
        self.cluster_layout_sfb_vmnk = cute.tiled_divide(
            cluster if self.config.multicast else cute.make_layout((1, 1, 1)), (self.tiled_mma_sfb.thr_id.shape,)
        )

        a_bytes = cute.size_in_bytes(AB_DTYPE, sm100_utils.make_smem_layout_a(widest, self.mma_tiler, AB_DTYPE, 1))
        b_bytes = cute.size_in_bytes(AB_DTYPE, sm100_utils.make_smem_layout_b(widest, self.mma_tiler, AB_DTYPE, 1))
        sfa_bytes = cute.size_in_bytes(
            SF_DTYPE, blockscaled_utils.make_smem_layout_sfa(widest, self.mma_tiler, SF_VEC_SIZE, 1)
        )
        # A stage's token scales are the widest tile's 128-row blocks, one after another; the TMA
        # loads them a block at a time (the 128-token view below), the MMA reads its variant's first.
        self.acc_columns = self.config.accumulator_columns
        self.sfb_block_layout = blockscaled_utils.make_smem_layout_sfb(
            tiled_mma(TOKEN_CHUNK, self.mma_cta_group), (self.config.weight_rows, TOKEN_CHUNK, K_TILE), SF_VEC_SIZE, 1
        )
        sfb_block_bytes = cute.size_in_bytes(SF_DTYPE, self.sfb_block_layout)
        sfb_bytes = sfb_block_bytes * self.config.token_scale_blocks
        self.sfb_stage_elems = cute.cosize(blockscaled_utils.make_smem_layout_sfb(widest, self.mma_tiler, SF_VEC_SIZE, 1))
        assert self.sfb_stage_elems == sfb_bytes, "a stage's token scales are its blocks back to back"
        # Shared memory: the barriers and the operand ring; "tma_last" stages C in the weights'
        # stages once they are idle.
        capacity = SMEM_BYTES
        operand_bytes = a_bytes + b_bytes + sfa_bytes + sfb_bytes
        if cutlass.const_expr(self.tma_last):
            # C^T's contiguous mode is the MMA's M (weights): NVIDIA's "M-major" C (COL_MAJOR).
            self.c_layout = utils.LayoutEnum.COL_MAJOR
            self.epi_tile = sm100_utils.compute_epilogue_tile_shape(
                (CTA_WEIGHT_ROWS, token_variants[-1]), self.cta_group == 2, self.c_layout, C_DTYPE
            )
            # One warp's TMA store box (C_WARP_ROWS weight rows x EPILOGUE_COLUMNS tokens); a stage
            # tiles the CTA's 4 boxes along M, so each warp's box is 2 KB of contiguous shared memory.
            box = (C_WARP_ROWS, EPILOGUE_COLUMNS)
            self.c_box_layout = cute.slice_(sm100_utils.make_smem_layout_epi(C_DTYPE, self.c_layout, box, 1), (None, None, 0))
            c_atom = sm100_utils.make_smem_layout_atom(sm100_utils.get_smem_layout_atom_epi(self.c_layout, C_DTYPE, box), C_DTYPE)
            c_bytes = cute.size_in_bytes(C_DTYPE, cute.tile_to_shape(c_atom, (CTA_WEIGHT_ROWS, EPILOGUE_COLUMNS, 1), order=(1, 0, 2)))
            assert c_bytes == C_STAGE_BYTES
            self.num_stages = (capacity - SMEM_RESERVED_BYTES) // operand_bytes
            self.c_stages = self.acc_columns // EPILOGUE_COLUMNS
            assert self.c_stages * c_bytes <= self.num_stages * a_bytes, "C staging must fit the weights' stages"
            assert self.c_stages == self.config.c_stages, "the host's C stage count must match"
            # (EPI_M = 128, EPI_N = 32, C_STAGE)
            self.c_smem_layout = cute.tile_to_shape(
                c_atom, (CTA_WEIGHT_ROWS, EPILOGUE_COLUMNS, self.c_stages), order=(1, 0, 2)
            )
        else:
            self.num_stages = (capacity - SMEM_RESERVED_BYTES) // operand_bytes
        assert self.num_stages == self.config.stages, "the host's stage count (schedule costs) must match"

        self.a_smem_layout = sm100_utils.make_smem_layout_a(widest, self.mma_tiler, AB_DTYPE, self.num_stages)
        self.sfa_smem_layout = blockscaled_utils.make_smem_layout_sfa(widest, self.mma_tiler, SF_VEC_SIZE, self.num_stages)
        # The TMA's view of the token scales: a stage's first 128-row block (the others follow it).
        self.sfb_smem_layout = self._staged(self.sfb_block_layout, self.sfb_stage_elems)
        self.b_stage_elems = cute.cosize(sm100_utils.make_smem_layout_b(widest, self.mma_tiler, AB_DTYPE, 1).outer)
        self.variants = []
        for n in token_variants:
            mma = widest if n == token_variants[-1] else tiled_mma(n, self.mma_cta_group)
            tiler = (self.config.weight_rows, n, K_TILE)
            one = sm100_utils.make_smem_layout_b(mma, tiler, AB_DTYPE, 1)
            # Every variant's stages sit at the widest variant's stage stride, in one buffer.
            staged = cute.make_composed_layout(
                one.inner, 0, cute.make_layout(
                    (*one.outer.shape[:-1], self.num_stages), stride=(*one.outer.stride[:-1], self.b_stage_elems)
                )
            )
            scale_blocks = -(-n // TOKEN_CHUNK)
            sfb_staged = self._staged(blockscaled_utils.make_smem_layout_sfb(mma, tiler, SF_VEC_SIZE, 1), self.sfb_stage_elems)
            per_cta = a_bytes + cute.size_in_bytes(AB_DTYPE, one) + sfa_bytes + sfb_block_bytes * scale_blocks
            self.variants.append(_Variant(n, mma, staged, sfb_staged, scale_blocks, per_cta * cute.size(mma.thr_id.shape)))

    def _staged(self, one, stride):
        """Layout `one` (its last mode a single stage) repeated for every stage, `stride` apart."""
        return cute.make_layout((*one.shape[:-1], self.num_stages), stride=(*one.stride[:-1], stride))

    # ---- host JIT: per-group descriptors, shared storage, launch ----
    @cute.jit
    def __call__(self, args: LaunchArgs):
        self._setup()
        widest = self.variants[-1]
        cluster_shape = self.cluster_layout_vmnk.shape
        a_op = sm100_utils.cluster_shape_to_tma_atom_A(self.cluster_shape_mn, widest.tiled_mma.thr_id)
        b_op = sm100_utils.cluster_shape_to_tma_atom_B(self.cluster_shape_mn, widest.tiled_mma.thr_id)
        # Without multicast the token scales load as the tokens do: one CTA's box, no multicast.
        sfb_op = (
            sm100_utils.cluster_shape_to_tma_atom_SFB(self.cluster_shape_mn, widest.tiled_mma.thr_id)
            if self.config.multicast else b_op
        )
        a_stage = cute.slice_(self.a_smem_layout, (None, None, None, 0))
        sfa_stage = cute.slice_(self.sfa_smem_layout, (None, None, None, 0))
        sfb_stage = cute.slice_(self.sfb_smem_layout, (None, None, None, 0))

        # One TMA atom per group and operand; the descriptors are encoded here, at every launch, and
        # become kernel parameters. The MMA's A operand is the weights (b), its B operand the tokens (a).
        weight_atoms, token_atoms, weight_sf_atoms, token_sf_atoms = [], [[] for _ in self.variants], [], []
        coords = []  # group 0's coordinate tensors, kept for every group
        c_atoms, c_coords = [], []  # epilogue="tma_last": C's TMA store atom per group
        for g in cutlass.range_constexpr(self.num_groups):
            m, n, k = args.m[g], args.n[g], args.k[g]
            weights = self._operand(args.b[g], n, k)
            tokens = self._operand(args.a[g], m, k)
            atom_w, tma_w = cute.nvgpu.make_tiled_tma_atom_A(
                a_op, weights, a_stage, self.mma_tiler, widest.tiled_mma, cluster_shape
            )
            atom_wsf, tma_wsf = cute.nvgpu.make_tiled_tma_atom_A(
                a_op, self._scales(args.sfb[g], n, k), sfa_stage, self.mma_tiler, widest.tiled_mma, cluster_shape,
                internal_type=cutlass.Int16,
            )
            atom_tsf, tma_tsf = cute.nvgpu.make_tiled_tma_atom_B(
                sfb_op, self._scales(args.sfa[g], m, k), sfb_stage, self.mma_tiler_sfb, self.tiled_mma_sfb,
                self.cluster_layout_sfb_vmnk.shape, internal_type=cutlass.Int16,
            )
            tma_tokens = []
            for v, variant in enumerate(self.variants):
                atom_t, tma_t = cute.nvgpu.make_tiled_tma_atom_B(
                    b_op, tokens, cute.slice_(variant.b_smem_layout, (None, None, None, 0)),
                    (self.config.weight_rows, variant.tokens, K_TILE), variant.tiled_mma, cluster_shape,
                )
                token_atoms[v].append(atom_t)
                tma_tokens.append(tma_t)
            weight_atoms.append(atom_w)
            weight_sf_atoms.append(atom_wsf)
            token_sf_atoms.append(atom_tsf)
            coords.append((tma_w, tuple(tma_tokens), tma_wsf, tma_tsf))
            if cutlass.const_expr(self.tma_last):
                # C as the MMA sees it, (weights n, tokens m, L): the group's [m, n] fp16 tensor,
                # n contiguous; the TMA store of a warp's box clips at n and m.
                atom_c, tma_c = cpasync.make_tiled_tma_atom(
                    cpasync.CopyBulkTensorTileS2GOp(), self._c_matrix(args.c[g], m, n), self.c_box_layout,
                    (C_WARP_ROWS, EPILOGUE_COLUMNS),
                )
                c_atoms.append(atom_c)
                c_coords.append(tma_c)

        class SharedStorage:
            ab_full: cute.struct.MemRange[cutlass.Int64, self.num_stages]
            ab_empty: cute.struct.MemRange[cutlass.Int64, self.num_stages]
            acc_full: cute.struct.MemRange[cutlass.Int64, ACC_STAGES]
            acc_empty: cute.struct.MemRange[cutlass.Int64, ACC_STAGES]
            tmem_dealloc: cutlass.Int64
            tmem_address: cutlass.Int32
            sA: cute.struct.Align[cute.struct.MemRange[AB_DTYPE, cute.cosize(self.a_smem_layout.outer)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[AB_DTYPE, self.b_stage_elems * self.num_stages], 1024]
            sSFA: cute.struct.Align[cute.struct.MemRange[SF_DTYPE, cute.cosize(self.sfa_smem_layout)], 1024]
            sSFB: cute.struct.Align[cute.struct.MemRange[SF_DTYPE, self.sfb_stage_elems * self.num_stages], 1024]

        self.shared_storage = cute.struct(SharedStorage)
        # epilogue="tma_last": (C's atom per group, group 0's C coordinate tensor); else empty.
        c_store = (tuple(c_atoms), c_coords[0]) if self.tma_last else ()
        self.kernel(
            tuple(weight_atoms), tuple(tuple(a) for a in token_atoms), tuple(weight_sf_atoms), tuple(token_sf_atoms),
            coords[0], c_store, args,
        ).launch(
            grid=(self.config.cluster_size * args.num_workers, 1, 1),
            block=[THREADS_PER_CTA, 1, 1],
            cluster=(*self.cluster_shape_mn, 1),
            smem=self.shared_storage.size_in_bytes(),
            stream=args.stream,
            min_blocks_per_mp=1,
            use_pdl=self.config.pdl,
        )

    @staticmethod
    def _operand(address, rows, k):
        """A [rows, K] FP4 operand, K-major (the contract's a and b, the L mode of size 1 kept)."""
        ptr = cute.make_ptr(AB_DTYPE, address, cute.AddressSpace.gmem, assumed_align=16)
        k = cute.assume(k, K_TILE)
        return cute.make_tensor(ptr, cute.make_layout((rows, k, 1), stride=(k, 1, 0)))

    @staticmethod
    def _c_matrix(address, m, n):
        """The contract's c ([m, n, 1] fp16, n contiguous) as the MMA's (M = weights n, N = tokens
        m, L): NVIDIA's M-major C."""
        ptr = cute.make_ptr(C_DTYPE, address, cute.AddressSpace.gmem, assumed_align=16)
        n = cute.assume(n, N_MULTIPLE)
        return cute.make_tensor(ptr, cute.make_layout((n, m, 1), stride=(1, n, 0)))

    @staticmethod
    def _scales(address, rows, k):
        """An operand's scales in the cuBLAS blocked layout (the contract's sf*_reordered)."""
        ptr = cute.make_ptr(SF_DTYPE, address, cute.AddressSpace.gmem, assumed_align=16)
        return cute.make_tensor(ptr, blockscaled_utils.tile_atom_to_shape_SF((rows, cute.assume(k, K_TILE), 1), SF_VEC_SIZE))

    # ---- the kernel: setup, then one role per warp ----
    @cute.kernel
    def kernel(
        self,
        weight_atoms: tuple,
        token_atoms: tuple,
        weight_sf_atoms: tuple,
        token_sf_atoms: tuple,
        coords: tuple,
        c_store: tuple,
        args: LaunchArgsView,
    ):
        """weight_atoms etc.: one TMA atom per group (token_atoms: per variant, then per group);
        coords: group 0's TMA coordinate tensors (weights, tokens per variant, weight scales, token
        scales), used for every group: coordinates are tile indices, the group's descriptor bounds them;
        c_store: epilogue="tma"/"tma_last"'s (C store atom per group, group 0's C coordinate tensor),
        else ()."""
        self._setup()  # the MMAs and layouts, rebuilt inside the kernel: all of them are static
        if cutlass.const_expr(self.config.pdl):
            # The next call's kernel may start on SMs this one leaves, overlapping its launch and
            # prologue with this kernel's tail (its loads wait: load()).
            cute.arch.griddepcontrol_launch_dependents()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        block, _, _ = cute.arch.block_idx()
        worker = block // self.config.cluster_size  # the schedule's worker: a pair, a CTA, or a cluster of two pairs
        cta_in_worker = block % self.cta_group
        # A cluster's second pair takes the weight block after its first's (cluster_pairs 2).
        pair_rows = (block // self.cta_group) % self.config.cluster_pairs * self.config.weight_rows
        is_leader_cta = cta_in_worker == 0
        cta_rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cta_coord_vmnk = self.cluster_layout_vmnk.get_flat_coord(cta_rank)
        cta_coord_sfb_vmnk = self.cluster_layout_sfb_vmnk.get_flat_coord(cta_rank if self.config.multicast else 0)

        storage = utils.SmemAllocator().allocate(self.shared_storage)
        widest = self.variants[-1]
        ab_pipeline = pipeline.PipelineTmaUmma.create(
            barrier_storage=storage.ab_full.data_ptr(),
            num_stages=self.num_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            # each pair's MMA commit frees the stage (two pairs read a cluster's multicast tokens)
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.config.cluster_pairs),
            tx_count=widest.tx_bytes,  # with several variants unused: _load_tile expects each variant's bytes
            cta_layout_vmnk=self.cluster_layout_vmnk,
            defer_sync=True,
        )
        # Each CTA's 4 epilogue warps release the accumulator to the leader's MMA warp.
        acc_pipeline = pipeline.PipelineUmmaAsync.create(
            barrier_storage=storage.acc_full.data_ptr(),
            num_stages=ACC_STAGES,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.cta_group * len(EPILOGUE_WARPS)),
            cta_layout_vmnk=self.cluster_layout_vmnk,
            defer_sync=True,
        )
        tmem = TmemAllocator(
            storage.tmem_address,
            barrier_for_retrieve=self.tmem_alloc_barrier,
            allocator_warp_id=EPILOGUE_WARPS[0],
            is_two_cta=self.cta_group == 2,
            two_cta_tmem_dealloc_mbar_ptr=storage.tmem_dealloc if self.cta_group == 2 else None,
        )
        pipeline.pipeline_init_arrive(cluster_shape_mn=self.cluster_shape_mn, is_relaxed=True)

        smem = _SmemViews(
            a=storage.sA.get_tensor(self.a_smem_layout.outer, swizzle=self.a_smem_layout.inner),
            b=[storage.sB.get_tensor(v.b_smem_layout.outer, swizzle=v.b_smem_layout.inner) for v in self.variants],
            sfa=storage.sSFA.get_tensor(self.sfa_smem_layout),
            sfb=[cute.make_tensor(storage.sSFB.data_ptr() + b * cute.cosize(self.sfb_block_layout), self.sfb_smem_layout)
                 for b in range(self.config.token_scale_blocks)],
            sfb_variants=[storage.sSFB.get_tensor(v.sfb_smem_layout) for v in self.variants],
            # over the weights' first stages, written only after the worker's last MMAs completed (its
            # last accumulator's full barrier): no load follows them
            c=(storage.sA.get_tensor(self.c_smem_layout.outer, swizzle=self.c_smem_layout.inner, dtype=C_DTYPE)
               if self.tma_last else None),
        )
        tiles = gmem_matrix(cutlass.Int32, args.tiles, args.num_tiles, len(RECORD_FIELDS))
        worker_tiles = gmem_matrix(
            cutlass.Int32, args.worker_tiles, args.num_workers, WORKER_ROW if cutlass.const_expr(self.config.lean_walk) else 2
        )
        walk = (tiles, worker_tiles[worker, 0], worker_tiles[worker, 1], pair_rows)
        # The TMA warp's first record (lean_walk): read here, in the row's one load with begin and
        # end, so its L2 round trip passes under the cluster barrier's wait below.
        first_record = None
        if cutlass.const_expr(self.config.lean_walk):
            first_record = tuple(worker_tiles[worker, 2 + field] for field in LOAD_FIELDS)
        if cutlass.const_expr(self.config.warmers):
            if worker < args.warmers:
                # A warmer has no records: all its warps share the call's prefetches.
                _, tAgA, _, tAgSFA, _, tBgSFB, token_parts = self._load_partitions(
                    weight_atoms, token_atoms, weight_sf_atoms, token_sf_atoms, coords, smem, cta_coord_vmnk,
                    cta_coord_sfb_vmnk,
                )
                warps = THREADS_PER_CTA // 32
                self._warm_l2(
                    args, tiles, pair_rows, worker * warps + warp_idx, args.warmers * warps,
                    (tAgA, tAgSFA, tBgSFB, [part[1] for part in token_parts]),
                    (weight_atoms, weight_sf_atoms, token_sf_atoms, token_atoms),
                )
        pipeline.pipeline_init_wait(cluster_shape_mn=self.cluster_shape_mn)

        if warp_idx == TMA_WARP:
            self.load(
                ab_pipeline, weight_atoms, token_atoms, weight_sf_atoms, token_sf_atoms, coords, smem, walk,
                is_leader_cta, cta_coord_vmnk, cta_coord_sfb_vmnk, args, first_record,
            )
        if warp_idx == MMA_WARP:
            tmem.wait_for_alloc()
            self.mma(ab_pipeline, acc_pipeline, tmem.retrieve_ptr(ACC_DTYPE), smem, walk, is_leader_cta)
        if warp_idx < MMA_WARP:
            tmem.allocate(TMEM_COLUMNS)
            tmem.wait_for_alloc()
            acc_tmem_ptr = tmem.retrieve_ptr(ACC_DTYPE)
            c_pipeline = self.epilogue(acc_pipeline, acc_tmem_ptr, args, walk, warp_idx, cta_in_worker, smem.c, c_store)
            tmem.relinquish_alloc_permit()
            self.epilogue_barrier.arrive_and_wait()
            tmem.free(acc_tmem_ptr)
            if cutlass.const_expr(self.tma_last):
                # The TMA unit has read every box of this warp before the CTA exits (waited for
                # after freeing TMEM, which does not depend on the stores).
                c_pipeline.producer_tail()

    # ---- TMA warp ----
    @cute.jit
    def load(
        self, ab_pipeline, weight_atoms, token_atoms, weight_sf_atoms, token_sf_atoms, coords, smem, walk,
        is_leader_cta, cta_coord_vmnk, cta_coord_sfb_vmnk, args, first_record,
    ):
        """Warp 5 of every CTA: per k-tile of each tile, this CTA's weights, its share of the tokens,
        its weight scales (with cta_group 2: 2-CTA TMA completing on the leader's full barrier) and
        the token scales (with multicast: its share, sent to every CTA of the cluster). Waits on:
        the stage's empty barrier (signalled by the commit of each pair's leader that reads it).
        Signals: the leader's full barrier (expect-tx). first_record: with lean_walk, the LOAD_FIELDS
        of the worker's first record, from its row of the offsets table (else None)."""
        tAsA, tAgA, tAsSFA, tAgSFA, tBsSFB, tBgSFB, token_parts = self._load_partitions(
            weight_atoms, token_atoms, weight_sf_atoms, token_sf_atoms, coords, smem, cta_coord_vmnk, cta_coord_sfb_vmnk
        )
        sfb_mask = token_mask = None
        if cutlass.const_expr(self.config.multicast):
            sfb_mask = cpasync.create_tma_multicast_mask(self.cluster_layout_sfb_vmnk, cta_coord_sfb_vmnk, mcast_mode=1)
        if cutlass.const_expr(self.config.cluster_pairs > 1):
            token_mask = cpasync.create_tma_multicast_mask(self.cluster_layout_vmnk, cta_coord_vmnk, mcast_mode=1)
        read_once = read_normal = read_again = None
        if cutlass.const_expr(self.config.l2_hints):
            read_once, read_normal, read_again = _l2_policy("first"), _l2_policy("normal"), _l2_policy("last")

        tiles, begin, end, pair_rows = walk
        if cutlass.const_expr(self.config.lean_walk):
            g, record_n0, t0, variant_index, k_end, sole = first_record
        else:  # each record, the first too, read from the table in the loop below
            g, record_n0, t0, variant_index, k_end, sole = (cutlass.Int32(0),) * len(LOAD_FIELDS)
        # Neither the schedule nor the descriptors depend on the previous grid: prefetch the first
        # record's group's descriptors while that grid may still run (as NVIDIA's example
        # prefetches its atoms' descriptors at its start).
        if begin < end:
            self._prefetch_descriptors(
                g if cutlass.const_expr(self.config.lean_walk) else tiles[begin, 0],
                weight_atoms, token_atoms, weight_sf_atoms, token_sf_atoms,
            )
        if cutlass.const_expr(self.config.self_warm):
            if begin < end and args.self_warm_k_tiles > 0:  # 0 where warmers launch: no record read
                first = (g, record_n0, t0, variant_index, k_end)
                if cutlass.const_expr(not self.config.lean_walk):
                    first = tuple(tiles[begin, field] for field in LOAD_FIELDS[:5])
                warm_k_tiles = cutlass.min(tiles_of(first[4], K_TILE, self.config.lean_walk), args.self_warm_k_tiles)
                self._prefetch_record(
                    first[:4], pair_rows, warm_k_tiles, True, True,
                    (tAgA, tAgSFA, tBgSFB, [part[1] for part in token_parts]),
                    (weight_atoms, weight_sf_atoms, token_sf_atoms, token_atoms),
                )
        if cutlass.const_expr(self.config.pdl):
            # The kernel before this one in the stream (the previous call, or whatever wrote the
            # inputs) may still be running; its writes are visible only after this wait. Every
            # other role of the kernel depends on these loads; a worker without records (a
            # warmer) reads and writes nothing and leaves without waiting.
            if begin < end:
                cute.arch.griddepcontrol_wait()
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.num_stages)
        for t in range(begin, end):
            if cutlass.const_expr(self.config.lean_walk):
                if t != begin:  # the first came with the worker's row
                    g, record_n0, t0, variant_index, k_end, sole = _load_fields(tiles, t)
            else:
                g, record_n0, t0, variant_index, k_end, sole = _load_fields(tiles, t)
            n0 = record_n0 + pair_rows
            k_tiles = tiles_of(k_end, K_TILE, self.config.lean_walk)
            read_weights = None
            if cutlass.const_expr(self.config.l2_hints):
                # The last tile of a weight block's sole reader streams it evict-first; other tiles
                # keep it in L2 for the next token tile.
                read_weights = cutlass.Int64(cutlass.select_(sole != 0, read_once, read_normal))
            block = tiles_of(n0, self.config.weight_rows, self.config.lean_walk)
            # (gmem k-tiles, smem stages, L2 policy, multicast mask) per operand, in the order of
            # the atoms passed to _copies_of_group: weights, weight scales, token scales, tokens
            slices = (
                (tAgA[(None, block, None, 0)], tAsA, read_weights, None),
                (tAgSFA[(None, block, None, 0)], tAsSFA, read_weights, None),
            ) + tuple(  # the token scales' 128-row blocks from the tile's first
                (tBgSFB[(None, tiles_of(t0, TOKEN_CHUNK, self.config.lean_walk) + b, None, 0)], tBsSFB[b], read_again, sfb_mask)
                for b in range(self.config.token_scale_blocks)
            )
            for v in cutlass.range_constexpr(len(self.variants)):
                if variant_index == v:
                    state = self._load_variant(
                        ab_pipeline, state, v, g, t0, k_tiles, slices, token_parts[v], token_mask,
                        (weight_atoms, weight_sf_atoms, token_sf_atoms, token_atoms[v]), read_again, is_leader_cta,
                    )
        ab_pipeline.producer_tail(state)

    @cute.jit
    def _load_partitions(
        self, weight_atoms, token_atoms, weight_sf_atoms, token_sf_atoms, coords, smem, cta_coord_vmnk, cta_coord_sfb_vmnk
    ):
        """This CTA's TMA partitions, (smem stages, gmem k-tiles) of the weights, the weight scales,
        the token scales (its multicast share: a half, a quarter in a cluster of two pairs) and the
        tokens of each variant (with cluster_pairs 2 its half, multicast to the other pair)."""
        tma_w, tma_tokens, tma_wsf, tma_tsf = coords
        widest = self.variants[-1]
        v_coord = cta_coord_vmnk[0]
        thr_mma = widest.tiled_mma.get_slice(v_coord)
        thr_mma_sfb = self.tiled_mma_sfb.get_slice(v_coord)
        weights_k = cute.slice_(self.mma_tiler, (None, 0, None))
        one_cta = cute.make_layout(1)
        # ((atom_v, rest_v), tiles along N, k-tiles, L)
        tAsA, tAgA = cpasync.tma_partition(
            weight_atoms[0], 0, one_cta, cute.group_modes(smem.a, 0, 3),
            cute.group_modes(thr_mma.partition_A(cute.local_tile(tma_w, weights_k, (None, None, None))), 0, 3),
        )
        tAsSFA, tAgSFA = cpasync.tma_partition(
            weight_sf_atoms[0], 0, one_cta, cute.group_modes(smem.sfa, 0, 3),
            cute.group_modes(thr_mma.partition_A(cute.local_tile(tma_wsf, weights_k, (None, None, None))), 0, 3),
        )
        tAsSFA, tAgSFA = cute.filter_zeros(tAsSFA), cute.filter_zeros(tAgSFA)
        sfb_ctas = cute.make_layout(cute.slice_(self.cluster_layout_sfb_vmnk, (0, None, 0, 0)).shape)
        token_scales_k = cute.group_modes(
            thr_mma_sfb.partition_B(
                cute.local_tile(tma_tsf, cute.slice_(self.mma_tiler_sfb, (0, None, None)), (None, None, None))
            ), 0, 3,
        )
        tBsSFB = []  # per 128-row block of a stage's token scales (the gmem side is the same for each)
        for block in smem.sfb:
            tBsSFB_block, tBgSFB = cpasync.tma_partition(
                token_sf_atoms[0], cta_coord_sfb_vmnk[1], sfb_ctas, cute.group_modes(block, 0, 3), token_scales_k
            )
            tBsSFB.append(cute.filter_zeros(tBsSFB_block))
        tBgSFB = cute.filter_zeros(tBgSFB)
        # The tokens: with cluster_pairs 2 this CTA's half of its rows, multicast to the other pair.
        token_ctas = cute.make_layout(cute.slice_(self.cluster_layout_vmnk, (0, None, 0, 0)).shape)
        token_parts = []
        for v, variant in enumerate(self.variants):
            tiler = cute.slice_((self.config.weight_rows, variant.tokens, K_TILE), (0, None, None))
            tBsB, tBgB = cpasync.tma_partition(
                token_atoms[v][0], cta_coord_vmnk[1], token_ctas, cute.group_modes(smem.b[v], 0, 3),
                cute.group_modes(
                    variant.tiled_mma.get_slice(v_coord).partition_B(cute.local_tile(tma_tokens[v], tiler, (None, None, None))),
                    0, 3,
                ),
            )
            token_parts.append((tBsB, tBgB))
        return tAsA, tAgA, tAsSFA, tAgSFA, tBsSFB, tBgSFB, token_parts

    @cute.jit
    def _load_variant(self, ab_pipeline, state, v, g, t0, k_tiles, slices, token_part, token_mask, group_atoms, read_again,
                      is_leader_cta):
        """One record of token variant v: its copies, with group g's descriptors ("selp": by address,
        "branch": the loop of that group's own atoms), then its k-loop over its k_tiles k-tiles.
        slices: the weights', the weight scales' and each token-scale block's (the variant loads its
        first scale_blocks); group_atoms: weights, weight scales, token scales, the variant's tokens."""
        tBsB, tBgB = token_part
        variant = self.variants[v]
        weight_atoms, weight_sf_atoms, token_sf_atoms, variant_token_atoms = group_atoms
        group_atoms = (weight_atoms, weight_sf_atoms) + (token_sf_atoms,) * variant.scale_blocks + (variant_token_atoms,)
        operands = slices[:2 + variant.scale_blocks] + ((tBgB[(None, tiles_of(t0, variant.tokens, self.config.lean_walk), None, 0)], tBsB, read_again, token_mask),)
        tx_bytes = self.variants[v].tx_bytes
        if cutlass.const_expr(self.config.descriptors == "selp"):
            copies = [(atoms[0], group_tma_desc(g, atoms)) + operand for atoms, operand in zip(group_atoms, operands)]
            state = self._load_tile(ab_pipeline, state, copies, k_tiles, tx_bytes, is_leader_cta)
        else:
            for group in cutlass.range_constexpr(self.num_groups):
                if g == group:
                    state = self._load_tile(
                        ab_pipeline, state, [(atoms[group], None) + operand for atoms, operand in zip(group_atoms, operands)],
                        k_tiles, tx_bytes, is_leader_cta,
                    )
        return state

    @cute.jit
    def _warm_l2(self, args, tiles, pair_rows, first, step, sources, atoms):
        """One warmer warp's prefetches into L2 (cp.async.bulk.prefetch.tensor): of records
        first, first + step, ..., their first warm_k_tiles k-tiles, the boxes this CTA's
        counterpart in a working pair loads (`sources`: this CTA's partitions of the weights,
        weight scales, token scales and tokens per variant), each box once: a weight block's on
        its first token tile, a token tile's on its first weight block. Prefetch is a hint and L2
        the point of coherence, so it needs no wait for the previous grid."""
        for t in range(first, args.num_tiles, step):
            n0, t0 = tiles[t, 1], tiles[t, 2]
            # a record that is neither its weight block's first token tile nor its token tile's first
            # block brings none (the record's own n0: a cluster's two pairs each hold a share of its
            # tokens, so both prefetch them on the record of the token tile's first blocks)
            k_end = cutlass.min(tiles[t, 6] // K_TILE, args.warm_k_tiles)
            if t0 != 0 and n0 != 0:
                k_end = 0
            self._prefetch_record(
                (tiles[t, 0], n0, t0, tiles[t, 3]), pair_rows, k_end, t0 == 0, n0 == 0, sources, atoms
            )

    @cute.jit
    def _prefetch_record(self, record, pair_rows, k_end, with_weights, with_tokens, sources, atoms):
        """cp.async.bulk.prefetch.tensor of a record's boxes (`record`: its group, n0, t0, variant)
        of k-tiles 0 .. k_end - 1 that this CTA loads (`sources`: its partitions of the weights,
        weight scales, token scales and tokens per variant): the weights' and their scales' where
        with_weights, the tokens' and their scales' where with_tokens."""
        weights, weight_scales, token_scales, tokens = sources
        weight_atoms, weight_sf_atoms, token_sf_atoms, token_atoms = atoms
        g, n0, t0, variant_index = record
        block = tiles_of(n0 + pair_rows, self.config.weight_rows, self.config.lean_walk)
        for k in range(0, k_end):
            for group in cutlass.range_constexpr(self.num_groups):
                if g == group:
                    if with_weights:
                        cute.prefetch(weight_atoms[group], weights[(None, block, k, 0)])
                        cute.prefetch(weight_sf_atoms[group], weight_scales[(None, block, k, 0)])
                    if with_tokens:
                        cute.prefetch(token_sf_atoms[group], token_scales[(None, t0 // TOKEN_CHUNK, k, 0)])
                        for v in cutlass.range_constexpr(len(self.variants)):
                            if variant_index == v:
                                cute.prefetch(
                                    token_atoms[v][group], tokens[v][(None, t0 // self.variants[v].tokens, k, 0)]
                                )
                                for b in cutlass.range_constexpr(1, self.variants[v].scale_blocks):
                                    cute.prefetch(token_sf_atoms[group], token_scales[(None, t0 // TOKEN_CHUNK + b, k, 0)])

    @cute.jit
    def _prefetch_descriptors(self, g, weight_atoms, token_atoms, weight_sf_atoms, token_sf_atoms):
        """prefetch.tensormap of group g's descriptors: by address ("selp"), or through each
        group's own atom ("branch", as NVIDIA's example prefetches its atoms)."""
        every = (weight_atoms, weight_sf_atoms, token_sf_atoms) + tuple(token_atoms)
        if cutlass.const_expr(self.config.descriptors == "selp"):
            for atoms in every:
                _prefetch_tensormap(select_by_group(g, [tma_desc_address(atom) for atom in atoms]))
        else:
            for group in cutlass.range_constexpr(self.num_groups):
                if g == group:
                    for atoms in every:
                        cpasync.prefetch_descriptor(atoms[group])

    @cute.jit
    def _load_tile(self, ab_pipeline, state, copies, k_tiles, tx_bytes, is_leader_cta):
        """The k-loop of one record, k-tiles 0 .. k_tiles - 1: per stage, wait for it to
        be empty, have the leader expect the worker's tx_bytes, and issue `copies`: (atom, descriptor
        or None for the atom's own, gmem k-tiles, smem stages, L2 policy or None, multicast mask or
        None) each."""
        for kt in range(0, k_tiles):
            ab_pipeline.sync_object_empty.wait(state.index, state.phase)
            if is_leader_cta:
                ab_pipeline.sync_object_full.arrive_and_expect_tx(state.index, tx_bytes)
            full = ab_pipeline.producer_get_barrier(state)
            for atom, desc, src, dst, policy, mask in copies:
                cute.copy(atom, src[(None, kt)], dst[(None, state.index)], tma_bar_ptr=full, tma_desc_ptr=desc,
                          mcast_mask=mask, cache_policy=policy)
            state.advance()
        return state

    # ---- MMA warp ----
    @cute.jit
    def mma(self, ab_pipeline, acc_pipeline, acc_tmem_ptr, smem, walk, is_leader_cta):
        """Warp 4; the leader CTA's issues for the worker. Per k-tile: copy the stage's scales to
        TMEM (tcgen05.cp), then 4 block-scaled tcgen05.mma (K = 64) into the tile's accumulator.
        Waits on: the stage's full barrier, the accumulator's empty barrier (the epilogues of the
        worker's CTAs). Signals (tcgen05.commit): the stage's empty barrier in every CTA of the
        cluster (with cluster_pairs 2 both pairs read its multicast tokens) and the accumulator's full
        barrier in both CTAs of the pair."""
        acc_columns = ACC_STAGES * self.acc_columns
        sfa_tmem_ptr = cute.recast_ptr(acc_tmem_ptr + acc_columns, dtype=SF_DTYPE)
        sfa_tmem_cols = (CTA_WEIGHT_ROWS // 32) * self.k_blocks
        sfb_tmem_ptr = cute.recast_ptr(acc_tmem_ptr + acc_columns + sfa_tmem_cols, dtype=SF_DTYPE)
        sfa_stage = cute.slice_(self.sfa_smem_layout, (None, None, None, 0))
        parts = []
        for v, variant in enumerate(self.variants):
            tiler = (self.config.weight_rows, variant.tokens, K_TILE)
            sfb_stage = cute.slice_(variant.sfb_smem_layout, (None, None, None, 0))
            tCtSFA = cute.make_tensor(
                sfa_tmem_ptr, blockscaled_utils.make_tmem_layout_sfa(variant.tiled_mma, tiler, SF_VEC_SIZE, sfa_stage)
            )
            tCtSFB = cute.make_tensor(
                sfb_tmem_ptr, blockscaled_utils.make_tmem_layout_sfb(variant.tiled_mma, tiler, SF_VEC_SIZE, sfb_stage)
            )
            parts.append((
                variant.tiled_mma,
                variant.tiled_mma.make_fragment_A(smem.a),  # (MMA, MMA_M, MMA_K, STAGE)
                variant.tiled_mma.make_fragment_B(smem.b[v]),  # (MMA, MMA_N, MMA_K, STAGE)
                self._accumulators(variant.tiled_mma, variant.tokens, acc_tmem_ptr),
                tCtSFA,
                tCtSFB,
                self._scale_copy_to_tmem(smem.sfa, tCtSFA),
                self._scale_copy_to_tmem(smem.sfb_variants[v], tCtSFB),
            ))

        tiles, begin, end, pair_rows = walk
        ab_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.num_stages)
        acc_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, ACC_STAGES)
        for t in range(begin, end):
            variant_index, k_tiles = tiles[t, 3], tiles[t, 6] // K_TILE
            if is_leader_cta:
                acc_pipeline.producer_acquire(acc_state)
                _tcgen05_fence("after_thread_sync")  # the epilogue's loads of this buffer are done
            for v in cutlass.range_constexpr(len(self.variants)):
                if variant_index == v:
                    ab_state = self._mma_tile(parts[v], ab_pipeline, ab_state, acc_state.index, k_tiles, is_leader_cta)
            if is_leader_cta:
                acc_pipeline.producer_commit(acc_state)
            acc_state.advance()
        acc_pipeline.producer_tail(acc_state)

    def _accumulators(self, tiled_mma, tokens, acc_tmem_ptr):
        """(MMA, MMA_M, MMA_N, ACC_STAGE): the accumulator fragments in TMEM of `tiled_mma` (of
        `tokens` columns), the widest variant's columns apart for every variant."""
        tiler = (self.config.weight_rows, tokens)
        acc = tiled_mma.make_fragment_C(tiled_mma.partition_shape_C(tiler))
        column = acc.stride[0][1]
        return cute.make_tensor(
            acc_tmem_ptr,
            cute.make_layout(cute.append(acc.shape, ACC_STAGES),
                             stride=cute.append(acc.stride, self.acc_columns * column)),
        )

    @cute.jit
    def _mma_tile(self, part, ab_pipeline, ab_state, acc_index, k_tiles, is_leader_cta):
        tiled_mma, tCrA, tCrB, tCtAcc, tCtSFA, tCtSFB, sfa_copy, sfb_copy = part
        copy_sfa, tCsSFA_s2t, tCtSFA_s2t = sfa_copy
        copy_sfb, tCsSFB_s2t, tCtSFB_s2t = sfb_copy
        acc = tCtAcc[(None, None, None, acc_index)]
        tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
        for _ in range(k_tiles):
            if is_leader_cta:
                ab_pipeline.consumer_wait(ab_state)
                stage = ab_state.index
                cute.copy(copy_sfa, tCsSFA_s2t[(None, None, None, None, stage)], tCtSFA_s2t)
                cute.copy(copy_sfb, tCsSFB_s2t[(None, None, None, None, stage)], tCtSFB_s2t)
                for kb in cutlass.range(self.k_blocks, unroll_full=True):
                    tiled_mma.set(tcgen05.Field.SFA, tCtSFA[(None, None, kb)].iterator)
                    tiled_mma.set(tcgen05.Field.SFB, tCtSFB[(None, None, kb)].iterator)
                    cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, stage)], tCrB[(None, None, kb, stage)], acc)
                    tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
                ab_pipeline.consumer_release(ab_state)
            ab_state.advance()
        return ab_state

    def _scale_copy_to_tmem(self, sSF, tSF):
        """tcgen05.cp (4x32x128b, issued for the worker's CTAs) of one stage's scales from smem to TMEM."""
        tCsSF = cute.filter_zeros(sSF)
        tCtSF = cute.filter_zeros(tSF)
        copy = tcgen05.make_s2t_copy(cute.make_copy_atom(tcgen05.Cp4x32x128bOp(self.mma_cta_group), SF_DTYPE), tCtSF)
        thr = copy.get_slice(0)
        return copy, tcgen05.get_s2t_smem_desc_tensor(copy, thr.partition_S(tCsSF)), thr.partition_D(tCtSF)

    # ---- epilogue warps ----
    @cute.jit
    def epilogue(self, acc_pipeline, acc_tmem_ptr, args, walk, warp_idx, cta_in_worker, sC, c_store):
        """Warps 0-3 of every CTA. Warp w holds TMEM lanes 32w..32w+31: weight rows
        n0 + 128 * cta_in_worker + 32w + lane of the tile. A tile's C goes one of two ways:
        _store_direct (from registers) or, with epilogue="tma_last" for the worker's last tile,
        _store_staged (through shared memory and a TMA store). Waits on: the accumulator's full
        barrier. Signals: the accumulator's empty barrier of the leader. Returns the staged stores'
        pipeline, whose tail the CTA waits for before it exits (None with "atoms")."""
        lane = cute.arch.lane_idx()
        odd = lane % 2
        lane_address = acc_tmem_ptr.toint() + ((32 * warp_idx) << 16)  # TMEM address: lane << 16 | column
        atom_load = self._atom_load(acc_tmem_ptr, warp_idx)
        staged = self._staged_c(acc_tmem_ptr, warp_idx, sC, c_store)
        tiles, begin, end, pair_rows = walk
        acc_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, ACC_STAGES)
        c_stage = cutlass.Int32(0)  # the C staging stage of this warp's next TMA store
        for t in range(begin, end):
            g, n0, t0, m_end, n = tiles[t, 0], tiles[t, 1] + pair_rows, tiles[t, 2], tiles[t, 4], tiles[t, 5]
            # (group, this warp's box row: its first weight row / C_WARP_ROWS): a TMA store's rows
            box_rows = (g, (n0 + CTA_WEIGHT_ROWS * cta_in_worker) // C_WARP_ROWS + warp_idx)
            # (this lane's weight row, M, N, the group's C): a direct store's
            rows = (n0 + CTA_WEIGHT_ROWS * cta_in_worker + 32 * warp_idx + lane, m_end, n, select_by_group(g, args.c))
            chunks = (m_end - t0 + EPILOGUE_COLUMNS - 1) // EPILOGUE_COLUMNS
            accumulator = (lane_address + acc_state.index * self.acc_columns, acc_state.index, atom_load)

            # A pair's second CTA holds rows past N when N is an odd multiple of 128, and a cluster's
            # second pair all of its rows when N is an odd multiple of 256: no stores.
            has_rows = n0 + CTA_WEIGHT_ROWS * cta_in_worker < n
            acc_pipeline.consumer_wait(acc_state)
            _tcgen05_fence("after_thread_sync")  # the MMAs that wrote this accumulator are done
            if cutlass.const_expr(self.tma_last):
                if t == end - 1:
                    c_stage = self._store_staged(staged, acc_pipeline, acc_state, has_rows, chunks, t0, box_rows, c_stage)
                else:
                    self._store_direct(acc_pipeline, acc_state, accumulator, has_rows, chunks, t0, rows, odd)
            else:
                self._store_direct(acc_pipeline, acc_state, accumulator, has_rows, chunks, t0, rows, odd)
            acc_state.advance()
        return staged.pipeline if cutlass.const_expr(self.tma_last) else None

    @cute.jit
    def _store_direct(self, acc_pipeline, acc_state, accumulator, has_rows, chunks, t0, rows, odd):
        """A tile's C straight from registers: per 32 tokens, this lane's 32 columns from TMEM
        (_tile_columns), rounded to fp16 and stored (_store_rows); then the accumulator's release."""
        if has_rows:
            for chunk in range(chunks):
                self._store_rows(self._tile_columns(accumulator, chunk), t0 + EPILOGUE_COLUMNS * chunk, rows, odd)
            self._release(acc_pipeline, acc_state)
        else:
            self._release(acc_pipeline, acc_state)

    @cute.jit
    def _store_staged(self, staged, acc_pipeline, acc_state, has_rows, chunks, t0, box_rows, c_stage):
        """A tile's C through C staging (NVIDIA's epilogue for an M-major C): per batch of staged.batch
        chunks (all of a tile up to 128 tokens) their TMEM loads, one tcgen05.wait::ld, after the
        tile's last loads the accumulator's release, then per chunk a TMA store (_store_box). Returns
        the warp's next C staging stage."""
        if has_rows:
            stage = acc_state.index
            for first in cutlass.range_constexpr(0, staged.chunks, staged.batch):
                end = min(first + staged.batch, staged.chunks)
                for chunk in cutlass.range_constexpr(first, end):
                    if chunk < chunks:
                        # tcgen05.ld of the chunk's columns into the batch's fragment, not waited for
                        cute.copy(staged.t2r, staged.tTR_tAcc[(None, None, None, 0, chunk, stage)],
                                  staged.tTR_rAcc[chunk - first])
                cute.arch.fence_view_async_tmem_load()  # tcgen05.wait::ld
                if cutlass.const_expr(end == staged.chunks):
                    self._release(acc_pipeline, acc_state)
                for chunk in cutlass.range_constexpr(first, end):
                    if chunk < chunks:
                        c_stage = self._store_box(staged, staged.tTR_rAcc[chunk - first], box_rows[0],
                                                  (box_rows[1], t0 // EPILOGUE_COLUMNS + chunk), c_stage)
        else:
            self._release(acc_pipeline, acc_state)
        return c_stage

    def _tile_columns(self, accumulator, chunk):
        """The accumulator's 32 fp32 columns 32 * chunk .. of this lane's weight row; accumulator =
        (this lane's TMEM address of the stage, the stage, the "atoms" epilogue's load)."""
        address, stage, atom_load = accumulator
        if cutlass.const_expr(self.tma_last):
            return _tmem_load_32_columns(address + EPILOGUE_COLUMNS * chunk)
        cute.copy(atom_load.tiled_copy, atom_load.sources[(None, None, None, 0, chunk, stage)], atom_load.registers)
        cute.arch.fence_view_async_tmem_load()  # tcgen05.wait::ld: the registers hold the columns
        return [atom_load.registers[i] for i in range(EPILOGUE_COLUMNS)]

    @cute.jit
    def _release(self, acc_pipeline, acc_state):
        _tcgen05_fence("before_thread_sync")  # this warp's TMEM loads precede the release
        with cute.arch.elect_one():
            acc_pipeline.consumer_release(acc_state)

    @cute.jit
    def _store_box(self, staged, bits, g, box_coord, c_stage):
        """This warp's 32 weight rows x 32 tokens of C, `bits` (its share in the TMEM-load atom's
        layout, as b32), rounded to fp16 and written with stmatrix into C staging stage `c_stage`,
        then stored by TMA to group g's C at box `box_coord` (weight rows / 32, tokens / 32),
        clipped at N and M. Before writing the stage, the store that last read it (c_stages stores
        ago) must have read it (wait_group.read); between the stmatrix and the store, every lane's
        fence.proxy.async and a warp barrier (the TMA unit reads through the async proxy). Returns
        the next stage of the warp's ring."""
        # fp16 of each fp32 pair, packed as the C fragment holds it (the TMEM load's layout, compact:
        # values 2j and 2j + 1 are C word j), as NVIDIA's .load().to(fp16) rounds them
        words = staged.c_words
        for j in cutlass.range_constexpr(EPILOGUE_COLUMNS // 2):
            words[j] = pack_f16x2_bits(bits[2 * j], bits[2 * j + 1])
        staged.pipeline.producer_acquire()  # cp.async.bulk.wait_group.read c_stages - 1
        cute.arch.sync_warp()  # every lane's wait precedes every lane's write
        cute.copy(staged.r2s, staged.r2s_registers, staged.r2s_smem[(None, None, None, c_stage)])
        cute.arch.fence_proxy(cute.arch.ProxyKind.async_shared, space=cute.arch.SharedSpace.shared_cta)
        cute.arch.sync_warp()  # every lane's write and fence precede the store
        destination = staged.gmem[(None, box_coord[0], box_coord[1], 0)]
        if cutlass.const_expr(self.config.descriptors == "selp"):
            cute.copy(staged.atoms[0], staged.smem[(None, c_stage)], destination, tma_desc_ptr=group_tma_desc(g, staged.atoms))
        else:
            for group in cutlass.range_constexpr(self.num_groups):
                if g == group:
                    cute.copy(staged.atoms[group], staged.smem[(None, c_stage)], destination)
        staged.pipeline.producer_commit()  # cp.async.bulk.commit_group
        return cutlass.Int32(cutlass.select_(c_stage == self.c_stages - 1, 0, c_stage + 1))  # the ring's next stage

    @cute.jit
    def _store_rows(self, values, first_row, rows, odd):
        """32 token rows (first_row ..) of this lane's output column, rounded to fp16 and stored to C:
        rows = (weight row n, m_end, N, the group's C address)."""
        weight_row, m_end, n, c_address = rows
        rows_left = m_end - first_row - odd
        address = c_address + (cutlass.Int64(first_row + odd) * n + weight_row - odd) * 2
        for p in cutlass.range_constexpr(EPILOGUE_COLUMNS // 2):
            word = row_pair_word(pack_f16x2(values[2 * p], values[2 * p + 1]), odd, 1)
            store_words_if(address + cutlass.Int64(2 * p) * n * 2, (word,), rows_left, 2 * p, 0)

    def _staged_c(self, acc_tmem_ptr, warp_idx, sC, c_store):
        """_StagedC: the staged epilogue's partitions, as NVIDIA's epilog_tmem_copy_and_partition,
        epilog_smem_copy_and_partition and epilog_gmem_copy_and_partition build them for an M-major
        C (None with epilogue="atoms"): the TMEM-load atom get_tmem_load_op picks (tcgen05.ld
        16x256b: thread t of a warp holds rows t / 4 and t / 4 + 8 of each 16, columns 2 (t % 4) +
        {0, 1} of each 8), the stmatrix.trans atom get_smem_store_op pairs with it, and the TMA
        store of this warp's box (its 32 weight rows x 32 tokens; the warps' boxes are disjoint, so
        each warp stores its own and no named barrier joins them)."""
        if not self.tma_last:
            return None
        c_atoms, tma_c = c_store
        tidx = 32 * warp_idx + cute.arch.lane_idx()
        widest = self.config.token_variants[-1]
        t2r_atom = sm100_utils.get_tmem_load_op(
            (CTA_WEIGHT_ROWS, widest), self.c_layout, C_DTYPE, ACC_DTYPE, self.epi_tile, self.cta_group == 2
        )
        # The load moves the accumulator's bits as b32 (Int32 values, a view of TMEM as Int32): with
        # fp32 values the DSL converts each instruction's registers right after it, i.e. reads them
        # before tcgen05.wait::ld; as Int32 they are first read as fp32 after the wait.
        tAcc_epi = []
        for dtype in (ACC_DTYPE, cutlass.Int32):
            # A fresh MMA: the MMA warp's instances carry its runtime fields (scale addresses).
            accumulators = self._accumulators(
                self._tiled_mma(widest, self.mma_cta_group), widest, cute.recast_ptr(acc_tmem_ptr, dtype=dtype)
            )
            # (EPI_M = 128, EPI_N = 32, 1, chunks, ACC_STAGE)
            tAcc_epi.append(cute.flat_divide(accumulators[((None, None), 0, 0, None)], self.epi_tile))
        t2r = tcgen05.make_tmem_copy(t2r_atom, tAcc_epi[0][(None, None, 0, 0, 0)])
        t2r_b32 = tcgen05.make_tmem_copy(cute.make_copy_atom(t2r_atom.op, cutlass.Int32), tAcc_epi[1][(None, None, 0, 0, 0)])
        t2r_thread = t2r_b32.get_slice(tidx)
        tTR_tAcc = t2r_thread.partition_S(tAcc_epi[1])  # (T2R, T2R_M, T2R_N, 1, chunks, ACC_STAGE)
        # (T2R, T2R_M, T2R_N): this thread's share of one (128, 32) epilogue tile, for each chunk of a
        # batch (a tile up to 128 tokens is loaded whole before its first store)
        fragment = t2r_thread.partition_D(cute.make_identity_tensor((CTA_WEIGHT_ROWS, EPILOGUE_COLUMNS))).shape
        chunks = widest // EPILOGUE_COLUMNS
        tTR_rAcc = [cute.make_rmem_tensor(fragment, cutlass.Int32) for _ in range(min(chunks, BOX_BATCH_CHUNKS))]
        r2s = cute.make_tiled_copy_D(sm100_utils.get_smem_store_op(self.c_layout, C_DTYPE, ACC_DTYPE, t2r), t2r)
        tRS_sC = r2s.get_slice(tidx).partition_D(sC)  # (R2S, R2S_M, R2S_N, C_STAGE)
        tTR_rC = cute.make_rmem_tensor(fragment, C_DTYPE)
        tRS_rC = r2s.retile(tTR_rC)  # (R2S, R2S_M, R2S_N)
        # This warp's box in every stage, and C's boxes: (C_WARP_ROWS, EPILOGUE_COLUMNS, ...)
        sC_warp = cute.flat_divide(sC, (C_WARP_ROWS, EPILOGUE_COLUMNS))[(None, None, warp_idx, 0, None)]
        gC = cute.flat_divide(tma_c, (C_WARP_ROWS, EPILOGUE_COLUMNS))  # (32, 32, N / 32, M / 32, L)
        # ((ATOM_V, REST_V), C_STAGE) and ((ATOM_V, REST_V), N / 32, M / 32, L)
        bSG_sC, bSG_gC = cpasync.tma_partition(
            c_atoms[0], 0, cute.make_layout(1), cute.group_modes(sC_warp, 0, 2), cute.group_modes(gC, 0, 2)
        )
        # The warp's own bulk groups: wait_group.read before a stage is rewritten, wait_group at exit.
        c_pipeline = pipeline.PipelineTmaStore.create(
            num_stages=self.c_stages, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32)
        )
        return _StagedC(
            chunks=chunks, batch=len(tTR_rAcc), t2r=t2r_b32, tTR_tAcc=tTR_tAcc, tTR_rAcc=tTR_rAcc, r2s=r2s,
            r2s_registers=tRS_rC, c_words=cute.recast_tensor(tTR_rC, cutlass.Int32), r2s_smem=tRS_sC, smem=bSG_sC,
            gmem=bSG_gC, atoms=c_atoms, pipeline=c_pipeline,
        )

    def _atom_load(self, acc_tmem_ptr, warp_idx):
        """_AtomLoad: the "atoms" epilogue's TMEM load, as NVIDIA's example builds it: the widest
        variant's accumulators divided into 32-column epilogue tiles, a tiled copy of the library's
        Ld32x32bOp (x32) over them, partitioned for this thread (None with "tma_last", which loads
        by inline tcgen05.ld)."""
        if self.config.epilogue != "atoms":
            return None
        # A fresh MMA: the MMA warp's instances carry its runtime fields (scale addresses).
        widest = self.config.token_variants[-1]
        accumulators = self._accumulators(self._tiled_mma(widest, self.mma_cta_group), widest, acc_tmem_ptr)
        # (EPI_M = 128 lanes, EPI_N = 32 columns, 1, chunks, ACC_STAGE)
        epilogue_tiles = cute.flat_divide(accumulators[((None, None), 0, 0, None)], (CTA_WEIGHT_ROWS, EPILOGUE_COLUMNS))
        atom = cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition.x32), ACC_DTYPE)
        tiled_copy = tcgen05.make_tmem_copy(atom, epilogue_tiles[(None, None, 0, 0, 0)])
        thread = tiled_copy.get_slice(32 * warp_idx + cute.arch.lane_idx())
        # This thread's values, in the shape of its share of one (128, 32) epilogue tile.
        coordinates = thread.partition_D(cute.make_identity_tensor((CTA_WEIGHT_ROWS, EPILOGUE_COLUMNS)))
        return _AtomLoad(
            tiled_copy=tiled_copy,
            sources=thread.partition_S(epilogue_tiles),  # (T2R, T2R_M, T2R_N, 1, chunks, ACC_STAGE)
            registers=cute.make_rmem_tensor(coordinates.shape, ACC_DTYPE),
        )


# --------------------------------------------------------------------------------------------------
# B200: compile and launch
# --------------------------------------------------------------------------------------------------


def _sm100_args_layout(num_groups: int) -> LaunchArgs:
    """Empty launch arguments of the B200 kernel for `num_groups` groups (compiling needs only
    their layout)."""
    return LaunchArgs(
        num_groups, addresses=("tiles", "worker_tiles"),
        integers=("num_tiles", "num_workers", "warmers", "warm_k_tiles", "self_warm_k_tiles"),
    )


_sm100_kernels: dict = {}


def compile_sm100(num_groups: int, config: Sm100Config | None = None):
    """The compiled sm_100a launch for `num_groups` groups and `config` (default: the file's
    SM100_CONFIG), cached by both (per-group descriptors are kernel parameters, so the group count
    is part of the kernel; shapes and the schedule are not). Works without a GPU when
    CUTE_DSL_ARCH=sm_100a is set, up to the cubin (only loading it fails)."""
    config = sm100_config() if config is None else config
    key = (num_groups, config)
    if key not in _sm100_kernels:
        _sm100_kernels[key] = cute.compile(Sm100GroupedGemm(num_groups, config), _sm100_args_layout(num_groups))
    return _sm100_kernels[key]


def sm100_launch_args(sizes, device, config: Sm100Config):
    """One shape signature's launch arguments, the device tables they point to, and the
    configuration they are for (sm100_shape_config): its schedule over the device's workers (the
    warmers first, warm_l2_plan), the sizes. The inputs' addresses arrive per call (ShapePlan.run)."""
    co_resident = DEVICE.co_resident_workers(device, config.cta_group)
    clusters = DEVICE.co_resident_workers(device, 2 * config.cta_group) if config.cluster_pairs == 2 else None
    config = sm100_shape_config(sizes, co_resident, config, clusters)
    records, offsets = sm100_schedule(sizes, co_resident, config, clusters)
    if config.cluster_pairs == 2:
        co_resident = clusters  # the workers are clusters of two pairs
    warmers, warm_k_tiles = warm_l2_plan(sizes, len(offsets), co_resident, config)
    self_warm_k_tiles = self_warm_plan(records, offsets, warmers, config)
    offsets = [[0, 0]] * warmers + offsets  # the warmers launch first (lowest cluster indices)
    tiles = torch.tensor(records, dtype=torch.int32, device=device)
    worker_tiles = torch.tensor(worker_rows(records, offsets, config.lean_walk), dtype=torch.int32, device=device)
    args = _sm100_args_layout(len(sizes))
    args.set_sizes(sizes)
    args.set("tiles", tiles.data_ptr())
    args.set("worker_tiles", worker_tiles.data_ptr())
    args.set("num_tiles", len(records))
    args.set("num_workers", len(offsets))
    args.set("warmers", warmers)
    args.set("warm_k_tiles", warm_k_tiles)
    args.set("self_warm_k_tiles", self_warm_k_tiles)
    return args, (tiles, worker_tiles), config


# What warmers may bring into L2 for one call: a quarter of the B200's 126.5 MiB, so that the call
# before, which is still reading its own inputs from L2, keeps them.
WARM_L2_BYTES = 32 << 20


def warm_l2_plan(sizes, busy_workers: int, co_resident: int, config: Sm100Config) -> tuple:
    """(warmers, k-tiles each record is warmed for) of `config` on `sizes`: every co-resident worker
    the schedule leaves idle, and as many of every record's first k-tiles as the call's distinct
    input bytes per k-tile (weights, tokens and their scales) fit WARM_L2_BYTES; (0, 0) when the
    switch is off or no worker is idle."""
    warmers = co_resident - busy_workers if config.warmers else 0
    if warmers <= 0:
        return 0, 0
    per_k_tile = sum((n + _ceil_div(m, SF_BLOCK_ROWS) * SF_BLOCK_ROWS) * (K_TILE // 2 + K_TILE // SF_VEC_SIZE)
                     for m, n, _ in sizes)
    k_tiles = max(k for _, _, k in sizes) // K_TILE
    return warmers, max(1, min(k_tiles, WARM_L2_BYTES // per_k_tile))


# What the workers' own prefetches (self_warm) may bring into L2 for one call, all workers together:
# fitted in the timed emulator on benchmark 2 among 2, 4 and 8 k-tiles (8.2, 16.4 and 32.7 MB; 8
# slowed the call before), benchmark 1 held out (BENCHMARKS.md, "Self-warming").
SELF_WARM_BYTES = 16 << 20


def self_warm_plan(records, offsets, warmers: int, config: Sm100Config) -> int:
    """k-tiles of its first record each worker prefetches before the dependency wait (self_warm):
    as many as the first records' input bytes per k-tile (weights, tokens of the record's variant
    and their scales) fit SELF_WARM_BYTES, at least 1; 0 when the switch is off or warmers launch
    (they bring every record's inputs)."""
    if not config.self_warm or warmers > 0:
        return 0
    rows = [config.schedule_rows + _ceil_div(config.token_variants[records[row[0]][3]], SF_BLOCK_ROWS) * SF_BLOCK_ROWS
            for row in offsets if row[0] < row[-1]]
    per_k_tile = sum(rows) * (K_TILE // 2 + K_TILE // SF_VEC_SIZE)
    return max(1, SELF_WARM_BYTES // max(per_k_tile, 1))


def make_sm100_launch(sizes, device, config: Sm100Config) -> CompiledLaunch:
    args, buffers, config = sm100_launch_args(sizes, device, config)
    return CompiledLaunch(compile_sm100(len(sizes), config), args, buffers=buffers, config=config)


# --------------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------------


def custom_kernel(data):
    """Write each group's C = A @ B^T (block-scaled, vector 16) into its `c`; return the list of c."""
    try:
        key = (_signature(data[3]), data[0][0][0].device, SM100_CONFIG)
    except (TypeError, IndexError, AttributeError):
        validate_inputs(data)  # says what is wrong with `data`
        raise
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = _build_plan(data)
    plan.run(data)
    return [c for _, _, c in data[0]]
