"""Cluster launch control (emulator/isa/launch_control.py) on a small hand-written PTX kernel: a persistent
grid whose CTAs take work by cancelling clusters not yet placed (`clusterlaunchcontrol.try_cancel`), in the
three modes and with the race detector on, and the defects the emulator must catch. No driver and no DSL:
launches are built here, as in test_emulator_core.py. clc_kernel.py (beside this file) runs a CuTe DSL kernel of ours
the same way through the stub driver.

The kernel: CTA c starts with tile c; warp 0's lane 0 counts the tile (atom.add) and writes
its owner, c + 1, beside it (a 16-byte granule per tile), then asks for more work: `mbarrier.arrive.expect_tx` of 16 bytes and
`try_cancel` into a 16-byte response; every thread waits for the phase, loads the response
(`ld.shared.b128`), decodes it (`query_cancel.is_canceled`, `get_first_ctaid::x`), `bar.sync`, and goes on
with the cancelled cluster's tile or exits. A correct run counts every tile exactly once."""

import struct
from types import SimpleNamespace

import numpy as np
import pytest

from emulator import EmulatorError, HangError, RaceError
from emulator.launch import execute
from emulator.memory import GlobalMemory

HEADER = """.version 8.8
.target sm_100a
.address_size 64
.extern .shared .align 1024 .b8 __dynamic_shmem__0[];
.visible .entry k(
	.param .u64 k_param_0,
	.param .u32 k_param_1
)
.reqntid THREADS, 1, 1
{
	.reg .pred %p<16>;
	.reg .b32 %r<64>;
	.reg .b64 %rd<16>;
	ld.param.u64 %rd1, [k_param_0];
	ld.param.u32 %r1, [k_param_1];
	mov.u32 %r2, %tid.x;
	mov.u32 %r20, __dynamic_shmem__0;
"""

WAIT = """$L_wait:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r21], %r6;
	@!%p2 bra $L_wait;
"""
QUERY = "clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 %p3, %q;"
EXPECT = "@%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r21], 16;"

# the response at +RESPONSE of the dynamic shared memory, its mbarrier at +MBAR
KERNEL = """
	add.u32 %r21, %r20, MBAR;
	add.u32 %r22, %r20, RESPONSE;
	mov.u32 %r5, %ctaid.x;
	setp.eq.u32 %p1, %r2, 0;
	@%p1 mbarrier.init.shared::cta.b64 [%r21], 1;
	@%p1 fence.mbarrier_init.release.cluster;
	bar.sync 0;
	mov.u32 %r6, 0;
$L_loop:
	mul.wide.u32 %rd2, %r5, 16;
	add.s64 %rd3, %rd1, %rd2;
	@%p1 atom.global.add.u32 %r7, [%rd3], 1;
	mov.u32 %r8, %ctaid.x;
	add.u32 %r8, %r8, 1;
	@%p1 st.global.u32 [%rd3+4], %r8;
	EXPECT
	@%p1 clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128 [%r22], [%r21];
WAIT	xor.b32 %r6, %r6, 1;
	{
	.reg .b128 %q;
	ld.shared.b128 %q, [%r22];
	QUERY
	clusterlaunchcontrol.query_cancel.get_first_ctaid::x.b32.b128 %r5, %q;
	}
	bar.sync 0;
	@%p3 bra $L_loop;
	ret;
}
"""


