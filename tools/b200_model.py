"""An analytic time model of the NVFP4 grouped GEMM on a B200, evaluated on the kernel that ships.

No B200 is in reach of this project, so every B200 time it states comes from this model, evaluated
on exactly what submission.py builds: its constants are submission.B200_MODEL, its configurations
submission.Sm100Config (SM100_SHIPPED, SM100_SAFE, or any text Sm100Config.parse reads), and its
tiles the records that submission.sm100_schedule returns for the worker count the kernel launches
(B200_MODEL.sm_count // cta_group: 74 SM pairs, or 148 SMs). tests/tools/test_b200_model.py holds the
docs to its output.

    python tools/b200_model.py --shipped             # SM100_SHIPPED per task.yml benchmark
    python tools/b200_model.py --config safe         # any configuration, e.g. "shipped,jobs=hybrid"
    python tools/b200_model.py --configs             # shipped, each single switch flipped, safe
    python tools/b200_model.py --loo                 # leave-one-design-out refits: the error bar
    python tools/b200_model.py --calibration         # published B200 times against the model
    python tools/b200_model.py --refit FILE          # refit to a B200 run of calibration/b200_profile.py
    python tools/b200_model.py --hopper PROFILE.json # the same machinery on the Hopper kernel
    python tools/b200_model.py                       # all of the B200 tables; --markdown for docs

What it models (one call = one persistent kernel launch)
  - Tiles. A tile is one worker's share of the output: 128 weight rows per CTA (256 per SM pair)
    by a token tile of the configuration's token variants (64 or 128 columns), over all of K.
  - Mainloop, per 256-deep k-tile and CTA (B200Model.k_tile_us): max(MMA time, stage_round_trip_us
    / stages). MMA time is 128 x N x 256 FP4 multiply-adds at 16384 per clock per SM. The second
    term is Little's law for the TMA pipeline: a stage is refilled only after a full round trip
    (TMA issue, DRAM or L2 latency, MMA, commit back to the producer), so S stages in flight deliver
    at most S k-tiles per round trip. With the fitted round trip and 8 stages the second term binds
    for every token tile up to 221 columns: a CTA's speed is set by its stage count.
  - Epilogue per tile: C from TMEM to global at an assumed 64 B/clock per SM, plus a fitted constant
    for an epilogue staged through shared memory (TMA store; calibration designs only). Two TMEM
    accumulators overlap it with the next tile's mainloop (the slower of the two sets the pace); one
    accumulator adds it. The epilogue after the last mainloop is the tail.
  - Descriptors patched in the kernel (calibration designs only): descriptor_patch_us per descriptor
    rewritten and fenced before a tile whose group differs from the worker's previous tile.
  - DRAM: weights and their scales, tokens and theirs (rows padded to 128, as the blocked layout
    is) and C, at dram_efficiency x 7.68 TB/s. Assumption on weight reuse (L2): a weight block
    stays in L2 while any tile that uses it runs, so it is read from DRAM once if its tiles run
    concurrently or back to back; a tile that starts after every earlier tile of its block has
    finished reads the block again. Tokens are read from DRAM once per group.
  - Total = start_us + max(busiest worker's mainloops + its tail, DRAM time + largest epilogue).

What it ignores: L2 bandwidth, hence any gain from multicast (no public B200 L2 bandwidth figure);
DRAM page and channel effects; the two dies' distances; clocks dropping under load; MMA issue
overheads at small N; host time (hidden behind the board's L2 flush); the first call's extra costs.

Which Sm100Config switches it can judge
  - cta_group, token_variants and jobs: workers, stage count, token widths and the schedule all
    enter the model (the per-configuration table gives each its own figure).
  - multicast, l2_hints, epilogue, descriptors, pdl, warmers, self_warm, cluster_pairs and
    lean_walk: the model has no term for them,
    so every one of them gets the shipped figure, and the table says so. Assumed ranges, not
    measured and not fitted: pdl hides part of start_us (4.6 us per call): PDL, launch
    and prologue overlapped with the previous call's tail, 0 to 2 us per call (gau-nernst's
    start-up steps moved benchmarks 3 and 4 by 1.6-1.9 us; PDL across calls gained nothing
    measurable on the H200's Hopper path, BENCHMARKS.md). l2_hints: 0 to 5% on the DRAM-bound
    benchmarks 1 and 2, nothing on 3 and 4. multicast (2 KB of token scales per stage), epilogue
    (direct stores or a TMA store of the tail tile) and descriptors (a select chain or a branch per
    copy): 0 to 2%. warmers (idle pairs
    prefetching a call's inputs into L2 while the call before runs; only where the schedule leaves
    pairs idle, benchmarks 3 and 4): 0 to the first load's HBM latency, about 1 us per call there.
    self_warm (each worker prefetching its first record's first k-tiles before the dependency
    wait, where no warmer launches: benchmarks 1 and 2): 0 to 5% there. cluster_pairs (two pairs
    sharing each token k-tile by multicast, where pairs are idle: benchmarks 3 and 4): up to the
    part of the mainloop L2's ports pace, 6% and 4% there in the timed emulator; the model counts
    a cluster's record as its two pairs' tiles. lean_walk (each worker's first record read with its
    offsets, under the cluster barrier's wait, and a record's divisions by shifts): part of start_us,
    0 to 0.3 us per call (one L2 round trip and a few dozen instructions before the first load).
  A B200 run (calibration/b200_profile.py, then --refit) measures them all.

Calibration. Five constants of B200Model are fitted: least squares of the relative error over the
16 claimed rows of CALIBRATION (gau-nernst's v6b and three steps of Nareg's ladder, on all four
benchmarks), rounded; the calibration designs run through the same tile, schedule-free estimate
code with the same constants. The rest are public figures or stated assumptions (B200Model's
comments). Leave-one-design-out refits (--loo) give the model's honest error bar: the held-out RMS
relative error, which every printed B200 figure carries. The model ranks structural effects well
above that error (idle pairs, stage counts); it cannot rank changes below it.
Not claimed: Nareg's sub_v6_2_descoverlap (A/B/C patched on every tile by a separate warp) is
25-35% slower than the model says: what it adds over V16 is serialization the model does not have.

--hopper applies the same schedule code and estimate to the H200 kernel (sm90_kernel.py), with
per-tile costs measured by `python calibration/sm90_profile.py tiles --json` instead of the B200 tile
model and a start-up constant stated below (HOPPER_START_US), to test the method where hardware
exists (calibration/h200_method_check.py runs it against measured means).
"""

