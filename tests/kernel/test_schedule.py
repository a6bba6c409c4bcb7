"""The shared tile schedule (submission.build_tile_schedule), walked in Python exactly as each
kernel walks it: every output element of every group must be written exactly once.

CPU only: the schedule is built on the host, and these walks mirror the kernels' loops (the B200
pair walk and epilogue of submission.py, the Hopper per-variant CTA walk of sm90_kernel.py).
"""

import dataclasses
import functools
import itertools
import operator
import os
import sys

import numpy as np
import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import submission  # noqa: E402
import sm90_kernel  # noqa: E402

H200_SMS = 132


def _task_shapes():
    with open(os.path.join(ROOT, "task.yml")) as f:
        task = yaml.safe_load(f)
    return {
        f"{kind}{i}": list(zip(spec["m"], spec["n"], spec["k"]))
        for kind in ("tests", "benchmarks")
        for i, spec in enumerate(task[kind])
    }


SHAPES = {
    **_task_shapes(),
    "M=1": [(1, 256, 256)],
    "M=7": [(7, 128, 512)],
    "M=129": [(129, 384, 256)],
    "M=300": [(300, 256, 768)],
    "G=1": [(40, 7168, 2048)],
    "G=5": [(1, 128, 256), (7, 256, 512), (129, 384, 256), (300, 640, 256), (64, 128, 1024)],
    "G=16": [(8 + 19 * g, 128 * (1 + g % 3), 256 * (1 + g % 2)) for g in range(16)],
    "G=32": [(1 + 37 * g % 300, 128 * (1 + g % 4), 256) for g in range(32)],
}


def check_records(sizes, records, offsets):
    """Every record runs its tile's whole K, and no tile has two records."""
    tiles = set()
    for row in offsets:
        for record in records[row[0]:row[-1]]:
            assert len(record) == len(submission.RECORD_FIELDS)
            g, n0, t0 = record[:3]
            assert record[6] == sizes[g][2]
            assert (g, n0, t0) not in tiles
            tiles.add((g, n0, t0))