def run(tiles: int, mode: str, *, seed: int = 0, races: bool = True, shared: int = 1024, response: int = 0,
        mbar: int = 16, threads: int = 64, edits=()):
    """The kernel on `tiles` one-CTA clusters; `shared` dynamic bytes per CTA (200 KiB: one CTA per SM in the
    timed mode's placement, so a grid larger than 148 waits in the dispatch queue). Returns (count per tile,
    owner per tile, RunStats)."""
    text = KERNEL.replace("WAIT", WAIT).replace("QUERY", QUERY).replace("EXPECT", EXPECT)
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    ptx = HEADER.replace("THREADS", str(threads)) + text.replace("RESPONSE", str(response)).replace("MBAR", str(mbar))
    out = np.zeros((tiles, 4), np.uint32)  # per tile, one 16-byte granule (the race detector's): count, owner + 1
    memory = GlobalMemory()
    memory.register(out.ctypes.data, out.nbytes, "out")
    launch = SimpleNamespace(kernel_name="k", grid=(tiles, 1, 1), block=(threads, 1, 1), cluster=(1, 1, 1),
                             shared_bytes=shared, attributes={}, max_dynamic_shared=shared,
                             params=(struct.pack("<Q", out.ctypes.data), struct.pack("<I", 0)))
    stats = execute(launch, ptx, memory, mode=mode, seed=seed, races=races, step_budget=5_000_000)
    return out[:, 0], out[:, 1].astype(np.int64) - 1, stats


@pytest.mark.parametrize("mode,seed", [("eager", 0), ("adversarial", 1), ("adversarial", 2), ("adversarial", 3)])
def test_every_tile_runs_exactly_once(mode, seed):
    counts, owners, _ = run(12, mode, seed=seed)
    assert counts.tolist() == [1] * 12
    if mode == "eager":  # half the clusters placed, the other half cancelled and run by the first six
        assert owners.tolist() == [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5]


def test_adversarial_mode_cancels_some_clusters_and_fails_some_requests():
    stolen = [int((run(12, "adversarial", seed=s, races=False)[1] != np.arange(12)).sum()) for s in range(6)]
    assert any(stolen) and not all(n == 6 for n in stolen), stolen


def test_timed_mode_cancels_only_clusters_still_in_the_dispatch_queue():
    """200 KiB of shared memory: one CTA per SM, so 148 are placed and 12 wait; those are cancelled."""
    counts, owners, stats = run(160, "timed", shared=200 * 1024)
    assert counts.tolist() == [1] * 160
    stolen = np.flatnonzero(owners != np.arange(160))
    assert stolen.tolist() == list(range(148, 160))
    assert stats.timing["cancelled_ctas"] == 12


def test_timed_mode_cannot_cancel_a_grid_that_fits():
    counts, owners, stats = run(16, "timed")
    assert counts.tolist() == [1] * 16 and owners.tolist() == list(range(16))
    assert "cancelled_ctas" not in stats.timing


def test_response_read_before_its_wait_is_a_race():
    """One warp: it issues, then reads the response with no wait in between. Eager mode writes the response at
    issue, so the bytes are right; the race detector sees the async-proxy write unordered with the read."""
    with pytest.raises(RaceError, match=r"write by cluster launch control .* then read by .* ld\.shared\.b128"):
        run(12, "eager", threads=32, edits=[(WAIT, "")])


def test_response_read_before_its_wait_with_two_warps():
    """The warp that does not issue reads the response before any try_cancel wrote it."""
    with pytest.raises(EmulatorError, match="no try_cancel wrote"):
        run(12, "eager", races=False, edits=[(WAIT, "")])


def test_a_cancelled_tile_not_run_is_seen_in_the_output():
    """The kernel takes every response for a failure (and exits): the cancelled clusters' tiles never run."""
    counts, _, _ = run(12, "eager", edits=[(QUERY, "setp.ne.u32 %p3, %r2, %r2;")])
    assert counts.tolist() == [1] * 6 + [0] * 6


def test_try_cancel_without_expect_tx_hangs():
    with pytest.raises(HangError):
        run(12, "eager", races=False, edits=[(EXPECT, "@%p1 mbarrier.arrive.shared::cta.b64 _, [%r21];")])


def test_response_over_an_mbarrier_is_an_error():
    """The 16-byte response at +0 covers the mbarrier at +8 (teelaitila's final entry reserves 4 bytes for its
    response, the CLC mbarrier 8 bytes after it)."""
    with pytest.raises(EmulatorError, match="covers the mbarrier"):
        run(12, "eager", mbar=8)


