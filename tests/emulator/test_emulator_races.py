"""Happens-before race detection (emulator/happens_before.py, `--races`): silent on kernels known to run on
B200s, loud on each planted defect, in both timing modes.

- Small hand-written kernels (milliseconds): the orders the detector knows (bar.sync, mbarrier phases) and
  the race each one's absence leaves.
- NVIDIA's kernel (tools/emulate.py nvidia, M, N, K = 512, 384, 1024 on 2 CTAs: 6 tiles per CTA through 2
  accumulators, the stages reused across tiles) and ours (tools/emulate.py submission, shipped, one worker:
  4 tiles of 256 weight rows, K = 2560 = 10 K-blocks through 8 stages) with each defect of
  tests/emulator/ptx_defects.py planted: RACE (exit 6) naming the two accesses (emulator/DESIGN.md has the table).
  The known-good runs with --races are test_emulator_nvidia.py's and test_emulator_submission.py's own
  cases (they pass --races) and test_emulator_race_sweep.py's sweep (long), and the race found in our
  kernel has its own test here.
- The 2-CTA teardown (issue 48): NVIDIA's pair of two tiles (PASS under DSL 4.5.x, the DSL's re-init RACE
  under 4.3.x), and tests/emulator/ptx_pair_defects.py's teardown defects planted in ours and NVIDIA's: RACE.
Quick: the small kernels and one kernel case per defect class; the rest is `long`.
"""

import struct
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import require_nvidia_example
from emulator import RaceError
from emulator.launch import execute
from emulator.memory import GlobalMemory

from conftest import require_nvidia_example
from test_emulator_core import HEADER

ROOT = Path(__file__).resolve().parents[2]
DEFECTS = ROOT / "tests" / "emulator" / "ptx_defects.py"
RACE_EXIT = 6

# ------------------------------------------------------------------------------------------------
# small kernels: warp 0 stores to shared memory, warp 1 loads it
# ------------------------------------------------------------------------------------------------

WRITE_THEN_READ = """
	shr.u32 %r5, %r2, 5;
	setp.eq.u32 %p1, %r5, 0;
	add.s32 %r6, %r20, 64;
	@%p1 st.shared.u32 [%r6], %r2;
	{sync}
	@!%p1 ld.shared.u32 %r3, [%r6];
	mov.u32 %r3, 0;
""" + """
	mul.wide.u32 %rd2, %r2, 4;
	add.s64 %rd3, %rd1, %rd2;
	st.global.u32 [%rd3], %r3;
	ret;
"""

MBARRIER = """
	shr.u32 %r5, %r2, 5;
	setp.eq.u32 %p1, %r5, 0;
	add.s32 %r6, %r20, 64;
	add.s32 %r7, %r20, 128;
	mov.u32 %r8, 1;
	setp.eq.u32 %p2, %r2, 0;
	@%p2 mbarrier.init.shared.b64 [%r7], %r8;
	bar.sync 0;
	@!%p1 bra $L_consumer;
	st.shared.u32 [%r6], %r2;
	@%p2 mbarrier.arrive.release.cta.shared::cta.b64 _, [%r7], %r8;
	bra $L_done;
$L_consumer:
{wait}
	ld.shared.u32 %r3, [%r6];
$L_done:
	ret;
"""
SPIN = """$L_spin:
	mbarrier.try_wait.parity.shared.b64 %p3, [%r7], 0;
	@!%p3 bra $L_spin;"""


def run(body: str, out: np.ndarray, *, mode: str = "eager", races: bool = False):
    """Two warps of one CTA run `body` (test_emulator_core's header: %rd1 = out, %r2 = tid, %r20 = shared)."""
    ptx = HEADER.format(threads=64) + body + "\n}\n"
    memory = GlobalMemory()
    memory.register(out.ctypes.data, out.nbytes, "out")
    launch = SimpleNamespace(kernel_name="k", grid=(1, 1, 1), block=(64, 1, 1), cluster=(1, 1, 1), shared_bytes=1024,
                             attributes={}, params=(struct.pack("<Q", out.ctypes.data), struct.pack("<I", 0)))
    return execute(launch, ptx, memory, mode=mode, seed=3, step_budget=200_000, races=races)


