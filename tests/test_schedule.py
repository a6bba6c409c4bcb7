"""The shared tile schedule (submission.build_tile_schedule), walked in Python exactly as each
kernel walks it: every output element of every group must be written exactly once.

CPU only: the schedule is built on the host, and these walks mirror the kernels' loops (the B200
pair walk and epilogue of submission.py, the Hopper per-variant CTA walk of sm90_kernel.py).
"""

import os
import sys

import numpy as np
import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import submission  # noqa: E402
import sm90_kernel  # noqa: E402

B200_PAIRS = 74
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


def walk_b200(sizes, records, offsets):
    """How many times each C element is stored by the sm_100a kernel: pair p runs its records in
    order; CTA r of the pair holds weight rows n0 + 128 r .. + 127 (none if past N); the epilogue
    stores token rows t0 .. m_end - 1 in chunks of 32, each row predicated below m_end."""
    writes = [np.zeros((m, n), dtype=np.int32) for m, n, _ in sizes]
    for begin, end in offsets:
        for g, n0, t0, v, m_end, n, k, _ in records[begin:end]:
            assert (n, k) == sizes[g][1:] and k % submission.K_TILE == 0
            assert n0 % submission.PAIR_WEIGHT_ROWS == 0 and t0 % submission.TOKEN_CHUNK == 0
            width = submission.TOKEN_VARIANTS[v]
            assert 0 < m_end - t0 <= width and t0 % width == 0  # TMA tile index t0 // width
            for rank in range(2):
                first = n0 + submission.CTA_WEIGHT_ROWS * rank
                if first >= n:
                    continue
                chunks = -(-(m_end - t0) // submission.EPILOGUE_COLUMNS)
                for chunk in range(chunks):
                    rows = range(t0 + submission.EPILOGUE_COLUMNS * chunk, t0 + submission.EPILOGUE_COLUMNS * (chunk + 1))
                    for row in rows:
                        if row < m_end:
                            writes[g][row, first:first + submission.CTA_WEIGHT_ROWS] += 1
    return writes


def walk_h200(sizes, records, offsets):
    """How many times each C element is stored by the Hopper kernel: CTA b runs variant v on
    records offsets[b][v] .. offsets[b][v + 1]; a tile stores token rows t0 .. m_end - 1 (wgmma N
    = the variant, rows past m_end predicated off) of weight rows n0 .. n0 + 127."""
    writes = [np.zeros((m, n), dtype=np.int32) for m, n, _ in sizes]
    for row in offsets:
        for v in range(len(sm90_kernel.VARIANTS)):
            for g, n0, t0, variant, m_end, n, k, _ in records[row[v]:row[v + 1]]:
                assert variant == v and (n, k) == sizes[g][1:]
                # the smallest wgmma N that covers the tile; tokens load as 64-row boxes from t0
                assert 0 < m_end - t0 <= sm90_kernel.VARIANTS[v] < m_end - t0 + sm90_kernel.TOKEN_STEP
                assert t0 % sm90_kernel.TOKEN_BOX_ROWS == 0 and n0 % sm90_kernel.TILE_W == 0
                writes[g][t0:m_end, n0:n0 + sm90_kernel.TILE_W] += 1
    return writes


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_b200_schedule_writes_every_output_once(name):
    sizes = SHAPES[name]
    records, offsets = submission.build_tile_schedule(sizes, B200_PAIRS, submission.SM100_SCHEDULE)
    assert len(offsets) <= B200_PAIRS
    assert offsets[0][0] == 0 and offsets[-1][1] == len(records)
    assert all(a[1] == b[0] for a, b in zip(offsets, offsets[1:]))  # pairs' ranges are contiguous
    for writes in walk_b200(sizes, records, offsets):
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


def test_b200_pairs_run_a_weight_block_back_to_back():
    """Locality: the token tiles of one (group, weight block) are consecutive records of one pair,
    so its weights stream from DRAM once and the second token tile finds them in L2."""
    sizes = SHAPES["benchmarks0"]
    records, offsets = submission.build_tile_schedule(sizes, B200_PAIRS, submission.SM100_SCHEDULE)
    owner = {}
    for pair, (begin, end) in enumerate(offsets):
        previous = None
        for g, n0, t0, *_ in records[begin:end]:
            block = (g, n0)
            assert owner.setdefault(block, pair) == pair
            if t0:
                assert previous == block  # a later token tile follows its block's previous one
            previous = block
    assert len(owner) == sum(n // submission.PAIR_WEIGHT_ROWS for _, n, _ in sizes)


@pytest.mark.parametrize("name", ["benchmarks0", "G=5", "M=300"])
def test_b200_last_reader_of_a_weight_block_is_marked(name):
    """last_in_job (record column 7) is 1 exactly on a weight block's last token tile: the TMA
    warp loads that tile's weights evict-first and the earlier ones evict-normal."""
    sizes = SHAPES[name]
    records, offsets = submission.build_tile_schedule(sizes, B200_PAIRS, submission.SM100_SCHEDULE)
    for begin, end in offsets:
        pair = records[begin:end]
        for i, (g, n0, *_, last) in enumerate(pair):
            later_same_block = any(r[0] == g and r[1] == n0 for r in pair[i + 1:])
            assert last == (0 if later_same_block else 1)


def test_b200_token_variant_is_the_smallest_that_fits():
    """A 40-token group computes 64 token columns, not 128; 176 tokens are 128 + 64."""
    records, _ = submission.build_tile_schedule([(40, 256, 256), (176, 256, 256)], B200_PAIRS, submission.SM100_SCHEDULE)
    widths = {(g, t0): submission.TOKEN_VARIANTS[v] for g, _, t0, v, *_ in records}
    assert widths == {(0, 0): 64, (1, 0): 128, (1, 128): 64}