def test_try_cancel_after_an_observed_failure_is_an_error():
    """The CTA loops once more after a failure: the ISA leaves a second try_cancel undefined."""
    with pytest.raises(EmulatorError, match="after it observed"):
        run(2, "eager", races=False, edits=[("@%p3 bra $L_loop;", "bra $L_loop;"),
                                            ("get_first_ctaid::x.b32.b128 %r5", "get_first_ctaid::x.b32.b128 %r9")])


def test_query_of_bytes_no_try_cancel_wrote_is_an_error():
    with pytest.raises(EmulatorError, match="no try_cancel wrote"):
        run(12, "eager", races=False, edits=[("ld.shared.b128 %q, [%r22];", "ld.shared.b128 %q, [%r20+32];")])


# --------------------------------------------------------------------------------------------------
# A CuTe DSL kernel of ours (clc_kernel.py, beside this file)
# --------------------------------------------------------------------------------------------------

DSL_MODES = [("1", "eager", 0), ("2", "eager", 0), ("1", "adversarial", 1), ("1", "adversarial", 2),
             ("2", "adversarial", 3), ("1", "timed", 0)]
DSL_DEFECTS = ["1:eager:0:drop-cancelled", "2:adversarial:1:drop-cancelled", "1:eager:0:no-wait",
               "1:timed:0:no-release", "1:adversarial:1:no-release", "2:eager:0:no-release"]


@pytest.fixture(scope="module")
def dsl_results():
    """Every DSL case, run in one process (the stub driver loads before cutlass): {case: its record}."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    if sys.version_info < (3, 10):
        pytest.skip("the DSL needs Python 3.10+")
    here = Path(__file__).resolve().parent
    cases = [f"{c}:{m}:{s}" for c, m, s in DSL_MODES] + DSL_DEFECTS
    done = subprocess.run([sys.executable, str(here / "clc_kernel.py"), *cases], capture_output=True,
                          text=True, timeout=900, cwd=here.parents[1])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {r["case"]: r for r in records}


@pytest.mark.parametrize("cluster, mode, seed", DSL_MODES)
def test_dsl_kernel_runs_every_tile_exactly_once(dsl_results, cluster, mode, seed):
    """Both warps of every CTA count every tile once, with the race detector on; eager mode places half the
    clusters and the first half take the rest by try_cancel (multicast for clusters of 2); timed mode places
    148 CTAs and cancels the 12 in the dispatch queue."""
    record = dsl_results[f"{cluster}:{mode}:{seed}"]
    assert record["ok"], record
    assert set(record["counts"]) == {1} and set(record["second"]) == {1}
    stolen = sum(owner != cta for cta, owner in enumerate(record["owners"]))
    if mode == "eager":
        assert stolen == len(record["owners"]) // 2
    if mode == "timed":
        assert stolen == record["cancelled"] == 12


def test_dsl_kernel_that_drops_a_cancelled_tile_leaves_it_undone(dsl_results):
    for case in ("1:eager:0:drop-cancelled", "2:adversarial:1:drop-cancelled"):
        record = dsl_results[case]
        assert record["ok"] and 0 in record["counts"], record


def test_dsl_kernel_reading_the_response_before_its_wait_is_caught(dsl_results):
    record = dsl_results["1:eager:0:no-wait"]
    assert not record["ok"] and record["kind"] == "clc" and "no try_cancel wrote" in record["error"], record


def test_dsl_kernel_overwriting_a_response_still_being_read_is_caught(dsl_results):
    """No barrier between the response's reads and the next try_cancel: timed, the race detector names the
    read and the try_cancel's write; the other modes see a warp skip tiles or hang."""
    record = dsl_results["1:timed:0:no-release"]
    assert record["kind"] == "race" and "ld.shared" in record["error"] and "try_cancel" in record["error"], record
    for case in ("1:adversarial:1:no-release", "2:eager:0:no-release"):
        record = dsl_results[case]
        assert not record["ok"] or 0 in record["second"], record