@pytest.mark.parametrize("mode", ["eager", "adversarial"])
def test_bar_sync_orders_a_shared_store_before_another_warps_load(mode):
    out = np.zeros(64, np.uint32)
    run(WRITE_THEN_READ.format(sync="bar.sync 0;"), out, mode=mode, races=True)


@pytest.mark.parametrize("mode", ["eager", "adversarial"])
def test_without_the_bar_sync_the_pair_is_a_race_naming_both_lines(mode):
    out = np.zeros(64, np.uint32)
    with pytest.raises(RaceError) as caught:
        run(WRITE_THEN_READ.format(sync=""), out, mode=mode, races=True)
    text = str(caught.value)
    assert "st.shared.u32" in text and "ld.shared.u32" in text and "warp 0" in text and "warp 1" in text
    assert "shared 0x" in text


@pytest.mark.parametrize("mode", ["eager", "adversarial"])
def test_an_mbarrier_phase_orders_the_arrive_before_the_wait(mode):
    out = np.zeros(64, np.uint32)
    run(MBARRIER.format(wait=SPIN), out, mode=mode, races=True)


@pytest.mark.parametrize("mode", ["eager", "adversarial"])
def test_a_load_without_the_mbarrier_wait_is_a_race(mode):
    out = np.zeros(64, np.uint32)
    with pytest.raises(RaceError):
        run(MBARRIER.format(wait=""), out, mode=mode, races=True)


# thread 0 loads 64 bytes of `out` into shared memory with a 1-D bulk copy (cp.async.bulk, as the Hopper
# kernel loads its scales), then {use}: waits on the copy's mbarrier, reads the bytes, or neither; then exits
BULK_LOAD = """
	add.s32 %r6, %r20, 64;
	add.s32 %r7, %r20, 256;
	mov.u32 %r8, 1;
	setp.eq.u32 %p2, %r2, 0;
	@!%p2 bra $L_done;
	mbarrier.init.shared.b64 [%r7], %r8;
	fence.mbarrier_init.release.cluster;
	mbarrier.arrive.expect_tx.shared::cta.b64 %rd5, [%r7], 64;
	cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r6], [%rd1], 64, [%r7];
{use}
$L_done:
	ret;
"""
READ = "	ld.shared.u32 %r3, [%r6];"


@pytest.mark.parametrize("mode", ["eager", "adversarial"])
def test_a_bulk_load_waited_for_before_its_bytes_are_read_and_the_cta_exits_is_no_race(mode):
    out = np.arange(64, dtype=np.uint32)
    run(BULK_LOAD.format(use=SPIN + "\n" + READ), out, mode=mode, races=True)


@pytest.mark.parametrize("mode", ["eager", "adversarial"])
def test_reading_a_bulk_loads_bytes_without_its_wait_is_a_race(mode):
    out = np.arange(64, dtype=np.uint32)
    with pytest.raises(RaceError) as caught:
        run(BULK_LOAD.format(use=READ + "\n" + SPIN), out, mode=mode, races=True)  # the wait comes too late
    text = str(caught.value)
    assert "cp.async.bulk.shared::cluster.global" in text and "ld.shared.u32" in text and "exit" not in text


@pytest.mark.parametrize("mode", ["eager", "adversarial"])
def test_a_cta_that_exits_while_its_bulk_load_is_in_flight_races_with_it(mode):
    """The CTA's exit ends its shared memory (happens_before.cta_exit): the copy, not waited for, writes it
    after (adversarial: delivered at the grid's end) or unordered with (eager: delivered at issue) that end."""
    out = np.arange(64, dtype=np.uint32)
    with pytest.raises(RaceError) as caught:
        run(BULK_LOAD.format(use=""), out, mode=mode, races=True)
    text = str(caught.value)
    assert "cp.async.bulk.shared::cluster.global" in text and "exit (its shared memory is released)" in text


def test_detection_is_off_by_default():
    out = np.zeros(64, np.uint32)
    run(WRITE_THEN_READ.format(sync=""), out)


# ------------------------------------------------------------------------------------------------
# planted defects in NVIDIA's kernel and ours
# ------------------------------------------------------------------------------------------------

