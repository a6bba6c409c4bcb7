"""submission.py's B200 kernel, executed: every configuration through the real host path (plan, schedule
tables, LaunchArgs, CompiledLaunch) in the emulator, on the board's inputs, against the exact reference, with
each c poisoned and guarded (tools/emulate.py submission).

The matrix (issue 20): SM100_SHIPPED and SM100_SAFE in both timing modes on task.yml's 10 tests and on the
shapes that break tiled kernels (M = 1, 7, 40, 129, 255; N = 128 and 384, odd multiples of 128 where a
pair's second CTA has every box out of bounds; K = 256, 512 and 768; G = 1, 2, 5 and 8, the last with
benchmark 1's M list), with 2 or 3 workers so that each walks several records and the stage and
accumulator pipelines wrap; every job policy; each single switch flipped from shipped; and the B200's real
worker count (74 pairs, 148 CTAs with cta_group 1) on small shapes and on benchmarks 3 and 4. Seeds are in
each case's line.

The quick set (README's test command): both configurations at the B200's worker count on small shapes, a file
without a B200 kernel and a planted defect (tests/harness/test_eval_emulated.py runs task.yml's test 3 through eval.py);
the rest of the matrix, task.yml's 10 tests and the edge shapes included, is `-m long`.
"""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_emulator_clock import timing_of

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(sys.version_info < (3, 10), reason="the DSL needs Python 3.10+")


def _spec(entry: dict) -> str:
    return (f"m: {list(entry['m'])}; n: {list(entry['n'])}; k: {list(entry['k'])}; g: {entry['g']}; "
            f"seed: {entry['seed']}")


TASK_SPECS = [_spec(e) for e in yaml.safe_load((ROOT / "task.yml").read_text())["tests"]]
EDGE_SPECS = [
    "m: [1]; n: [384]; k: [256]; g: 1; seed: 7",
    "m: [7, 40]; n: [128, 384]; k: [768, 256]; g: 2; seed: 8",
    "m: [129, 255, 1, 40, 7]; n: [256, 384, 128, 640, 256]; k: [256, 512, 768, 256, 256]; g: 5; seed: 9",
    "m: [80, 176, 128, 72, 64, 248, 96, 160]; n: [256, 256, 256, 256, 256, 256, 256, 256]; "
    "k: [512, 512, 512, 512, 512, 512, 512, 512]; g: 8; seed: 10",
]
# Each switch flipped from shipped, with what the flip needs (submission.NEEDS).
SWITCHES = ["cta_group=1,token_variants=64/128,multicast=off,cluster_pairs=1", "token_variants=128",
            "multicast=off,cluster_pairs=1", "pdl=off", "l2_hints=off", "epilogue=atoms", "descriptors=branch",
            "warmers=off", "self_warm=off", "cluster_pairs=1", "lean_walk=off"]
JOB_POLICIES = ["tiles", "weight_blocks", "hybrid"]
# A shape whose launch runs the 192-token kernel at 3 workers (tests/kernel/test_schedule.py checks it): groups of 176
# and 160 tokens are one 192-token tile per weight block (two blocks of token scales, the second mostly padding),
# N = 384 puts a pair's second CTA past N, K = 1536 wraps the 6 stages, and two workers end on a 192-token tile
# (the box epilogue in two batches) after one stored from registers; 300 tokens stay 128 + 128 + 64 (a 192-token
# tile would start at 128).
WIDE_SPEC = "m: [176, 160, 40, 300]; n: [768, 384, 256, 256]; k: [1536, 1024, 512, 256]; g: 4; seed: 31"
# Shapes whose launch runs clusters of two pairs (cluster_pairs 2) at CLUSTER_WORKERS pairs (tests/kernel/test_schedule.py
# checks it): the pairs' schedule leaves pairs idle, so each cluster runs one record on two neighbouring weight
# blocks and the idle clusters warm. N = 768 puts a cluster's second pair wholly past N; K = 2560 wraps the 8
# stages; 176 tokens are one 192-token tile (two blocks of token scales, each a quarter from every CTA of the
# cluster); M = 1, 40 and 129 (a 128-token and a 64-token tile).
CLUSTER_SPECS = [
    "m: [40]; n: [768]; k: [2560]; g: 1; seed: 41",
    "m: [129]; n: [512]; k: [768]; g: 1; seed: 42",
    "m: [176]; n: [2048]; k: [1024]; g: 1; seed: 43",
    "m: [1, 40]; n: [512, 1536]; k: [512, 1024]; g: 2; seed: 44",
]
CLUSTER_WORKERS = 12