def walk_b200(sizes, records, offsets, config):
    """How many times each C element is stored by the sm_100a kernel built with `config`: worker w
    (an SM pair, an SM with cta_group 1, or a cluster of two pairs with cluster_pairs 2) runs its
    records in order; CTA r of its pair p holds weight rows n0 + 256 p + 128 r .. + 127 (none if
    past N); the epilogue stores token rows t0 .. m_end - 1
    in chunks of 32, each row predicated below m_end."""
    check_records(sizes, records, offsets)
    writes = [np.zeros((m, n), dtype=np.int32) for m, n, _ in sizes]
    for begin, end in offsets:
        for g, n0, t0, v, m_end, n, _, _ in records[begin:end]:
            assert n == sizes[g][1]
            assert n0 % config.schedule_rows == 0 and t0 % submission.TOKEN_CHUNK == 0
            width = config.token_variants[v]
            assert 0 < m_end - t0 <= width and t0 % width == 0  # TMA tile index t0 // width
            for pair, rank in itertools.product(range(config.cluster_pairs), range(config.cta_group)):
                first = n0 + config.weight_rows * pair + submission.CTA_WEIGHT_ROWS * rank
                if first >= n:
                    continue
                chunks = -(-(m_end - t0) // submission.EPILOGUE_COLUMNS)
                for chunk in range(chunks):
                    rows = range(t0 + submission.EPILOGUE_COLUMNS * chunk, t0 + submission.EPILOGUE_COLUMNS * (chunk + 1))
                    for row in rows:
                        if row < m_end:
                            writes[g][row, first:first + submission.CTA_WEIGHT_ROWS] += 1
    return writes


# Every kernel shape the schedule serves: both CTA groups, both token variant sets, every job policy.
CONFIGS = [
    submission.Sm100Config(cta_group=c, token_variants=t, jobs=j, cluster_pairs=p, multicast=c == 2)
    for c in (2, 1) for t in ((64, 128), (128,)) for j in submission.JOB_POLICIES for p in (1, 2)
    if p == 1 or c == 2
]


def _workers(config):
    return submission.B200_MODEL.sm_count // config.cta_group


def walk_h200(sizes, records, offsets):
    """How many times each C element is stored by the Hopper kernel: CTA b runs variant v on
    records offsets[b][v] .. offsets[b][v + 1]; a tile stores token rows t0 .. m_end - 1 (wgmma N
    = the variant, rows past m_end predicated off) of weight rows n0 .. n0 + 127."""
    check_records(sizes, records, offsets)
    writes = [np.zeros((m, n), dtype=np.int32) for m, n, _ in sizes]
    for row in offsets:
        for v in range(len(sm90_kernel.VARIANTS)):
            for g, n0, t0, variant, m_end, n, _, _ in records[row[v]:row[v + 1]]:
                assert variant == v and n == sizes[g][1]
                # the smallest wgmma N that covers the tile; tokens load as 64-row boxes from t0
                assert 0 < m_end - t0 <= sm90_kernel.VARIANTS[v] < m_end - t0 + sm90_kernel.TOKEN_STEP
                assert t0 % sm90_kernel.TOKEN_BOX_ROWS == 0 and n0 % sm90_kernel.TILE_W == 0
                writes[g][t0:m_end, n0:n0 + sm90_kernel.TILE_W] += 1
    return writes


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.describe())
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_b200_schedule_writes_every_output_once(name, config):
    sizes = SHAPES[name]
    records, offsets = submission.sm100_schedule(sizes, _workers(config), config)
    assert len(offsets) <= _workers(config) // config.cluster_pairs
    assert offsets[0][0] == 0 and offsets[-1][1] == len(records)
    assert all(a[1] == b[0] for a, b in zip(offsets, offsets[1:]))  # workers' ranges are contiguous
    for writes in walk_b200(sizes, records, offsets, config):
        assert (writes == 1).all()


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_h200_schedule_writes_every_output_once(name):
    sizes = SHAPES[name]
    records, offsets = submission.build_tile_schedule(sizes, H200_SMS, sm90_kernel.SCHEDULE)
    assert len(offsets) <= H200_SMS
    assert offsets[0][0] == 0 and offsets[-1][-1] == len(records)
    assert all(a[-1] == b[0] for a, b in zip(offsets, offsets[1:]))
    for writes in walk_h200(sizes, records, offsets):
        assert (writes == 1).all()


def _blocks(records, offsets):
    """(group, n0) -> [(worker, position in the worker's run, sole_reader_ends, t0)] in run order."""
    blocks = {}
    for worker, (begin, end) in enumerate(offsets):
        for position, (g, n0, t0, _, _, _, _, sole, *_) in enumerate(records[begin:end]):
            blocks.setdefault((g, n0), []).append((worker, position, sole, t0))
    return blocks


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.describe())
@pytest.mark.parametrize("name", ["benchmarks0", "benchmarks2", "benchmarks3", "G=5", "M=300", "G=32"])
def test_b200_sole_reader_ends(name, config):
    """sole_reader_ends (record column 7) is 1 exactly on the last tile of a weight block whose
    tiles are all one job on one worker (the TMA warp loads that tile's weights evict-first), else 0.
    weight_blocks: every block is one job; tiles: only one-tile blocks are; hybrid: blocks are
    split into single tiles, costliest first, only until every worker can get a job."""
    sizes = SHAPES[name]
    records, offsets = submission.sm100_schedule(sizes, _workers(config), config)
    workers = _workers(config) // config.cluster_pairs  # the schedule's: clusters of two pairs with cluster_pairs 2
    blocks = _blocks(records, offsets)
    whole = set()  # blocks run as one job
    for block, tiles in blocks.items():
        one_run = len({w for w, *_ in tiles}) == 1 and [p for _, p, *_ in tiles] == list(
            range(tiles[0][1], tiles[0][1] + len(tiles)))
        marks = [sole for _, _, sole, _ in tiles]
        assert marks in ([0] * len(tiles), [0] * (len(tiles) - 1) + [1]), (block, marks)
        if marks[-1]:
            assert one_run and [t0 for *_, t0 in tiles] == sorted(t0 for *_, t0 in tiles), block
            whole.add(block)
    multi = {b for b, tiles in blocks.items() if len(tiles) > 1}
    if config.jobs == "weight_blocks":
        assert whole == set(blocks)
    elif config.jobs == "tiles":
        assert whole == set(blocks) - multi
    else:
        jobs = len(whole) + sum(len(tiles) for b, tiles in blocks.items() if b not in whole)
        if len(blocks) >= workers:
            assert whole == set(blocks)  # enough jobs already: nothing is split
        else:
            assert jobs >= min(workers, len(records)) and whole >= set(blocks) - multi
            # Splitting stops once there are enough jobs: one more whole block would have been too few.
            assert jobs - max((len(blocks[b]) - 1 for b in whole), default=0) < workers or not (whole & multi)