import argparse
import dataclasses
import functools
import json
import math
import sys
from collections import namedtuple
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import submission  # noqa: E402
from submission import B200_MODEL, CTA_WEIGHT_ROWS, K_TILE, SF_VEC_SIZE, SMEM_BYTES, SMEM_RESERVED_BYTES  # noqa: E402
from submission import SM100_SAFE, SM100_SHIPPED, Sm100Config, build_tile_schedule, sm100_schedule, sm100_shape_config  # noqa: E402

FITTED = ("dram_efficiency", "stage_round_trip_us", "start_us", "tma_store_epilogue_us", "descriptor_patch_us")
SCALE_BLOCK_BYTES = 128 * K_TILE // SF_VEC_SIZE  # one 128-row block of e4m3 scales per k-tile
# Sm100Config fields the model has no term for (module docstring: assumed ranges).
NOT_MODELED = ("multicast", "pdl", "l2_hints", "epilogue", "descriptors", "warmers", "self_warm", "cluster_pairs",
               "lean_walk")

# One tile on its worker: group, weight block (group, first row), first token, tokens, and its
# mainloop (k-tiles x time per k-tile), MMA-only and epilogue microseconds.
TileCost = namedtuple("TileCost", "group block t0 tokens mainloop_us mma_us epilogue_us")
# total_us = fixed_us + max(busiest_us + its last epilogue, dram_us + the largest epilogue); tail_us
# is the epilogue of whichever bound. busiest_us: mainloops (with overlapped epilogues and
# descriptor patches) of the worker that finishes last; mma_us: its MMA time alone; busiest_tiles:
# that worker's tile count; workers: co-resident workers, busy_workers: those with a tile.
Estimate = namedtuple(
    "Estimate",
    "total_us fixed_us busiest_us mma_us dram_us tail_us bytes tiles workers busy_workers busiest_tiles "
    "rereads stages",
)


def _mma_us(model, tokens: int) -> float:
    return CTA_WEIGHT_ROWS * tokens * K_TILE / (model.fp4_fma_per_clock_per_sm * model.mma_clock_mhz)