def emulate(config: str, specs, *, mode: str = "eager", seed: int = 0, workers=2, timeout: int = 900,
            submission=None):
    args = [sys.executable, str(ROOT / "tools" / "emulate.py"), "submission", "--config", config,
            "--mode", mode, "--seed", str(seed), "--races"]  # race detection on (test_emulator_races.py)
    if submission is not None:
        args += ["--submission", str(submission)]
    if workers is not None:
        args += ["--workers", str(workers)]
    for spec in specs:
        args += ["--spec", spec]
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-3000:]
    assert "DeprecationWarning" not in done.stderr, done.stderr[-3000:]  # DSL 4.5.2's, silenced (issue 26, item 4)
    print(done.stdout)  # the case lines, with their seeds, in the test log
    return done.returncode, lines[-1], done.stdout


def assert_all_pass(config, specs, **kwargs):
    rc, verdict, out = emulate(config, specs, **kwargs)
    assert rc == 0 and verdict.startswith("PASS"), out[-4000:]
    cases = [line for line in out.splitlines() if line.startswith("case ")]
    assert len(cases) == len(specs) and all(": PASS " in line and "races=0" in line for line in cases), out[-4000:]


@pytest.mark.parametrize("config, mode, seed", [pytest.param("shipped", "eager", 0, marks=pytest.mark.long),
                                               pytest.param("shipped", "adversarial", 11, marks=pytest.mark.long),
                                               pytest.param("safe", "eager", 0, marks=pytest.mark.long),
                                               pytest.param("safe", "adversarial", 11, marks=pytest.mark.long),
                                               # a worker's last tile staged in its idle weight stages, single CTAs
                                               pytest.param("safe,epilogue=tma_last", "adversarial", 12,
                                                            marks=pytest.mark.long)])
def test_task_and_edge_shapes(config, mode, seed):
    assert_all_pass(config, TASK_SPECS + EDGE_SPECS, mode=mode, seed=seed)


@pytest.mark.long
@pytest.mark.parametrize("jobs", JOB_POLICIES)
def test_every_job_policy(jobs):
    assert_all_pass(f"shipped,jobs={jobs}", EDGE_SPECS, workers=3)


@pytest.mark.parametrize("config, mode, seed", [
    ("shipped", "adversarial", 31),
    pytest.param("shipped", "eager", 0, marks=pytest.mark.long),
    pytest.param("shipped", "timed", 0, marks=pytest.mark.long),
    pytest.param("shipped,epilogue=atoms", "eager", 0, marks=pytest.mark.long),
    pytest.param("shipped,multicast=off,cluster_pairs=1", "adversarial", 34, marks=pytest.mark.long),
    pytest.param("shipped,descriptors=branch", "adversarial", 35, marks=pytest.mark.long),
])
def test_192_token_tiles(config, mode, seed):
    """token_variants 64/128/192 where the launch picks the 192-token kernel: its tiles through every epilogue,
    with and without the token scales' multicast, both descriptor forms, races on."""
    assert_all_pass(config, [WIDE_SPEC], mode=mode, seed=seed, workers=3)


@pytest.mark.long  # README's quick command within 4 minutes (issue 47): its family keeps test_192_token_tiles quick, the cluster plant quick
def test_a_192_token_tile_without_its_second_scale_block_fails(tmp_path):
    """Planted: each 192-token tile loads its second block of token scales from its first block's rows
    (t0 / 128 instead of t0 / 128 + 1), so tokens 128-191 are scaled by tokens 0-63's scales: the check
    fails (test_192_token_tiles runs the same shape unplanted)."""
    source = (ROOT / "submission.py").read_text()
    good = "(tBgSFB[(None, tiles_of(t0, TOKEN_CHUNK, self.config.lean_walk) + b, None, 0)], tBsSFB[b], read_again, sfb_mask)"
    assert source.count(good) == 1
    planted = tmp_path / "submission.py"
    planted.write_text(source.replace(good, good.replace(" + b,", ",")))
    rc, verdict, out = emulate("shipped", [WIDE_SPEC], workers=3, submission=planted, timeout=600)
    assert rc == 1 and verdict.startswith("FAIL"), out[-3000:]


@pytest.mark.parametrize("config, mode, seed", [
    ("shipped", "adversarial", 41),
    pytest.param("shipped", "eager", 0, marks=pytest.mark.long),
    pytest.param("shipped", "timed", 0, marks=pytest.mark.long),
    pytest.param("shipped,epilogue=atoms", "adversarial", 42, marks=pytest.mark.long),
    pytest.param("shipped,token_variants=128", "eager", 0, marks=pytest.mark.long),
    pytest.param("shipped,descriptors=branch", "adversarial", 44, marks=pytest.mark.long),
    pytest.param("shipped,warmers=off", "adversarial", 45, marks=pytest.mark.long),
])
def test_clusters_of_two_pairs(config, mode, seed):
    """cluster_pairs 2 where the launch picks it: each CTA's half of the token rows multicast to the other
    pair, a quarter of the token scales to all four CTAs, a stage refilled once both pairs' commits arrived,
    through the epilogues and descriptor forms, races on."""
    assert_all_pass(config, CLUSTER_SPECS, mode=mode, seed=seed, workers=CLUSTER_WORKERS)