def test_b200_tile_jobs_fill_the_pairs_on_benchmarks_3_and_4():
    """Weight-block jobs leave 24 and 32 of 74 pairs busy there; the single tiles and the hybrid (which
    splits blocks into tiles there) keep 60 and 64 busy; the shipped clusters of two pairs (cluster_pairs 2,
    which the launch keeps there) run the same tiles as 30 and 32 records of two weight blocks on 37."""
    pairs = dataclasses.replace(submission.SM100_SHIPPED, cluster_pairs=1)
    for name, busy in (("benchmarks2", 60), ("benchmarks3", 64)):
        for jobs in ("tiles", "hybrid"):
            config = dataclasses.replace(pairs, jobs=jobs)
            records, offsets = submission.sm100_schedule(SHAPES[name], 74, config)
            assert sum(1 for begin, end in offsets if end > begin) == busy
        flipped = dataclasses.replace(pairs, jobs="weight_blocks")
        records, offsets = submission.sm100_schedule(SHAPES[name], 74, flipped)
        assert len(offsets) == {"benchmarks2": 24, "benchmarks3": 32}[name]
        shipped = submission.sm100_shape_config(SHAPES[name], 74, submission.SM100_SHIPPED)
        assert shipped.cluster_pairs == 2
        records, offsets = submission.sm100_schedule(SHAPES[name], 74, shipped)
        assert len(offsets) == len(records) == busy // 2 and all(r[1] % 512 == 0 for r in records)


def test_b200_warmers_are_the_pairs_the_schedule_leaves_idle():
    """warmers=on: benchmarks 1 and 2 fill all 74 pairs and have none; benchmarks 3 and 4 have the 14 and
    10 idle pairs, warming every k-tile (their distinct inputs per k-tile, 0.98 and 1.25 MB, fit the budget
    16 and 6 times over K); a budget smaller than K's warms fewer k-tiles; the switch off, none."""
    warm = dataclasses.replace(submission.SM100_SHIPPED, warmers=True, cluster_pairs=1)
    for name, (warmers, k_tiles) in (("benchmarks0", (0, 0)), ("benchmarks1", (0, 0)),
                                     ("benchmarks2", (14, 16)), ("benchmarks3", (10, 6))):
        _, offsets = submission.sm100_schedule(SHAPES[name], 74, warm)
        assert submission.warm_l2_plan(SHAPES[name], len(offsets), 74, warm) == (warmers, k_tiles), name
        off = dataclasses.replace(warm, warmers=False)
        assert submission.warm_l2_plan(SHAPES[name], len(offsets), 74, off) == (0, 0)
        # as launched (clusters of two pairs on benchmarks 3 and 4): the idle clusters warm
        config = submission.sm100_shape_config(SHAPES[name], 74, submission.SM100_SHIPPED)
        workers = 74 // config.cluster_pairs
        _, offsets = submission.sm100_schedule(SHAPES[name], 74, config)
        assert submission.warm_l2_plan(SHAPES[name], len(offsets), workers, config) == (workers - len(offsets) if warmers else 0,
                                                                                       k_tiles)
        assert config.cluster_pairs == (2 if warmers else 1)
    # one group of 1 x 28672 x 4096: 28672 + 128 rows x 144 bytes per k-tile, 4.1 MB; 8 of 16 k-tiles fit 32 MiB
    assert submission.warm_l2_plan([(1, 28672, 4096)], 112, 148, warm) == (36, 8)