NVIDIA = {
    "1cta": ["nvidia", "--mma-tiler", "128,128", "--cluster", "1,1", "--clusters", "2", "--mnk", "512,384,1024"],
    "2cta": ["nvidia", "--mma-tiler", "256,128", "--cluster", "2,1", "--clusters", "1", "--mnk", "512,384,1024"],
}
# one worker: 4 tiles (N = 1024 in M = 256 weight tiles), 10 K-blocks of 256 through 8 stages
OURS = ["submission", "--config", "shipped", "--workers", "1", "--spec", "m: [40]; n: [1024]; k: [2560]; g: 1; seed: 3"]

# defect -> (kernels it is planted in, text the RACE line must hold)
CASES = {
    "early-acc-release": (["1cta", "ours"], ("tcgen05.ld", "tcgen05.mma")),
    # the first unordered pair depends on the interleaving: the epilogue's tcgen05.ld against an MMA, its
    # dealloc against a queued tcgen05.cp, or (ours, 2-CTA) its final arrive on the peer CTA's teardown
    # barrier, no longer ordered after that barrier's init (the order came through the accumulator phases)
    "no-acc-full-wait": (["1cta", "ours"], ()),
    "no-full-wait": (["1cta", "ours"], ("cp.async.bulk.tensor",)),
    "no-mbarrier-init-fence": (["1cta", "2cta", "ours"], ("fence.mbarrier_init", "mbarrier.init")),
    # ours writes its last tile's C staging with stmatrix, not st.shared
    "no-proxy-fence": (["1cta", "ours"], ("fence.proxy.async", "cp.async.bulk.tensor")),
    # ours writes each C staging stage once (only a worker's last tile is staged): its waits of N > 0 are
    # vacuous, and removing them is no defect there
    "no-store-read-wait": (["1cta"], ("st.shared", "cp.async.bulk.tensor")),
    # the CTA exits, its shared memory ending, while the TMA store still reads it (happens_before.cta_exit)
    "no-exit-store-wait": (["1cta", "2cta", "ours"], ("cp.async.bulk.tensor", "exit (its shared memory is released)")),
}
# one case per kind of order, ours and NVIDIA's, both modes: the rest is `-m long` (the quick suite's budget)
QUICK = {("early-acc-release", "ours", "eager"), ("no-full-wait", "1cta", "eager"),
         ("no-exit-store-wait", "ours", "adversarial"),
         ("no-mbarrier-init-fence", "ours", "adversarial"), ("no-store-read-wait", "1cta", "adversarial")}


def _params():
    for defect, (kernels, _) in CASES.items():
        for kernel in kernels:
            for mode in ("eager", "adversarial"):
                marks = () if (defect, kernel, mode) in QUICK else (pytest.mark.long,)
                yield pytest.param(defect, kernel, mode, marks=marks, id=f"{defect}-{kernel}-{mode}")