@pytest.mark.parametrize("good, bad, verdicts", [
    # a stage's empty barriers count one MMA commit, not the cluster's two: the second pair's commit completes
    # the next phase, so the producer's parity wait blocks for good (eager) or refills a stage whose full
    # barrier has no arrival pending (adversarial: an mbarrier ERROR)
    ("pipeline.CooperativeGroup(pipeline.Agent.Thread, self.config.cluster_pairs)",
     "pipeline.CooperativeGroup(pipeline.Agent.Thread, 1)", ("HANG",)),
    # both pairs of a cluster take its first weight block: they store the same rows of C (and the second
    # block's stay poisoned)
    pytest.param("pair_rows = (block // self.cta_group) % self.config.cluster_pairs * self.config.weight_rows",
                 "pair_rows = 0 * self.config.weight_rows", ("RACE",), marks=pytest.mark.long),
])
def test_a_cluster_defect_is_caught(tmp_path, good, bad, verdicts):
    """Planted in a copy of submission.py, run on the first of CLUSTER_SPECS (test_clusters_of_two_pairs runs
    it unplanted, PASS with races=0)."""
    source = (ROOT / "submission.py").read_text()
    assert source.count(good) == 1
    planted = tmp_path / "submission.py"
    planted.write_text(source.replace(good, bad))
    rc, verdict, out = emulate("shipped", CLUSTER_SPECS[:1], workers=CLUSTER_WORKERS, submission=planted, timeout=600)
    assert rc != 0 and verdict.split()[0] in verdicts, out[-3000:]


# lean_walk's shapes (tests/kernel/test_schedule.py checks them): at 2 workers each pair runs two records of one 40-token
# tile on neighbouring weight blocks (they differ in n0); at 1 worker the pair runs the two 128-token tiles of one
# weight block (they differ in t0).
LEAN_SPECS = {2: "m: [40]; n: [1024]; k: [512]; g: 1; seed: 51", 1: "m: [256]; n: [256]; k: [512]; g: 1; seed: 52"}


@pytest.mark.parametrize("workers, planted, verdict", [(2, False, "PASS"), (2, True, "FAIL"), (1, True, "FAIL")])
def test_the_first_record_comes_from_the_workers_row(tmp_path, workers, planted, verdict):
    """lean_walk: the TMA warp takes its first record from the worker's row of the offsets table, and every later
    one from the record table. Unplanted: PASS, races=0. Planted in a copy of submission.py: the host copies each
    worker's second record into its row, so the TMA warp loads the next weight block's weights (2 workers) or the
    next token tile's tokens (1 worker) for the first record, which the MMA and epilogue warps (reading the table)
    compute and store as the first record's: FAIL. (With lean_walk off the host writes no copy: the rows are two
    wide, and test_each_switch_flipped_from_shipped runs that kernel.)"""
    source = (ROOT / "submission.py").read_text()
    good = "(list(records[row[0]]) if row[0] < row[1]"
    assert source.count(good) == 1
    path = None
    if planted:
        path = tmp_path / "submission.py"
        path.write_text(source.replace(good, "(list(records[row[0] + 1]) if row[0] < row[1]"))
    rc, line, out = emulate("shipped", [LEAN_SPECS[workers]], mode="adversarial", seed=51, workers=workers,
                            submission=path)
    assert line.split()[0] == verdict and (rc == 0) == (verdict == "PASS"), out[-3000:]
    if verdict == "PASS":
        assert "races=0" in line, out[-3000:]


@pytest.mark.long
@pytest.mark.parametrize("switch", SWITCHES)
def test_each_switch_flipped_from_shipped(switch):
    assert_all_pass(f"shipped,{switch}", [EDGE_SPECS[1]])


def _prefetching_stream(spec: str, workers: int, configs: dict) -> dict:
    """Per label, the timing of `spec` on `workers` workers under its configuration, timed as a stream of 3
    calls, each checked against the reference with races on (every one must PASS with races=0)."""
    timings = {}
    for label, config in configs.items():
        args = [sys.executable, str(ROOT / "tools" / "emulate.py"), "submission", "--config", config,
                "--spec", spec, "--workers", str(workers), "--time", "--calls", "3", "--races"]
        done = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=ROOT)
        lines = done.stdout.strip().splitlines()
        assert done.returncode == 0 and lines[-1].startswith("PASS") and "races=0" in lines[-1], \
            done.stdout[-3000:] + done.stderr[-3000:]
        timings[label] = timing_of(lines)
    return timings