def _other_bytes(sizes) -> int:
    """DRAM bytes besides the weights: tokens, their scales (rows padded to 128) and C."""
    return sum(m * k // 2 + -(-m // 128) * 128 * k // SF_VEC_SIZE + m * n * 2 for m, n, k in sizes)


def estimate(bins, block_bytes, other_bytes, stages, workers, model=B200_MODEL, accumulators=2, patch_us=0.0):
    """Predicted time of one call: worker w runs the TileCosts of bins[w] in order (len(bins) <=
    workers). patch_us is paid before a tile whose group differs from the worker's previous tile
    (descriptors patched in the kernel)."""
    intervals = {}  # weight block -> [(start, end)] of its tiles' mainloops
    worst = (-1.0, 0.0, 0.0, 0.0, 0)  # (finish, mainloops, tail, mma, tiles) of the busiest worker
    for b in bins:
        clock = mma = previous_epilogue = 0.0
        previous_group = None
        for t in b:
            mainloop = t.mainloop_us + (patch_us if t.group != previous_group else 0.0)
            start = clock + (previous_epilogue if accumulators == 1 else 0.0)
            step = mainloop + previous_epilogue if accumulators == 1 else max(mainloop, previous_epilogue)
            intervals.setdefault(t.block, []).append((start, clock + step))
            clock += step
            mma += t.mma_us
            previous_epilogue, previous_group = t.epilogue_us, t.group
        if clock + previous_epilogue > worst[0]:
            worst = (clock + previous_epilogue, clock, previous_epilogue, mma, len(b))
    rereads = 0
    dram_bytes = other_bytes
    for blk, spans in intervals.items():
        spans.sort()
        reads, last_end = 1, spans[0][1]
        for start, end in spans[1:]:
            reads += start > last_end  # every earlier tile of the block has finished: evicted
            last_end = max(last_end, end)
        rereads += reads - 1
        dram_bytes += reads * block_bytes[blk]
    dram_us = dram_bytes / (model.dram_bytes_per_us * model.dram_efficiency)
    worker_end, busiest, tail, mma, busiest_tiles = worst
    # DRAM bound: every worker waits on bytes, so any tile may be the last; take the largest tail.
    largest_epilogue = max(t.epilogue_us for b in bins for t in b)
    if dram_us + largest_epilogue > worker_end:
        tail = largest_epilogue
    return Estimate(model.start_us + max(worker_end, dram_us + largest_epilogue), model.start_us, busiest, mma,
                    dram_us, tail, dram_bytes, sum(map(len, bins)), workers, sum(1 for b in bins if b),
                    busiest_tiles, rereads, stages)


# ---- the kernel that ships: Sm100Config on sm100_schedule's records ---------------------------

def workers_of(config: Sm100Config, model=B200_MODEL) -> int:
    """Co-resident workers: SM pairs for cta_group 2, SMs for 1 (one CTA per SM). The kernel asks
    the driver; a B200 that cannot pair every SM would run fewer pairs than this."""
    return model.sm_count // config.cta_group


@functools.cache
def _launched_config(config: Sm100Config, sizes, workers: int) -> Sm100Config:
    """submission.sm100_shape_config, cached as _config_layout is: the choice builds two schedules and
    does not depend on the fitted constants (a refit predicts the same shapes some 2000 times)."""
    return sm100_shape_config(sizes, workers, config)


@functools.cache
def _config_layout(config: Sm100Config, sizes, workers: int):
    """What of `config`'s call does not depend on the fitted constants (cached: fits call it
    often): per worker, its records as (group, weight block, t0, tokens, variant width, k-tiles) in
    the order the kernel walks them; and the DRAM bytes per weight block."""
    records, offsets = sm100_schedule(sizes, workers, config)
    # A cluster of two pairs (cluster_pairs 2) runs each record on two weight blocks, one a pair:
    # modeled as its two pairs, each walking the record on its own block. A pair wholly past N runs in
    # step with its partner on zero-filled boxes; it is left out, as its partner's walk bounds it.
    pairs = [[(g, n0 + pair * config.weight_rows, t0, v, m_end, n, k_end)
              for g, n0, t0, v, m_end, n, k_end, _ in records[begin:end]
              if n0 + pair * config.weight_rows < n]
             for begin, end in offsets for pair in range(config.cluster_pairs)]
    block_bytes = {(g, n0): min(config.weight_rows, n - n0) * (sizes[g][2] // 2 + sizes[g][2] // SF_VEC_SIZE)
                   for walk in pairs for g, n0, _, _, _, n, _ in walk}
    bins = [[(g, (g, n0), t0, m_end - t0, config.token_variants[v], k_end // K_TILE)
             for g, n0, t0, v, m_end, n, k_end in walk] for walk in pairs]
    return bins, block_bytes


def predict_config(config: Sm100Config, sizes, model=B200_MODEL, as_launched: bool = True) -> Estimate:
    """Predicted time of one call of `config`'s kernel on `sizes` [(M, N, K), ...], with its parts:
    each record of submission.sm100_schedule costs its k-tiles at B200Model.k_tile_us of its variant
    width and the configuration's stages, and its epilogue stores its tokens' rows. `as_launched`:
    of the kernel the launch picks for the shape (submission.sm100_shape_config: with token variants
    64/128/192, the 192-token kernel only where it lowers the busiest worker's load); else of
    `config`'s own."""
    sizes = tuple(map(tuple, sizes))
    if as_launched:
        config = _launched_config(config, sizes, workers_of(config, model))
    bins, block_bytes = _config_layout(config, sizes, workers_of(config, model))
    stages = config.stages
    costs = [[TileCost(g, block, t0, tokens, k_tiles * model.k_tile_us(width, stages), k_tiles * _mma_us(model, width),
                       CTA_WEIGHT_ROWS * tokens * 2 / model.store_bytes_per_us)
              for g, block, t0, tokens, width, k_tiles in b] for b in bins]
    return estimate(costs, block_bytes, _other_bytes(sizes), stages, workers_of(config, model), model)


# ---- calibration designs: other people's kernels, the same constants and estimate -------------

@dataclass(frozen=True)
class Design:
    """A published kernel design, as far as the model can tell designs apart. Every CTA owns 128
    weight rows of a tile and runs 256-deep k-tiles."""

    name: str
    weights_as_m: bool = True  # weights on the MMA's M side, tokens on N; else tokens are M = 128
    cta_group: int = 2  # 2: cta_group::2, a worker is an SM pair covering 256 weight rows
    token_tiles: tuple = (128,)  # token tile sizes: the largest, then the smallest that covers the rest
    stages: Optional[int] = None  # smem stages; None: as many as fit
    smem_reserved: int = SMEM_RESERVED_BYTES  # barriers, plus C staging for a TMA-store epilogue
    accumulators: int = 2  # TMEM accumulators: 2 overlap a tile's epilogue with the next mainloop
    descriptors: str = "params"  # "params" (host-built), "group_change" or "every_tile" (patched)
    descriptors_patched: int = 0  # descriptors rewritten and fenced on the TMA warp's path per patch
    epilogue: str = "direct"  # "direct" (TMEM -> registers -> global) or "tma_store" (via smem)
    schedule: str = "columns"  # "columns" (gau-nernst) or "stride" (tile i on worker i % W)

    def __post_init__(self):
        if not self.weights_as_m and (self.cta_group, self.token_tiles) != (1, (128,)):
            raise ValueError(f"{self.name}: tokens as M means 1-CTA 128 x 128 tiles here")
        if self.schedule not in ("columns", "stride") or self.epilogue not in ("direct", "tma_store"):
            raise ValueError(f"{self.name}: unknown schedule or epilogue")
        if self.descriptors not in ("params", "group_change", "every_tile"):
            raise ValueError(f"{self.name}: unknown descriptor handling {self.descriptors!r}")


def cut_tokens(m, token_tiles):
    """(first token, tile size) of each token tile of an M-token group: tiles of the largest size,
    then the smallest size that covers what is left."""
    big = max(token_tiles)
    cuts = [(t0, big) for t0 in range(0, m - m % big, big)]
    if m % big:
        cuts.append((m - m % big, min(t for t in token_tiles if t >= m % big)))
    return cuts


@functools.cache
def _design_layout(design: Design, sizes, sm_count: int):
    """What of a design's call does not depend on the fitted constants: its tiles as (group, weight
    block, first token, tokens, MMA columns, k-tiles), each worker's tile indices in run order, the
    DRAM bytes per weight block, the stage count and the worker count (cached: fits call it often)."""
    largest = max(design.token_tiles)
    stage_bytes = ((128 + largest // design.cta_group) * K_TILE // 2
                   + SCALE_BLOCK_BYTES * (1 + -(-largest // 128)))
    stages = design.stages or (SMEM_BYTES - design.smem_reserved) // stage_bytes
    rows = 128 * design.cta_group
    tiles, block_bytes = [], {}  # numbered group after group, weight block outer, token tile inner
    for g, (m, n, k) in enumerate(sizes):
        for r0 in range(0, n, rows):
            block_bytes[(g, r0)] = min(rows, n - r0) * (k // 2 + k // SF_VEC_SIZE)
            for t0, size in cut_tokens(m, design.token_tiles):
                tokens = min(size, m - t0)
                # Tiles over 128 tokens issue N = 128 MMAs, only as many as hold tokens.
                cols = size if size <= 128 else 128 * -(-tokens // 128)
                tiles.append((g, (g, r0), t0, tokens, cols, k // K_TILE))
    workers = sm_count // design.cta_group
    if design.schedule == "columns":
        # gau-nernst: weight-block columns x `rows` rows of pairs; row r walks token tiles r,
        # r + rows, ... of all groups, groups sorted by descending M. Needs one N for all groups.
        (n,) = {n for _, n, _ in sizes}
        columns = -(-n // 256)
        token_tiles = sorted({(t[0], t[2]) for t in tiles}, key=lambda gt: (-sizes[gt[0]][0], gt))
        rank = {gt: j for j, gt in enumerate(token_tiles)}
        height = min(sm_count // (2 * columns), len(token_tiles))
        bins = [[] for _ in range(columns * height)]
        for i in sorted(range(len(tiles)), key=lambda i: rank[(tiles[i][0], tiles[i][2])]):
            bins[rank[(tiles[i][0], tiles[i][2])] % height * columns + tiles[i][1][1] // 256].append(i)
    else:
        # Nareg: static stride over tiles numbered group after group, weight tiles fastest.
        numbering = sorted(range(len(tiles)), key=lambda i: (tiles[i][0], tiles[i][2], tiles[i][1]))
        width = min(workers, len(tiles))
        bins = [numbering[w::width] for w in range(width)]
    return tiles, bins, block_bytes, stages, workers


def predict_design(design: Design, sizes, model=B200_MODEL) -> Estimate:
    """Predicted time of one call of a calibration design on `sizes`."""
    tiles, bins, block_bytes, stages, workers = _design_layout(design, tuple(map(tuple, sizes)), model.sm_count)
    patch_us = model.descriptor_patch_us * design.descriptors_patched
    extra = model.tma_store_epilogue_us if design.epilogue == "tma_store" else 0.0
    every_tile = patch_us if design.descriptors == "every_tile" else 0.0
    costs = [TileCost(g, block, t0, tokens, k_tiles * model.k_tile_us(cols, stages) + every_tile,
                      k_tiles * _mma_us(model, cols), extra + 128 * tokens * 2 / model.store_bytes_per_us)
             for g, block, t0, tokens, cols, k_tiles in tiles]
    return estimate([[costs[i] for i in b] for b in bins], block_bytes, _other_bytes(sizes), stages, workers, model,
                    design.accumulators, patch_us if design.descriptors == "group_change" else 0.0)


# Two 128 x 32 fp16 C staging buffers of a TMA-store epilogue, next to the barriers.
TMA_STORE_RESERVED = SMEM_RESERVED_BYTES + 2 * 128 * 32 * 2

# gau-nernst v6b: weights as M on pairs, token tile 128 (benchmark 2: 256, run as two N = 128
# MMAs, the second skipped when the tile has 128 tokens or fewer), stages filling 227 KB,
# tensor maps built on the host, direct stores, weight-block columns walking the token tiles.
GAU_V6B = Design("gau-nernst v6b")
GAU_V6B_256 = replace(GAU_V6B, name="gau-nernst v6b (BLOCK_M 256)", token_tiles=(256,))
# Nareg's v6 family: tokens as M, 128 x 128 x 256 tiles, 5 stages, chunked TMA-store epilogue,
# static stride over tiles numbered group after group with weight tiles fastest. V14 -> V15
# (TMA pipelined across tiles) moved nothing by more than 0.5 us, so the model has no such field.
# V17's cluster of 2 multicasts the token tile; the model has no L2 term, so multicast is free
# of effect there and V17's gain over V16 is all the removed descriptor patches.
NAREG_V16 = Design(
    "Nareg V16 sub_v6_2 (TMEM ping-pong, A/B descriptors patched per group change)",
    weights_as_m=False, cta_group=1, stages=5, smem_reserved=TMA_STORE_RESERVED,
    descriptors="group_change", descriptors_patched=2, epilogue="tma_store", schedule="stride")
NAREG_V14 = replace(NAREG_V16, name="Nareg V14 sub_v6 (one TMEM accumulator)", accumulators=1)
NAREG_V17 = replace(NAREG_V16, name="Nareg V17 sub_v6_2_3 (host-built descriptors, cluster of 2)",
                    descriptors="params", descriptors_patched=0)
NAREG_DESCOVERLAP = replace(NAREG_V16, name="Nareg sub_v6_2_descoverlap (A/B/C patched every tile)",
                            descriptors="every_tile", descriptors_patched=3)


@dataclass(frozen=True)
class CalibrationRow:
    design: Design
    family: str  # the design left out together in a leave-one-design-out refit
    benchmark: int  # 1-based, task.yml order
    measured_us: float
    claimed: bool  # fitted, and the test asserts |error| <= CLAIM_BOUND
    source: str


GAU_SOURCE = "gau-nernst/gpu-mode-kernels nvidia/nvfp4_group_gemm/README.md"
NAREG_SOURCE = "NaregAmirianMegan/NVFP4_Kernels nvfp4_grouped_gemm/group_gemm_timings.txt"


def _rows(design, family, times, claimed, source, designs_by_benchmark=None):
    return [CalibrationRow((designs_by_benchmark or {}).get(b, design), family, b, t, claimed, source)
            for b, t in enumerate(times, start=1)]


CALIBRATION = (
    _rows(GAU_V6B, "gau-nernst v6b", (27.9, 19.4, 8.48, 6.43), True, GAU_SOURCE, {2: GAU_V6B_256})
    + _rows(NAREG_V14, "Nareg V14", (43.6, 33.5, 14.3, 10.5), True, NAREG_SOURCE)
    + _rows(NAREG_V16, "Nareg V16", (41.8, 31.1, 13.9, 10.5), True, NAREG_SOURCE)
    + _rows(NAREG_V17, "Nareg V17", (38.3, 24.9, 12.8, 9.1), True, NAREG_SOURCE)
    + _rows(NAREG_DESCOVERLAP, "Nareg descoverlap", (59.3, 42.7, 21.5, 16.7), False, NAREG_SOURCE)
)
CLAIM_BOUND = 0.25


# ---- benchmarks -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Benchmark:
    sizes: tuple  # ((M, N, K), ...)
    sol_us: float  # task.yml's speed of light


def load_benchmarks(path: Path = ROOT / "task.yml") -> tuple:
    """task.yml's benchmarks with the speed of light of its description table (same order)."""
    spec = yaml.safe_load(path.read_text())
    sol = [float(line.split()[-1]) for line in spec["description"].splitlines()
           if line.strip()[:1].isdigit() and "[" in line]
    if len(sol) != len(spec["benchmarks"]):
        raise ValueError(f"{path}: {len(sol)} speed-of-light rows for {len(spec['benchmarks'])} benchmarks")
    return tuple(Benchmark(tuple(zip(b["m"], b["n"], b["k"])), t) for b, t in zip(spec["benchmarks"], sol))


def geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def predict_geomean(config: Sm100Config) -> float:
    """The predicted geomean of task.yml's benchmarks under `config`: how tools/check.py ranks the
    configurations a failing first run can fall back to."""
    return geomean(predict_config(config, bench.sizes).total_us for bench in load_benchmarks())


# ---- fitting: least squares of the relative error ---------------------------------------------

def fit(rows, start=B200_MODEL, names=FITTED, rounds=60):
    """The B200Model whose `names` minimize the sum of squared relative errors of `rows`, each a
    (predict(model) -> us, measured us) pair: a pattern search on the logarithms (standard library
    only), from `start`, steps halving from a factor 2 down to 0.1% (finer than any constant is
    printed)."""
    def cost(model):
        return sum((predict(model) / measured - 1) ** 2 for predict, measured in rows)

    best, best_cost = start, cost(start)
    step = math.log(2.0)
    while step > 1e-3:
        improved = False
        for name in names:
            for sign in (1, -1):
                for _ in range(rounds):  # keep walking while it improves
                    trial = replace(best, **{name: getattr(best, name) * math.exp(sign * step)})
                    trial_cost = cost(trial)
                    if trial_cost >= best_cost:
                        break
                    best, best_cost, improved = trial, trial_cost, True
        if not improved:
            step /= 2
    return best


def calibration_rows(benches, rows=None):
    """(predict, measured) pairs of the claimed calibration rows (or of `rows`)."""
    return [((lambda model, r=r: predict_design(r.design, benches[r.benchmark - 1].sizes, model).total_us),
             r.measured_us) for r in (rows if rows is not None else [r for r in CALIBRATION if r.claimed])]


@dataclass(frozen=True)
class LeaveOneOut:
    family: str
    model: object  # the B200Model fitted without this design's rows
    errors: tuple  # relative errors of the held-out rows, benchmarks 1..4


@functools.cache
def leave_one_design_out(benches) -> tuple:
    """One refit of the five constants per claimed design, on the other designs' claimed rows."""
    claimed = [r for r in CALIBRATION if r.claimed]
    out = []
    for family in dict.fromkeys(r.family for r in claimed):
        model = fit(calibration_rows(benches, [r for r in claimed if r.family != family]))
        held = [r for r in claimed if r.family == family]
        errors = tuple(predict_design(r.design, benches[r.benchmark - 1].sizes, model).total_us / r.measured_us - 1
                       for r in held)
        out.append(LeaveOneOut(family, model, errors))
    return tuple(out)


def held_out_rms(loo) -> float:
    errors = [e for fold in loo for e in fold.errors]
    return math.sqrt(sum(e * e for e in errors) / len(errors))


# ---- report -----------------------------------------------------------------------------------

def _table(header, rows, markdown):
    cells = [list(map(str, header))] + [[str(c) for c in r] for r in rows]
    if markdown:
        lines = ["| " + " | ".join(r) + " |" for r in cells]
        lines.insert(1, "| " + " | ".join("---" for _ in header) + " |")
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def error_bar(rms: float) -> str:
    return f"± {100 * rms:.0f}% (model, held-out RMS)"


def config_table(config: Sm100Config, benches, rms, markdown=False, model=B200_MODEL) -> str:
    """Per benchmark: predicted time, busy workers of the co-resident ones, the busiest worker's
    tiles; the geomean on the last line."""
    unit = "pairs" if config.cta_group == 2 else "SMs"
    rows, totals, stages = [], [], []
    for i, b in enumerate(benches, start=1):
        e = predict_config(config, b.sizes, model)
        totals.append(e.total_us)
        stages.append(str(e.stages))
        rows.append((i, len(b.sizes), f"{b.sol_us:.3f}", f"{e.total_us:.2f}", f"{e.busy_workers}/{e.workers}",
                     e.busiest_tiles, f"{e.busiest_us:.2f}", f"{e.dram_us:.2f}", e.rereads))
    header = ("bench", "G", "SOL us", "predicted us", f"busy {unit}", "busiest worker's tiles",
              "busiest worker us", "DRAM us", "weight re-reads")
    lines = [f"configuration: {config.describe()} ({' / '.join(stages)} stages, {workers_of(config, model)} "
             f"co-resident {unit}); every time {error_bar(rms)}", "",
             _table(header, rows, markdown), "",
             f"geomean: {geomean(totals):.2f} us {error_bar(rms)}"]
    return "\n".join(lines)


def single_flips() -> list:
    """(label, config): shipped, each field of Sm100Config flipped alone, and safe."""
    flips = [("shipped", SM100_SHIPPED)]
    for field in dataclasses.fields(Sm100Config):
        value = getattr(SM100_SHIPPED, field.name)
        alternatives = {"cta_group": [1], "token_variants": [(64, 128), (128,)], "epilogue": ["atoms"],
                        "descriptors": ["branch"], "jobs": [j for j in submission.JOB_POLICIES if j != value],
                        "cluster_pairs": [1]}
        for other in alternatives.get(field.name, [not value]):
            config = SM100_SHIPPED.with_needs(**{field.name: other})
            flips.append((config.describe(), config))
    flips.append(("safe", SM100_SAFE))
    return flips


def configs_table(benches, rms, markdown=False, model=B200_MODEL) -> str:
    """Each single switch flipped from shipped, and safe: what the fallback costs."""
    shipped = [predict_config(SM100_SHIPPED, b.sizes, model).total_us for b in benches]
    rows = []
    for label, config in single_flips():
        times = [predict_config(config, b.sizes, model).total_us for b in benches]
        unjudged = [name for name in NOT_MODELED if getattr(config, name) != getattr(SM100_SHIPPED, name)]
        note = ("not modeled: " + ", ".join(unjudged) + " (the shipped figure)") if unjudged else ""
        rows.append((label, *(f"{t:.2f}" for t in times), f"{geomean(times):.2f}",
                     f"{geomean(times) / geomean(shipped) - 1:+.0%}", note))
    header = ("configuration", "bench 1 us", "bench 2 us", "bench 3 us", "bench 4 us", "geomean us",
              "vs shipped", "note")
    return "\n".join([
        _table(header, rows, markdown), "",
        f"every time {error_bar(rms)}; differences below that error are not resolved by the model.",
        "The model judges cta_group, token_variants and jobs; it has no term for " + ", ".join(NOT_MODELED)
        + ": assumed, not measured, pdl 0 to 2 us of the 4.6 us start per call,"
        " warmers 0 to 1 us per call on benchmarks 3 and 4, l2_hints and self_warm 0 to 5% on benchmarks 1"
        " and 2, cluster_pairs (L2's ports, not in the model) 0 to 6% on benchmarks 3 and 4, lean_walk 0 to"
        " 0.3 us of the start per call, the others 0 to 2%"
        " (tools/b200_model.py docstring).",
    ])


def calibration_table(benches, markdown=False, model=B200_MODEL) -> str:
    rows = []
    for row in CALIBRATION:
        p = predict_design(row.design, benches[row.benchmark - 1].sizes, model).total_us
        rows.append((row.design.name, row.benchmark, f"{p:.2f}", f"{row.measured_us:.2f}",
                     f"{100 * (p / row.measured_us - 1):+.1f}", "yes" if row.claimed else "no"))
    table = _table(("design", "bench", "predicted us", "measured us", "error %",
                    f"fitted, error within {CLAIM_BOUND:.0%}"), rows, markdown)
    sources = sorted({row.source for row in CALIBRATION})
    constants = ", ".join(f"{name} {getattr(model, name):g}" for name in FITTED)
    return "\n".join([table, "", f"constants: {constants}", "measured times from: " + "; ".join(sources)])


def loo_table(loo, markdown=False) -> str:
    rows = [(fold.family, *(f"{100 * e:+.0f}" for e in fold.errors),
             ", ".join(f"{name} {getattr(fold.model, name):.3g}" for name in FITTED)) for fold in loo]
    errors = [abs(e) for fold in loo for e in fold.errors]
    header = ("design left out", "bench 1 error %", "bench 2 error %", "bench 3 error %", "bench 4 error %",
              "constants fitted without it")
    return "\n".join([_table(header, rows, markdown), "",
                      f"held-out RMS {100 * held_out_rms(loo):.0f}%, worst {100 * max(errors):.0f}% "
                      f"({len(errors)} held-out rows)"])


def report(markdown=False) -> str:
    benches = load_benchmarks()
    loo = leave_one_design_out(benches)
    rms = held_out_rms(loo)
    heading = (lambda s: f"\n### {s}\n") if markdown else (lambda s: f"\n== {s} ==")
    return "\n".join([
        heading("Calibration: published B200 times against the model"), calibration_table(benches, markdown),
        heading("Leave-one-design-out refits: the model's error bar"), loo_table(loo, markdown),
        heading("SM100_SHIPPED per task.yml benchmark"), config_table(SM100_SHIPPED, benches, rms, markdown),
        heading("Each switch flipped from shipped, and safe: what the fallback costs"),
        configs_table(benches, rms, markdown),
    ])


# ---- refit to a B200 run (calibration/b200_profile.py) ----------------------------------------------

def load_profile_runs(path: Path) -> list:
    """(Sm100Config, benchmark number, measured mean us) of every successful run in a
    calibration/b200_profile.py file (format in that tool's docstring)."""
    data = json.loads(Path(path).read_text())
    if data.get("format") != "b200_profile/1":
        raise ValueError(f"{path}: not a calibration/b200_profile.py file (format {data.get('format')!r})")
    return [(Sm100Config.parse(run["config"]), run["benchmark"], run["mean_us"])
            for run in data["runs"] if run.get("mean_us") is not None]


def refit(runs, benches, start=B200_MODEL):
    """(model, fitted names): the constants that the measured configurations depend on, refitted
    by least squares of the relative error to the measured means; the others are kept."""
    rows = [((lambda model, c=c, b=b: predict_config(c, benches[b - 1].sizes, model).total_us), t)
            for c, b, t in runs]
    # A constant no measured configuration depends on (the calibration designs' TMA-store and
    # descriptor-patch costs) cannot be fitted to these runs.
    names = [name for name in FITTED
             if any(predict(replace(start, **{name: getattr(start, name) * 1.5})) != predict(start)
                    for predict, _ in rows)]
    return fit(rows, start, names), names


def refit_report(path: Path, markdown=False) -> str:
    benches = load_benchmarks()
    runs = load_profile_runs(path)
    if not runs:
        raise ValueError(f"{path}: no successful run to fit")
    model, names = refit(runs, benches)
    constants = [(name, f"{getattr(B200_MODEL, name):g}", f"{getattr(model, name):.4g}",
                  "refitted" if name in names else "kept: no measured configuration depends on it")
                 for name in FITTED]
    rows = []
    for config, b, measured in runs:
        before = predict_config(config, benches[b - 1].sizes).total_us
        after = predict_config(config, benches[b - 1].sizes, model).total_us
        rows.append((config.describe(), b, f"{measured:.2f}", f"{before:.2f}", f"{after:.2f}",
                     f"{100 * (after / measured - 1):+.1f}"))
    loo = leave_one_design_out(benches)
    return "\n".join([
        f"refit to {path}: {len(runs)} measured means",
        _table(("constant", "B200_MODEL", "refitted", ""), constants, markdown), "",
        _table(("configuration", "bench", "measured us", "model before us", "model after us", "error after %"),
               rows, markdown), "",
        "SM100_SHIPPED with the refitted constants (the schedule is still balanced with B200_MODEL's):",
        config_table(SM100_SHIPPED, benches, held_out_rms(loo), markdown, model),
    ])


# ---- the same machinery on the Hopper kernel --------------------------------------------------

H200_SMS = 132
# Not fitted to the means it predicts. What the clock-stamped tiles leave out of a call: the launch
# gap after the previous call (1.4-1.7 us, `sm90_profile.py timeline`, BENCHMARKS.md 2026-11-22),
# the token pre-pass not overlapped with the GEMM (1.2-5.1 us there), the GEMM's prologue and first
# loads; 4 us stated for all four benchmarks.
HOPPER_START_US = 4.0
H200_DRAM_BYTES_PER_US = 4.8e6  # NVIDIA's H200 product page: 4.8 TB/s HBM3e


def hopper_cycles(profile: dict):
    """(N, K) -> cycles of one tile, from `sm90_profile.py tiles --json`: the measured median, or
    for an N not measured at that K, the cycles per k-tile interpolated linearly in N between the
    measured ones (the nearest outside them)."""
    by_k = {}
    for bench in profile["benchmarks"]:
        for tile in bench["tiles"]:
            by_k.setdefault(tile["k"], {})[tile["n"]] = tile["median_cycles"] / (tile["k"] // 64)

    def cycles(n, k):
        points = sorted(by_k[k].items())
        if n <= points[0][0]:
            per_k_tile = points[0][1]
        elif n >= points[-1][0]:
            per_k_tile = points[-1][1]
        else:
            (n0, c0), (n1, c1) = next((a, b) for a, b in zip(points, points[1:]) if a[0] <= n <= b[0])
            per_k_tile = c0 + (c1 - c0) * (n - n0) / (n1 - n0)
        return per_k_tile * (k // 64)

    return cycles


def hopper_estimate(profile: dict, sizes, clock_mhz: float, jobs=None, start_us=HOPPER_START_US) -> Estimate:
    """The Hopper kernel's call on `sizes`: sm90_kernel's schedule over the H200's 132 SMs (jobs
    flipped if given), each tile costing its measured cycles at `clock_mhz` (its epilogue is inside
    the stamps), through the same estimate as the B200 model."""
    import sm90_kernel

    shape = sm90_kernel.SCHEDULE if jobs is None else replace(sm90_kernel.SCHEDULE, jobs=jobs)
    records, offsets = build_tile_schedule(sizes, H200_SMS, shape)
    cycles = hopper_cycles(profile)
    bins, block_bytes = [], {}
    for row in offsets:
        bins.append([])
        for g, n0, t0, v, m_end, n, k_end, _ in records[row[0]:row[-1]]:
            us = cycles(sm90_kernel.VARIANTS[v], k_end) / clock_mhz
            bins[-1].append(TileCost(g, (g, n0), t0, m_end - t0, us, us, 0.0))
            k = sizes[g][2]
            block_bytes[(g, n0)] = min(sm90_kernel.TILE_W, n - n0) * (k // 2 + k // SF_VEC_SIZE)
    model = replace(B200_MODEL, start_us=start_us, dram_bytes_per_us=H200_DRAM_BYTES_PER_US)
    return estimate(bins, block_bytes, _other_bytes(sizes), sm90_kernel.W_STAGES, H200_SMS, model)


def hopper_report(path: Path, jobs=None, clock_mhz=None, start_us=HOPPER_START_US, markdown=False) -> str:
    profile = json.loads(Path(path).read_text())
    clock = clock_mhz or profile.get("sm_clock_mhz")
    if not clock:
        raise ValueError(f"{path} gives no SM clock: pass --clock-mhz (calibration/h200_method_check.py measures it)")
    benches = load_benchmarks()
    rows, totals = [], []
    for i, b in enumerate(benches, start=1):
        e = hopper_estimate(profile, b.sizes, clock, jobs, start_us)
        totals.append(e.total_us)
        rows.append((i, f"{e.total_us:.2f}", f"{e.busiest_us:.2f}", e.busiest_tiles,
                     f"{e.busy_workers}/{e.workers}", f"{e.dram_us:.2f}"))
    import sm90_kernel

    policy = jobs or sm90_kernel.SCHEDULE.jobs
    header = ("bench", "predicted mean us", "busiest CTA us", "busiest CTA's tiles", "busy CTAs", "DRAM us")
    return "\n".join([
        f"Hopper kernel, jobs={policy}: tile cycles from {path}, SM clock {clock:g} MHz, start {start_us:g} us",
        "", _table(header, rows, markdown), "", f"geomean: {geomean(totals):.2f} us"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description="B200 time model of the NVFP4 grouped GEMM, evaluated on submission.py's Sm100Config and "
                    "schedule: predictions per task.yml benchmark, what each configuration switch costs, the "
                    "calibration against gau-nernst's and Nareg's published B200 times and its held-out error.")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables (for README.md and BENCHMARKS.md)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--shipped", action="store_true", help="SM100_SHIPPED, the configuration submission.py ships")
    what.add_argument("--config", metavar="TEXT",
                      help='any configuration Sm100Config.parse reads: "safe", "shipped,jobs=hybrid", ...')
    what.add_argument("--configs", action="store_true",
                      help="shipped, each switch flipped alone, and safe (SM100_SAFE, the fallback)")
    what.add_argument("--calibration", action="store_true",
                      help="the published B200 times of gau-nernst's v6b and Nareg's V14/V16/V17 against the model")
    what.add_argument("--loo", action="store_true", help="leave-one-design-out refits of the five fitted constants")
    what.add_argument("--refit", metavar="FILE", type=Path, help="refit the constants to a calibration/b200_profile.py file")
    what.add_argument("--hopper", metavar="PROFILE", type=Path,
                      help="predict the Hopper kernel's means from `calibration/sm90_profile.py tiles --json PROFILE`")
    parser.add_argument("--jobs", choices=submission.JOB_POLICIES, help="with --hopper: the schedule's job policy "
                        "(default: sm90_kernel.SCHEDULE's)")
    parser.add_argument("--clock-mhz", type=float,
                        help="with --hopper: the SM clock while the benchmarks run (default: the profile's sm_clock_mhz)")
    parser.add_argument("--start-us", type=float, default=HOPPER_START_US,
                        help=f"with --hopper: fixed time per call (default {HOPPER_START_US})")
    args = parser.parse_args(argv)
    benches = load_benchmarks()
    try:
        print(_output(args, benches))
    except (OSError, ValueError, KeyError) as error:  # a bad file or configuration text: one line
        parser.error(f"{type(error).__name__}: {error}")
    return 0


def _output(args, benches) -> str:
    if args.hopper:
        return hopper_report(args.hopper, args.jobs, args.clock_mhz, args.start_us, args.markdown)
    if args.refit:
        return refit_report(args.refit, args.markdown)
    if args.calibration:
        return calibration_table(benches, args.markdown)
    if args.loo:
        return loo_table(leave_one_design_out(benches), args.markdown)
    if not (args.shipped or args.config or args.configs):
        return report(args.markdown)
    rms = held_out_rms(leave_one_design_out(benches))
    if args.configs:
        return configs_table(benches, rms, args.markdown)
    return config_table(Sm100Config.parse(args.config or "shipped"), benches, rms, args.markdown)


if __name__ == "__main__":
    sys.exit(main())