def test_b200_self_warming_where_no_warmer_launches():
    """self_warm=on: benchmarks 1 and 2 (no idle pair) prefetch their first records' first 3 and 4 k-tiles
    (74 first records of 256 weight rows and 128 token rows, or 256 for a 192-token tile, at 144 bytes per row
    per k-tile: 4.39 and 4.09 MB per k-tile against 16 MiB); benchmarks 3 and 4 launch warmers and prefetch
    none themselves; the switch off, none; a lone small record is capped by its own K in the kernel, not
    here."""
    on = submission.SM100_SHIPPED
    for name, expected in (("benchmarks0", 3), ("benchmarks1", 4), ("benchmarks2", 0), ("benchmarks3", 0)):
        config = submission.sm100_shape_config(SHAPES[name], 74, on)
        records, offsets = submission.sm100_schedule(SHAPES[name], 74, config)
        warmers, _ = submission.warm_l2_plan(SHAPES[name], len(offsets), 74 // config.cluster_pairs, config)
        assert submission.self_warm_plan(records, offsets, warmers, config) == expected, name
        off = dataclasses.replace(config, self_warm=False)
        assert submission.self_warm_plan(records, offsets, warmers, off) == 0
    alone = submission.sm100_shape_config([(40, 256, 2048)], 1, on)  # one pair: no cluster of two
    records, offsets = submission.sm100_schedule([(40, 256, 2048)], 1, alone)
    assert submission.self_warm_plan(records, offsets, 0, alone) == (16 << 20) // ((256 + 128) * 144)


@pytest.mark.parametrize("jobs", ["weight_blocks", "hybrid"])
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_h200_flipped_jobs_write_every_output_once(name, jobs):
    """The Hopper kernel's schedule with its jobs flipped: weight-block jobs (the flip the H200
    timed: BENCHMARKS.md) and the hybrid."""
    sizes = SHAPES[name]
    shape = dataclasses.replace(sm90_kernel.SCHEDULE, jobs=jobs)
    records, offsets = submission.build_tile_schedule(sizes, H200_SMS, shape)
    for writes in walk_h200(sizes, records, offsets):
        assert (writes == 1).all()


def test_b200_token_variant_is_the_smallest_that_fits():
    """A 40-token group computes 64 token columns, not 128; 176 tokens are 128 + 64 with variants
    64/128, one 192-token tile with 64/128/192 (the sliver of 48 joins the tile before it); with
    token variants (128,) every tile computes 128."""
    sizes = [(40, 256, 256), (176, 256, 256)]
    narrow = dataclasses.replace(submission.SM100_SHIPPED, token_variants=(64, 128))
    for config, expected in ((narrow, {(0, 0): 64, (1, 0): 128, (1, 128): 64}),
                             (submission.SM100_SHIPPED, {(0, 0): 64, (1, 0): 192}),
                             (submission.SM100_SAFE, {(0, 0): 128, (1, 0): 128, (1, 128): 128})):
        records, _ = submission.sm100_schedule(sizes, _workers(config), config)
        assert {(g, t0): config.token_variants[v] for g, _, t0, v, *_ in records} == expected


def test_b200_a_192_token_tile_starts_at_a_multiple_of_192():
    """The kernel finds a tile's token box by t0 // width: a sliver joins the tile before it only
    where that tile, then 192 wide, starts at a multiple of 192 (and of 128: its two scale blocks)."""
    variants = (64, 128, 192)
    assert submission._token_tiles(176, 128, variants, aligned=True) == [(0, 176, 2)]
    # 300 = 128 + 128 + 44: joining would start a 172-token tile at 128
    assert submission._token_tiles(300, 128, variants, aligned=True) == [(0, 128, 1), (128, 256, 1), (256, 300, 0)]
    assert submission._token_tiles(300, 128, variants) == [(0, 128, 1), (128, 300, 2)]  # the Hopper's rule
    # 560 = 4 x 128 + 48: the last 176 tokens start at 384 = 2 x 192
    assert submission._token_tiles(560, 128, variants, aligned=True)[-1] == (384, 560, 2)
    for m in range(1, 1200):
        tiles = submission._token_tiles(m, 128, variants, aligned=True)
        assert [t0 for t0, _, _ in tiles] == sorted({t0 for t0, _, _ in tiles}) and tiles[-1][1] == m
        assert all(t0 % variants[v] == 0 and t0 % 128 == 0 and m_end - t0 <= variants[v] for t0, m_end, v in tiles)


def test_b200_192_token_tiles_run_where_the_model_says_they_pay():
    """The launch keeps the 192-token kernel for a shape only where its schedule has such a tile and
    the model's busiest pair is less loaded: benchmark 1 (its groups of 176 and 160 tokens are a
    tile each, 144 tiles for 176: 3 on the busiest pair -> 2), not benchmark 2 (4 tiles of which 192-token ones -> 5 narrower: 10.1 against
    9.5 us modeled; the timed emulator: 14.44 against 13.98 us), nor 3 and 4 (no sliver joins)."""
    shipped = submission.SM100_SHIPPED
    chosen = {name: submission.sm100_shape_config(SHAPES[name], 74, shipped).token_variants for name in SHAPES}
    assert chosen["benchmarks0"] == (64, 128, 192)
    assert chosen["benchmarks1"] == chosen["benchmarks2"] == chosen["benchmarks3"] == (64, 128)
    records, _ = submission.sm100_schedule(SHAPES["benchmarks0"], 74, submission.sm100_shape_config(SHAPES["benchmarks0"], 74, shipped))
    assert len(records) == 144 and sum(shipped.token_variants[r[3]] == 192 for r in records) == 2 * 16
    narrow = dataclasses.replace(shipped, token_variants=(64, 128))
    assert submission.sm100_shape_config(SHAPES["benchmarks0"], 74, narrow).token_variants == (64, 128)  # never widens


def _wide_sizes():
    """tests/kernel/test_emulator_submission.py's WIDE_SPEC as [(M, N, K), ...]."""
    from test_emulator_submission import WIDE_SPEC

    fields = dict(part.strip().split(":") for part in WIDE_SPEC.split(";"))
    return list(zip(*(yaml.safe_load(fields[name]) for name in ("m", "n", "k"))))


@pytest.mark.parametrize("config", ["shipped", "shipped,epilogue=atoms", "shipped,multicast=off,cluster_pairs=1",
                                    "shipped,descriptors=branch"])
def test_the_emulated_wide_shape_runs_192_token_tiles(config):
    """tests/kernel/test_emulator_submission.py's WIDE_SPEC, at its 3 workers: the launch picks the 192-token kernel,
    two workers end on a 192-token tile and some 192-token tile is not a worker's last."""
    sizes = _wide_sizes()
    chosen = submission.sm100_shape_config(sizes, 3, submission.Sm100Config.parse(config))
    assert chosen.token_variants == (64, 128, 192)
    records, offsets = submission.sm100_schedule(sizes, 3, chosen)
    widths = [[chosen.token_variants[r[3]] for r in records[b:e]] for b, e in offsets]
    assert sum(w[-1] == 192 for w in widths) == 2 and any(192 in w[:-1] for w in widths), widths


def _neumaier_sum(values, start=0):
    """Python 3.12's sum() of floats: each addition's rounding error kept aside (Neumaier) and added at the end."""
    values = list(values)
    if not values or not all(isinstance(value, float) for value in values):
        return functools.reduce(operator.add, values, start)
    total, lost = float(start), 0.0
    for value in values:
        added = total + value
        lost += (total - added) + value if abs(total) >= abs(value) else (value - added) + total
        total = added
    return total + lost


@pytest.mark.long  # README's quick command within 4 minutes (issue 47): its family keeps the schedule's other properties quick
def test_the_schedule_does_not_depend_on_how_python_adds_floats(monkeypatch):
    """Python 3.12's sum() compensates its rounding; the board's runner is Python 3.13 and CI 3.11. The model's
    tile costs are floats whose loads near-tie, so a schedule that added them with sum() broke ties by the
    interpreter: the emulated wide shape got [[192, 192], [192, 192, 128], [192, 64, 128, 64]] under 3.12 (the
    H200 machine's quick suite) against [[192, 192], [192, 192], [192, 64, 128, 128, 64]] under 3.11. With
    sum() as either interpreter's, every shape's choice, records and workers must be the same."""
    shapes = {**SHAPES, "wide": _wide_sizes()}
    configs = [submission.Sm100Config.parse(text) for text in ("shipped", "shipped,jobs=hybrid", "safe")]

    def plans():
        plan = {}
        for name, sizes in shapes.items():
            for config in configs:
                for workers in (3, 74):
                    chosen = submission.sm100_shape_config(sizes, workers, config)
                    plan[name, str(config), workers] = (chosen.token_variants,
                                                       submission.sm100_schedule(sizes, workers, chosen))
        return plan

    expected = plans()
    one_after_another = lambda values, start=0: functools.reduce(operator.add, values, start)  # noqa: E731
    for python_sum in (one_after_another, _neumaier_sum):
        monkeypatch.setattr("builtins.sum", python_sum)
        assert plans() == expected, python_sum


def _spec_sizes(spec):
    fields = dict((key.strip(), value) for key, value in (part.split(":") for part in spec.split(";")))
    return list(zip(*(yaml.safe_load(fields[key]) for key in ("m", "n", "k"))))


def test_the_emulated_cluster_shapes_run_clusters_of_two_pairs():
    """tests/kernel/test_emulator_submission.py's CLUSTER_SPECS, at its CLUSTER_WORKERS pairs: the launch keeps
    cluster_pairs 2 (the pairs' schedule leaves pairs idle and the busiest cluster is no more loaded), each
    cluster runs one record of 512 weight rows, idle clusters warm, and the 176-token shape runs 192-token tiles;
    where every pair is busy (benchmarks 1 and 2 at 74 pairs) the launch runs pairs alone."""
    from test_emulator_submission import CLUSTER_SPECS, CLUSTER_WORKERS

    for spec in CLUSTER_SPECS:
        sizes = _spec_sizes(spec)
        chosen = submission.sm100_shape_config(sizes, CLUSTER_WORKERS, submission.SM100_SHIPPED)
        assert chosen.cluster_pairs == 2, spec
        records, offsets = submission.sm100_schedule(sizes, CLUSTER_WORKERS, chosen)
        assert all(end - begin == 1 for begin, end in offsets) and all(r[1] % 512 == 0 for r in records), spec
        warmers, _ = submission.warm_l2_plan(sizes, len(offsets), CLUSTER_WORKERS // 2, chosen)
        assert warmers > 0, spec
    wide = submission.sm100_shape_config(_spec_sizes(CLUSTER_SPECS[2]), CLUSTER_WORKERS, submission.SM100_SHIPPED)
    assert wide.token_variants == (64, 128, 192)
    for name in ("benchmarks0", "benchmarks1"):
        assert submission.sm100_shape_config(SHAPES[name], 74, submission.SM100_SHIPPED).cluster_pairs == 1, name
    for name in ("benchmarks2", "benchmarks3"):
        assert submission.sm100_shape_config(SHAPES[name], 74, submission.SM100_SHIPPED).cluster_pairs == 2, name


def test_the_schedule_takes_the_drivers_cluster_count():
    """A B200 may hold fewer clusters of two pairs than half its pairs (its GPCs): the launch schedules the
    clusters the driver reports. 12 pairs but 5 clusters: the 4 records of a 176-token tile on 2048 rows run on
    at most 5 clusters; 1 cluster: the busiest would carry 4 tiles, so pairs run alone."""
    sizes = [(176, 2048, 1024)]
    five = submission.sm100_shape_config(sizes, 12, submission.SM100_SHIPPED, 5)
    assert five.cluster_pairs == 2
    records, offsets = submission.sm100_schedule(sizes, 12, five, 5)
    assert len(offsets) <= 5 and submission.warm_l2_plan(sizes, len(offsets), 5, five)[0] == 5 - len(offsets)
    assert submission.sm100_shape_config(sizes, 12, submission.SM100_SHIPPED, 1).cluster_pairs == 1
    with pytest.raises(ValueError, match="needs room for a cluster"):
        submission.sm100_schedule(sizes, 12, five, 0)


@pytest.mark.parametrize("name", ["benchmarks0", "benchmarks1", "benchmarks2", "benchmarks3"])
def test_b200_workers_rows_carry_their_first_record(name):
    """lean_walk: as launched, a worker's row of the offsets table is its first and end record, a copy of its
    first record (zeros where it has none: the warmers, launched first) and zero padding, WORKER_ROW int32 wide;
    without lean_walk the two offsets alone."""
    sizes = SHAPES[name]
    config = submission.sm100_shape_config(sizes, 74, submission.SM100_SHIPPED, 37)
    workers = 74 // config.cluster_pairs
    records, offsets = submission.sm100_schedule(sizes, 74, config, 37)
    warmers, _ = submission.warm_l2_plan(sizes, len(offsets), workers, config)
    assert warmers == {"benchmarks2": 7, "benchmarks3": 5}.get(name, 0)
    offsets = [[0, 0]] * warmers + offsets
    rows = submission.worker_rows(records, offsets, True)
    fields = len(submission.RECORD_FIELDS)
    for row, (first, end) in zip(rows, offsets, strict=True):
        assert len(row) == submission.WORKER_ROW and row[:2] == [first, end]
        assert tuple(row[2:2 + fields]) == (tuple(records[first]) if first < end else (0,) * fields)
        assert row[2 + fields:] == [0] * (submission.WORKER_ROW - 2 - fields)
    assert submission.worker_rows(records, offsets, False) == [[first, end] for first, end in offsets]


@pytest.mark.parametrize("workers, differ", [(2, 1), (1, 2)])
def test_the_lean_walk_shapes_give_a_pair_two_records_that_differ_where_the_tma_warp_looks(workers, differ):
    """tests/kernel/test_emulator_submission.py's LEAN_SPECS: each pair runs two records that differ in n0 (field 1: two
    weight blocks, at 2 workers) or t0 (field 2: two token tiles, at 1 worker), so a row carrying the second
    record in place of the first makes the TMA warp load other weights or other tokens."""
    sizes = {2: [(40, 1024, 512)], 1: [(256, 256, 512)]}[workers]
    config = submission.sm100_shape_config(sizes, workers, submission.SM100_SHIPPED, workers // 2)
    assert config.cluster_pairs == 1
    records, offsets = submission.sm100_schedule(sizes, workers, config)
    assert len(offsets) == workers
    for first, end in offsets:
        assert end - first == 2
        one, two = records[first], records[first + 1]
        assert one[differ] != two[differ] and one[0] == two[0] and one[3] == two[3] and one[6] == two[6]


def test_the_wrap_cases_wrap_every_pipeline():
    """eval.py's WRAP_CASES (the first checks' cases at a few SM pairs; tools/check.py --emulate's wraps stage), as the
    launch runs them at their SM pairs (sm100_shape_config's choice from SM100_SHIPPED): the 64/128 kernel and the
    192-token kernel each on one pair with 4 tiles (both accumulators used twice) of more k-tiles than the kernel has
    stages (8 and 6), and clusters of two pairs, one cluster running 3 tiles of which one has more k-tiles than the 8
    stages; every worker's last tile has rows to store (the TMA store of tma_last). At a B200's 74 pairs the same
    shapes give no worker a second tile, which is why a late accumulator release passes there."""
    import eval as harness

    (spec64, pairs64, _), (spec192, pairs192, _), (spec_clusters, pairs_clusters, _) = harness.WRAP_CASES
    shipped = submission.SM100_SHIPPED
    assert shipped.epilogue == "tma_last" and submission.ACC_STAGES == 2

    def launched(spec, pairs):
        sizes = _spec_sizes(spec)
        chosen = submission.sm100_shape_config(sizes, pairs, shipped)
        records, offsets = submission.sm100_schedule(sizes, pairs, chosen)
        workers = [records[begin:end] for begin, end in offsets]
        for tiles in workers:  # the last tile's first CTA stores rows: its C goes out by TMA store
            assert tiles and tiles[-1][1] < tiles[-1][5], (spec, tiles)
        return sizes, chosen, workers

    for spec, pairs, variants, stages in ((spec64, pairs64, (64, 128), 8), (spec192, pairs192, (64, 128, 192), 6)):
        _, chosen, workers = launched(spec, pairs)
        assert (pairs, chosen.token_variants, chosen.cluster_pairs, chosen.stages) == (1, variants, 1, stages), spec
        (tiles,) = workers
        assert len(tiles) >= 2 * submission.ACC_STAGES, spec  # each accumulator twice
        assert all(record[6] // submission.K_TILE > stages for record in tiles), spec
        if variants[-1] == 192:
            assert all(chosen.token_variants[record[3]] == 192 for record in tiles), spec
    sizes, chosen, workers = launched(spec_clusters, pairs_clusters)
    assert chosen.cluster_pairs == 2 and chosen.stages == 8 and len(workers) <= pairs_clusters // 2
    assert max(map(len, workers)) > submission.ACC_STAGES  # an accumulator used twice in a cluster
    assert any(record[6] // submission.K_TILE > chosen.stages for tiles in workers for record in tiles)
    for spec, _, _ in harness.WRAP_CASES:  # at a B200's count no worker has a second tile
        sizes = _spec_sizes(spec)
        at_b200 = submission.sm100_shape_config(sizes, 74, shipped)
        assert all(end - begin == 1 for begin, end in submission.sm100_schedule(sizes, 74, at_b200)[1]), spec


def _balance_one_at_a_time(jobs, num_workers):
    """submission._balance's steps as they were written before their candidates were weighed as arrays
    (ca4177e): every move and swap tried in the tie rule's order, the first strictly better kept. The oracle
    the array form must equal to the last bit (the start and the move itself are submission's own)."""
    count = min(num_workers, len(jobs))
    bins, loads = submission._longest_first(jobs, count)
    for _ in range(20 * count):
        hi = max(range(count), key=loads.__getitem__)
        best = None
        for j in range(count):
            if j == hi:
                continue
            gap = loads[hi] - loads[j]
            options = [(a, None, bins[hi][a][0]) for a in range(len(bins[hi]))]
            options += [(a, b, bins[hi][a][0] - bins[j][b][0])
                        for a in range(len(bins[hi])) for b in range(len(bins[j]))]
            for a, b, delta in options:
                if 0 < delta < gap:
                    local_max = max(loads[hi] - delta, loads[j] + delta)
                    if best is None or local_max < best[0]:
                        best = (local_max, j, a, b)
        if best is None:
            break
        submission._move(bins, loads, hi, *best[1:])
    return max(loads), [[payload for _, payload in b] for b in bins]


def test_the_balance_weighs_its_candidates_as_the_one_at_a_time_oracle_does():
    """The array form of _balance picks what the one-at-a-time oracle picks, to the last bit of every load and
    every job's place: on random float costs, on small integer costs and on a few repeated values (ties
    everywhere, so the tie rule decides), and on the jobs the B200 schedules (shipped, jobs=tiles) build for
    task.yml's benchmarks."""
    import random
    rng = random.Random(5)
    cases = []
    for trial in range(300):
        workers, count = rng.randint(1, 40), rng.randint(1, 120)
        draw = (lambda: rng.random() * 10, lambda: rng.randint(1, 6),
                lambda: rng.choice([1.5, 2.25, 3.0, 0.75]))[trial % 3]
        cases.append(([(draw(), i) for i in range(count)], workers))
    recorded = []
    original = submission._balance

    def recording(jobs, workers):
        recorded.append((list(jobs), workers))
        return original(jobs, workers)

    submission._balance = recording
    try:
        for name in ("benchmarks0", "benchmarks1", "benchmarks2", "benchmarks3"):
            submission.sm100_schedule(SHAPES[name], 74, submission.SM100_SHIPPED)
            submission.sm100_schedule(SHAPES[name], 74, submission.Sm100Config.parse("shipped,jobs=tiles"))
    finally:
        submission._balance = original
    assert recorded
    for jobs, workers in cases + recorded:
        assert submission._balance(jobs, workers) == _balance_one_at_a_time(jobs, workers), (len(jobs), workers)