def test_warmers_bring_the_next_calls_inputs_into_l2():
    """One 40-token tile of K 2048 on 3 pairs, timed, as a stream of 3 calls (each checked, races on): with
    warmers the 2 idle pairs launch first and prefetch the call's boxes, weights (256 x 1024 bytes) and all,
    while the call before still runs, so its loads hit L2 and every call after the first is faster. Without
    them (and without self_warm, which takes over where no warmer launches) nothing is prefetched."""
    timings = _prefetching_stream("m: [40]; n: [256]; k: [2048]; g: 1; seed: 3", 3,
                                  {"on": "shipped,warmers=on", "off": "shipped,warmers=off,self_warm=off"})
    assert timings["on"]["prefetched_mb"] > 256 * 1024 / 1e6 and "prefetched_mb" not in timings["off"]
    assert timings["on"]["stream_us"] < 0.95 * timings["off"]["stream_us"], timings


def test_self_warming_brings_the_first_records_inputs_into_l2():
    """Three weight blocks of one 40-token tile, K 2048, on 2 pairs, timed, as a stream of 3 calls (each
    checked, races on): no pair is idle, so no warmer launches; the pair with one tile frees its SMs first
    and the next call's first worker (two tiles) starts there, prefetching its first record's boxes
    (self_warm_plan: all 8 k-tiles), weights (256 x 1024 bytes) and all, before its dependency wait, so its
    loads hit L2 and every call after the first is faster. Without the switch nothing is prefetched."""
    timings = _prefetching_stream("m: [40]; n: [768]; k: [2048]; g: 1; seed: 3", 2,
                                  {"on": "shipped,self_warm=on", "off": "shipped,self_warm=off"})
    assert timings["on"]["prefetched_mb"] > 256 * 1024 / 1e6 and "prefetched_mb" not in timings["off"]
    assert timings["on"]["stream_us"] < 0.95 * timings["off"]["stream_us"], timings


@pytest.mark.parametrize("config", ["shipped", pytest.param("safe", marks=pytest.mark.long)])
def test_the_b200s_real_worker_count_on_small_shapes(config):
    assert_all_pass(config, [TASK_SPECS[8], EDGE_SPECS[0]], workers=None)


def test_a_file_without_a_b200_kernel_is_one_line():
    """Issue 26, item 3: not an AttributeError from inside the emulated call."""
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "emulate.py"), "submission", "--submission",
                           str(ROOT / "tests" / "ref_submission.py"), "--spec", EDGE_SPECS[0]],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    # bad use: exit 2 and one line on stderr, as every tool says it (issue 48, item 5)
    assert done.returncode == 2 and done.stdout == "" and done.stderr.strip().splitlines() == [
        f"emulate.py: {ROOT / 'tests' / 'ref_submission.py'} defines no compile_sm100: the emulator runs a B200 "
        f"(sm_100a) kernel; python eval.py test --submission {ROOT / 'tests' / 'ref_submission.py'} tests any other"], \
        done.stdout + done.stderr[-2000:]


def test_a_planted_defect_fails_the_submission_too():
    """The matrix can fail: the scale-factor column shift makes every case wrong."""
    args = [sys.executable, str(ROOT / "tools" / "emulate.py"), "submission", "--config", "safe", "--workers", "2",
            "--spec", EDGE_SPECS[1], "--ptx-filter", f"{sys.executable} {ROOT / 'tests' / 'emulator' / 'ptx_defects.py'} sf-column"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 1 and done.stdout.strip().splitlines()[-1].startswith("FAIL"), done.stdout[-3000:]


@pytest.mark.long
@pytest.mark.parametrize("number", [3, 4])
def test_benchmark_shapes_at_the_real_worker_count(number):
    """Benchmarks 3 (G = 2, M 192 and 320, N 3072, K 4096) and 4 (M 128 and 384, N 4096, K 1536) on the
    B200's 74 pairs (about 20 and 40 s here); benchmarks 1 and 2 would take 10 minutes or more each."""
    entry = yaml.safe_load((ROOT / "task.yml").read_text())["benchmarks"][number - 1]
    assert_all_pass("shipped", [_spec(entry)], workers=None, timeout=1800)


@pytest.mark.long
@pytest.mark.parametrize("config", ["shipped", "safe"])
def test_check_ladder_under_the_emulator(config):
    """`tools/check.py --emulate`: the ladder's partial_tiles stage (M = 1, 7, 40, 129, 300, mixed) at a B200's
    worker count, a process per case, the verdicts of a B200 run."""
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "check.py"), "--emulate", "--stage", "partial_tiles",
                           "--config", config], capture_output=True, text=True, timeout=1200, cwd=ROOT)
    rows = [line for line in done.stdout.splitlines() if line.startswith("partial_tiles")]
    assert done.returncode == 0 and len(rows) == 9 and all(" PASS " in row for row in rows), done.stdout[-3000:]
    assert "all 9 cases passed. Next: on a B200" in done.stdout