def emulate(args, mode: str, defect: str, timeout: int = 600):
    command = [sys.executable, str(ROOT / "tools" / "emulate.py"), *args, "--mode", mode, "--seed", "5", "--races",
               "--ptx-filter", f"{sys.executable} {DEFECTS} {defect}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-3000:]
    return done.returncode, lines[-1], done.stdout


@pytest.mark.skipif(sys.version_info < (3, 10), reason="the DSL needs Python 3.10+")
def test_our_kernel_with_workers_of_one_or_two_tiles_has_no_race():
    """The race --races found in submission.py (fixed there, class TmemAllocator): with DSL 4.3.5 the 2-CTA
    dealloc mbarrier was initialized again in each warp branch, after the cluster sync, and a worker of one or
    two tiles had nothing ordering that init before the peer CTA's arrive on it at teardown."""
    command = [sys.executable, str(ROOT / "tools" / "emulate.py"), "submission", "--config", "shipped", "--workers",
               "2", "--races", "--spec", "m: [7, 40]; n: [128, 384]; k: [768, 256]; g: 2; seed: 8"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip().splitlines()[-1].startswith("PASS"), done.stdout[-3000:]
    assert "races=0" in done.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(sys.version_info < (3, 10), reason="the DSL needs Python 3.10+")
@pytest.mark.parametrize("defect, kernel, mode", list(_params()))
def test_planted_defect_is_a_race(defect, kernel, mode):
    if kernel != "ours":
        require_nvidia_example()
    args = OURS if kernel == "ours" else NVIDIA[kernel]
    rc, verdict, out = emulate(args, mode, defect)
    report = verdict if kernel != "ours" else next(line for line in out.splitlines() if line.startswith("case "))
    if (defect, kernel, mode) == ("no-full-wait", "ours", "adversarial"):
        # the MMA warp, not waiting for a stage to fill, also releases it early. Adversarial mode delays the TMA
        # loads; which consequence it meets first depends on the DSL's instruction order: with 4.3.5 the
        # producer's next arrive finds that stage's empty phase already complete (an ERROR), with 4.5.2 the peer
        # CTA's next load overwrites a stage the tensor pipe is still reading (the race). Either is the defect.
        early_release = rc == 4 and "ERROR mbarrier" in report and "arrival(s) on mbarrier" in report
        overwrite = rc == RACE_EXIT and "RACE race:" in report and "cp.async.bulk.tensor" in report
        assert early_release or overwrite, out[-3000:]
        return
    assert rc == RACE_EXIT and "RACE race:" in report, out[-3000:]
    for text in CASES[defect][1]:
        assert text in report, (text, report)


# ------------------------------------------------------------------------------------------------
# the 2-CTA teardown (issue 48, item 1): what orders the dealloc mbarrier's init and the pair's dealloc
# ------------------------------------------------------------------------------------------------

PAIR_DEFECTS = ROOT / "tests" / "emulator" / "ptx_pair_defects.py"
# NVIDIA's 2-CTA form on one pair with two tiles: nothing but the pair's tcgen05.alloc lies between an init of
# the dealloc mbarrier after the start-up cluster barrier and the peer CTA's arrive on it
NVIDIA_TWO_TILES = ["nvidia", "--mma-tiler", "256,128", "--cluster", "2,1", "--mnk", "256,256,512", "--seed", "3"]
# the same form, one pair of four tiles: the accumulator phases order the peer's epilogue before the teardown
NVIDIA_FOUR_TILES = ["nvidia", "--mma-tiler", "256,128", "--cluster", "2,1", "--mnk", "512,256,512", "--seed", "7"]
# ours, two workers of one or two tiles each (test_our_kernel_with_workers_of_one_or_two_tiles_has_no_race: clean)
OURS_TWO_WORKERS = ["submission", "--config", "shipped", "--workers", "2", "--spec",
                    "m: [7, 40]; n: [128, 384]; k: [768, 256]; g: 2; seed: 8"]


def dsl_version() -> str:
    import importlib.metadata

    return importlib.metadata.version("nvidia-cutlass-dsl")


def emulate_verdict(args, *extra, timeout: int = 600):
    """(exit status, the line with the verdict's text: the case line for `submission`, else the last one, the
    whole output) of tools/emulate.py ARGS EXTRA --races."""
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "emulate.py"), *args, *extra, "--races"],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False)
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-3000:]
    report = lines[-1] if args[0] != "submission" else next(line for line in lines if line.startswith("case "))
    return done.returncode, report, done.stdout


@pytest.mark.skipif(sys.version_info < (3, 10), reason="the DSL needs Python 3.10+")
@pytest.mark.parametrize("mode", ["eager", pytest.param("adversarial", marks=pytest.mark.long)])
def test_nvidia_2cta_pair_of_two_tiles(nvidia_example, mode):
    """Issue 48, item 1: `tools/emulate.py nvidia --mma-tiler 256,128 --cluster 2,1 --mnk 256,256,512 --seed 3
    --races`. Compiled by DSL 4.5.x, NVIDIA's example initializes the dealloc mbarrier once, before the start-up
    cluster barrier: PASS, races=0. Compiled by 4.3.x, its TmemAllocator initializes it again in the epilogue
    warp's branch, after that barrier and before the pair's tcgen05.alloc (an mbarrier.init of a valid mbarrier:
    undefined, ISA mbarrier.init), and the pair's allocation orders nothing between the two CTAs (ISA 9.7.16.5:
    its first warp "could block"): a RACE naming that init and the peer's remote arrive, as emulator/DESIGN.md
    explains (the DSL's defect, fixed in 4.5.2; with more than two tiles per pair the accumulator phases order
    them: test_known_good_kernels_have_no_race in test_emulator_race_sweep.py)."""
    rc, verdict, out = emulate_verdict(NVIDIA_TWO_TILES, "--mode", mode)
    if dsl_version().startswith("4.3."):
        assert rc == RACE_EXIT and verdict.startswith("RACE race: mbarrier.init by CTA (1, 0, 0)"), out[-3000:]
        assert "mbarrier.init.shared.b64" in verdict and "then a remote arrive by CTA (0, 0, 0)" in verdict, verdict
        assert "not ordered after the barrier's initialization" in verdict, verdict
    else:
        assert rc == 0 and verdict.startswith("PASS") and verdict.endswith("races=0"), out[-3000:]


# (defect, kernel, mode) -> texts the RACE line must hold
PAIR_CASES = {
    # the init the DSL 4.3.5 allocator made, planted after the pair's allocation in kernels that have none
    ("dealloc-barrier-reinit", "ours", "eager"): ("mbarrier.init.shared.b64 [%planted1]", "then a remote arrive"),
    ("dealloc-barrier-reinit", "ours", "adversarial"): ("mbarrier.init.shared.b64 [%planted1]",
                                                        "then a remote arrive"),
    ("dealloc-barrier-reinit", "nvidia-two-tiles", "eager"): ("mbarrier.init.shared.b64", "then a remote arrive"),
    # each half of the pair's dealloc against the peer CTA's epilogue reads
    ("no-dealloc-wait", "ours", "eager"): ("tcgen05.ld", "tcgen05.dealloc.cta_group::2",
                                           "frees the peer CTA's columns too"),
    ("no-dealloc-wait", "ours", "adversarial"): ("tcgen05.ld", "tcgen05.dealloc.cta_group::2",
                                                 "frees the peer CTA's columns too"),
    ("no-dealloc-wait", "nvidia-four-tiles", "eager"): ("tcgen05.ld", "tcgen05.dealloc.cta_group::2",
                                                        "frees the peer CTA's columns too"),
    ("no-dealloc-wait", "nvidia-four-tiles", "adversarial"): ("tcgen05.ld", "tcgen05.dealloc.cta_group::2",
                                                              "frees the peer CTA's columns too"),
}
PAIR_KERNELS = {"ours": OURS_TWO_WORKERS, "nvidia-two-tiles": NVIDIA_TWO_TILES, "nvidia-four-tiles": NVIDIA_FOUR_TILES}
PAIR_QUICK = {("dealloc-barrier-reinit", "ours", "eager"), ("no-dealloc-wait", "ours", "eager")}


@pytest.mark.skipif(sys.version_info < (3, 10), reason="the DSL needs Python 3.10+")
@pytest.mark.parametrize("defect, kernel, mode", [
    pytest.param(*case, marks=() if case in PAIR_QUICK else (pytest.mark.long,), id="-".join(case))
    for case in PAIR_CASES])
def test_planted_pair_teardown_defect_is_a_race(defect, kernel, mode):
    """tests/emulator/ptx_pair_defects.py's teardown defects, in kernels whose unplanted runs are clean (ours at two
    workers; NVIDIA's four-tile pair, and its two-tile pair under DSL 4.5.x): the pair's tcgen05.alloc is no
    order between the CTAs (an init of the dealloc mbarrier just after it races with the peer's arrive), and
    each half of the pair's tcgen05.dealloc must follow the peer CTA's tensor memory accesses (without the
    dealloc mbarrier's wait it races with the peer's last tcgen05.ld)."""
    if kernel.startswith("nvidia"):
        require_nvidia_example()
    rc, verdict, out = emulate_verdict(PAIR_KERNELS[kernel], "--mode", mode, "--ptx-filter",
                                       f"{sys.executable} {PAIR_DEFECTS} {defect}")
    assert rc == RACE_EXIT and "RACE race:" in verdict, out[-3000:]
    for text in PAIR_CASES[(defect, kernel, mode)]:
        assert text in verdict, (text, verdict)
