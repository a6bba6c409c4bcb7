"""The timed mode's stream of launches (emulator/clock.py, launch.execute_stream): consecutive grids in one
clock with CUDA's stream semantics (launch gap; programmatic dependent launch and griddepcontrol), CTAs
placed on the least-loaded SMs as shared memory, threads and tensor memory allow, and the L2 prefetch
(cp.async.bulk.prefetch{.tensor}) that makes a later TMA load a hit. Hand-written PTX (quick), then NVIDIA's
kernel as N calls through tools/emulate.py."""

import struct
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from emulator import EmulatorError
from emulator.launch import StreamLaunch, execute, execute_stream
from emulator.machines import load
from emulator.memory import GlobalMemory
from test_emulator_clock import timing_of
from test_emulator_core import HEADER, STORE_R3
from test_emulator_tma import _encode_map

ROOT = Path(__file__).resolve().parents[2]
B200 = load("b200")
PDL = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


def launch_of(out: np.ndarray, arg: int = 0, *, ctas: int = 1, threads: int = 32, shared: int = 1024,
              pdl: bool = False, cluster: int = 1):
    return SimpleNamespace(kernel_name="k", grid=(ctas, 1, 1), block=(threads, 1, 1), cluster=(cluster, 1, 1),
                           shared_bytes=shared, attributes={PDL: 1} if pdl else {},
                           max_dynamic_shared=shared if shared > 49152 else None,
                           params=(struct.pack("<Q", out.ctypes.data), struct.pack("<I", arg)))


def ptx_of(body: str, threads: int = 32) -> str:
    return HEADER.format(threads=threads) + body + "\n}\n"


def stream(out: np.ndarray, items: list, machine=B200, mode: str = "timed"):
    """items: (body, launch) pairs, each launch its own call; `out` the one registered buffer."""
    memory = GlobalMemory()
    memory.register(out.ctypes.data, out.nbytes, "out")
    launches = [StreamLaunch(launch, ptx_of(body, launch.block[0]), call) for call, (body, launch) in enumerate(items)]
    return execute_stream(launches, memory, mode=mode, machine=machine, step_budget=2_000_000)


# every thread counts to %r1, then stores the count at out[%tid]
LOOP = """
	mov.u32 %r4, 0;
$L_loop:
	add.s32 %r4, %r4, 1;
	setp.lt.s32 %p1, %r4, %r1;
	@%p1 bra $L_loop;
	mov.u32 %r3, %r4;
""" + STORE_R3


def test_consecutive_grids_without_pdl_are_a_launch_gap_apart():
    """Grid 2 (no PDL attribute) starts launch_gap_us after grid 1 completed (its CTA exited and its store
    went through HBM); the stream's time per call is then exactly the launch gap plus the span, the
    single-call formula's figure."""
    out = np.zeros(32, np.int32)
    result = stream(out, [(LOOP, launch_of(out, 50)), (LOOP, launch_of(out, 50)), (LOOP, launch_of(out, 50))])
    first, second, third = (s.timing for s in result.launches)
    assert (out == 50).all()
    assert second["start_us"] == pytest.approx(first["end_us"] + B200.launch_gap_us)
    assert third["start_us"] == pytest.approx(second["end_us"] + B200.launch_gap_us)
    assert result.timing["stream_us"] == pytest.approx(first["board_us"])
    assert result.timing["call_gaps_us"] == pytest.approx([B200.launch_gap_us + first["kernel_us"]] * 2)


# Grid A: launch_dependents first (TRIGGER), then a long count, then out[0] = 42 by thread 0.
PRODUCER = """
	TRIGGER
	mov.u32 %r4, 0;
$L_loop:
	add.s32 %r4, %r4, 1;
	setp.lt.s32 %p1, %r4, %r1;
	@%p1 bra $L_loop;
	setp.ne.s32 %p2, %r2, 0;
	@%p2 bra $L_done;
	mov.u32 %r3, 42;
	st.global.u32 [%rd1], %r3;
$L_done:
	ret;
"""
# Grid B: griddepcontrol.wait (WAIT), then out[1 + tid] = out[0].
CONSUMER = """
	WAIT
	ld.global.cg.u32 %r3, [%rd1];
	add.s64 %rd1, %rd1, 4;
""" + STORE_R3


def pdl_pair(trigger: bool = True, wait: bool = True, pdl: bool = True, count: int = 2000):
    out = np.zeros(64, np.int32)
    producer = PRODUCER.replace("TRIGGER", "griddepcontrol.launch_dependents;" if trigger else "")
    consumer = CONSUMER.replace("WAIT", "griddepcontrol.wait;" if wait else "")
    result = stream(out, [(producer, launch_of(out, count)), (consumer, launch_of(out, pdl=pdl))])
    return out, result


def test_with_pdl_the_next_grid_starts_on_free_sms_and_its_wait_holds_it_until_the_first_completes():
    """The consumer grid carries the PDL attribute and the producer triggers at its start: the consumer's CTA
    starts on a free SM launch_gap_pdl_us after the trigger, long before the producer ends; its
    griddepcontrol.wait holds it until the producer completed, and the load after it sees the producer's
    store. Without the wait (a planted defect) the load runs before the store and reads 0."""
    out, result = pdl_pair()
    producer, consumer = (s.timing for s in result.launches)
    clock = result.clock
    assert consumer["start_us"] == pytest.approx(B200.launch_gap_pdl_us, abs=0.01)
    assert consumer["start_us"] < producer["end_us"] / 4
    assert clock.sm_of[result.launches and clock.states[1].grid.ctas[0]] != clock.sm_of[clock.states[0].grid.ctas[0]]
    assert consumer["end_us"] > producer["end_us"]  # held until the producer completed
    assert (out[1:33] == 42).all()
    out, _ = pdl_pair(wait=False)
    assert (out[1:33] == 0).all()


def test_pdl_waits_for_every_cta_to_trigger_or_exit_and_without_the_attribute_for_completion():
    """Without launch_dependents, the PDL launch goes launch_gap_pdl_us after the producer's CTA exited; a
    launch without the PDL attribute goes launch_gap_us after the producer completed, whatever it triggered."""
    _, result = pdl_pair(trigger=False)
    producer, consumer = (s.timing for s in result.launches)
    assert consumer["start_us"] == pytest.approx(producer["last_cta_end_us"] + B200.launch_gap_pdl_us, abs=0.01)
    _, result = pdl_pair(pdl=False)
    producer, consumer = (s.timing for s in result.launches)
    assert consumer["start_us"] == pytest.approx(producer["end_us"] + B200.launch_gap_us, abs=0.01)


def test_the_board_figure_counts_the_first_call_once_among_the_flushs_calls():
    """The board times 15 calls behind one start event recorded after its flush kernel (eval.py): the first
    call starts a launch gap after that event and, with nothing before it to overlap, runs its whole span;
    each later call adds only the steady gap. The board figure is that mean: with PDL, where the calls overlap
    and the steady gap is shorter than one call alone, it lies above the steady gap by the first call's excess
    over 15; without PDL (every call a launch gap and a span) the two are the same."""
    out = np.zeros(64, np.int32)
    producer = PRODUCER.replace("TRIGGER", "griddepcontrol.launch_dependents;")
    calls = [(producer, launch_of(out, 3000, pdl=call > 0)) for call in range(4)]
    result = stream(out, calls)
    timing = result.timing
    first = B200.launch_gap_us + timing["call_end_us"][0]
    assert timing["board_mean_us"] == pytest.approx((first + 14 * timing["stream_us"]) / 15)
    assert first > timing["stream_us"] + 0.1  # the calls overlap: the first call alone is longer
    assert timing["board_mean_us"] > timing["stream_us"]
    plain = stream(out, [(LOOP, launch_of(out, 50)) for _ in range(4)]).timing
    assert plain["board_mean_us"] == pytest.approx(plain["stream_us"])


TWO_SMS = B200.replace("two SMs", sm_count=2)


def test_two_ctas_share_an_sm_only_when_shared_memory_and_threads_allow():
    """CTAs on two SMs: with 100 KiB of shared memory each, two fit an SM and four start at once; with 150
    KiB the third and fourth wait for the first two to exit. With 768 threads each (2048 per SM), two fit an
    SM and the fifth and sixth wait."""
    out = np.zeros(2048, np.int32)

    def starts(shared, threads=32, ctas=4):
        result = stream(out, [(LOOP, launch_of(out, 200, ctas=ctas, shared=shared, threads=threads))],
                        machine=TWO_SMS)
        clock = result.clock
        grid = clock.states[0].grid.ctas
        return [clock.cta_start[c] for c in grid], [clock.cta_end[c] for c in grid], [clock.sm_of[c] for c in grid]

    start, _, sms = starts(100 * 1024)
    assert max(start) < 10 and sms == [0, 1, 0, 1]
    start, end, sms = starts(150 * 1024)
    assert sms == [0, 1, 0, 1] and min(start[2:]) >= min(end[:2])
    start, end, sms = starts(1024, threads=768, ctas=6)
    assert max(start[:4]) < 10 and sms[:4] == [0, 1, 0, 1] and min(start[4:]) >= min(end[:4])


def test_placement_spreads_ctas_over_the_least_loaded_sms():
    """Small CTAs that would all fit on SM 0 go to one SM each (first-fit stacked them on SM 0); clusters of
    two go to even/odd pairs; a second CTA lands on an SM only once every SM holds one."""
    out = np.zeros(64, np.int32)
    result = stream(out, [(LOOP, launch_of(out, 10, ctas=6))])
    clock = result.clock
    assert [clock.sm_of[c] for c in clock.states[0].grid.ctas] == [0, 1, 2, 3, 4, 5]
    result = stream(out, [(LOOP, launch_of(out, 10, ctas=4, cluster=2))])
    clock = result.clock
    assert [clock.sm_of[c] for c in clock.states[0].grid.ctas] == [0, 1, 2, 3]
    result = stream(out, [(LOOP, launch_of(out, 10, ctas=3))], machine=TWO_SMS)
    clock = result.clock
    assert [clock.sm_of[c] for c in clock.states[0].grid.ctas] == [0, 1, 0]


# One warp allocates %r1 columns of tensor memory, stamps %clock into out[ctaid], counts to 300, frees them.
TMEM = """
	mov.u32 %r5, %ctaid.x;
	tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r20], COLUMNS;
	mov.u32 %r3, %clock;
	mov.u32 %r4, 0;
$L_loop:
	add.s32 %r4, %r4, 1;
	setp.lt.s32 %p1, %r4, 300;
	@%p1 bra $L_loop;
	ld.shared.u32 %r6, [%r20];
	tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r6, COLUMNS;
	tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;
	mul.wide.u32 %rd2, %r5, 4;
	add.s64 %rd3, %rd1, %rd2;
	setp.ne.s32 %p2, %r2, 0;
	@%p2 bra $L_done;
	st.global.u32 [%rd3], %r3;
$L_done:
	ret;
"""


def test_a_tensor_memory_allocation_waits_until_another_cta_on_the_sm_frees_the_columns():
    """Two CTAs on one SM: 256 columns each fit its 512 together, both allocate at once; 512 each do not,
    and the second's tcgen05.alloc returns only after the first's dealloc (PTX ISA: alloc blocks until the
    columns are available)."""
    one_sm = B200.replace("one SM", sm_count=1)
    stamps = {}
    for columns in (256, 512):
        out = np.zeros(32, np.int32)
        result = stream(out, [(TMEM.replace("COLUMNS", str(columns)), launch_of(out, ctas=2))], machine=one_sm)
        clock = result.clock
        ctas = clock.states[0].grid.ctas
        stamps[columns] = (sorted(int(x) for x in out[:2]), sorted(clock.cta_end[c] for c in ctas))
    (a, b), _ = stamps[256]
    assert abs(a - b) < 50
    (a, b), (first_end, _) = stamps[512]
    assert b > first_end - 50 and b - a > 300 * 2 * B200.cost_alu


TMA_WORDS = 4096  # the tensor after the map: 128 x 128 bytes
# out[0..31] holds the tensor map (at the buffer's start, 64-byte aligned); thread 0 prefetches the box at
# (0, 0) to L2 (PREFETCH), sleeps %r1 ns, then TMA-loads the same box and stamps the cycles the load took
# into out[32]. Shared memory: the mbarrier at 0, the box at 1024.
TMA_LOAD = """
	setp.ne.s32 %p2, %r2, 0;
	@%p2 bra $L_done;
	mov.u32 %r7, 0;
	mbarrier.init.shared.b64 [%r20], 1;
	PREFETCH
	nanosleep.u32 %r1;
	add.u32 %r21, %r20, 1024;
	mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r20], 4096;
	mov.u32 %r8, %clock;
	cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r21], [%rd1, {%r7, %r7}], [%r20];
$L_wait:
	mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r20], 0;
	@!%p3 bra $L_wait;
	mov.u32 %r9, %clock;
	sub.s32 %r3, %r9, %r8;
	st.global.u32 [%rd1+128], %r3;
$L_done:
	ret;
"""
PREFETCH_TENSOR = "cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%rd1, {%r7, %r7}];"
PREFETCH_BULK = "add.s64 %rd5, %rd1, 4096;\n\tcp.async.bulk.prefetch.L2.global [%rd5], 4096;"


def aligned_words(count: int, alignment: int = 1024) -> np.ndarray:
    raw = np.zeros(4 * count + alignment, np.uint8)
    skip = -raw.ctypes.data % alignment
    return raw[skip:skip + 4 * count].view(np.int32)


def tma_load(prefetch: str, sleep_ns: int, mode: str = "timed"):
    out = aligned_words(TMA_WORDS + 4096 // 4)
    tensor = out.ctypes.data + 4096
    out[:32] = np.frombuffer(_encode_map(dims=(128, 128), strides=(128,), box=(64, 64), address=tensor).raw,
                             np.int32)
    result = stream(out, [(TMA_LOAD.replace("PREFETCH", prefetch), launch_of(out, sleep_ns, shared=8192))], mode=mode)
    return (int(out[32]), result.launches[0].timing)


def test_a_prefetched_box_is_an_l2_hit_for_the_tma_load_after_it():
    """cp.async.bulk.prefetch.tensor brings the box into L2 through HBM: a TMA load of it 2 us later is an L2
    hit (the L2 latency, not a miss's); right after the prefetch it still hits, but waits for the bytes in
    flight (about a miss's latency). The 1-D cp.async.bulk.prefetch of the same bytes is another box (it
    matches a 1-D bulk load's): the tensor load still misses."""
    missed, timing = tma_load("", 2000)
    assert timing["l2_hits"] == 0 and missed >= B200.tma_hbm_latency
    hit, timing = tma_load(PREFETCH_TENSOR, 2000)
    assert timing["l2_hits"] == 1 and timing["prefetched_mb"] == pytest.approx(4096 / 1e6)
    # the wait's end: the L2 latency and the warp's wake-up after the phase completes, against a miss's HBM trip
    assert hit <= B200.tma_l2_latency + B200.wake_latency + 2 * B200.latency_mbarrier
    assert missed >= B200.tma_hbm_latency + B200.wake_latency
    in_flight, timing = tma_load(PREFETCH_TENSOR, 0)
    assert timing["l2_hits"] == 1 and hit < in_flight <= missed
    _, timing = tma_load(PREFETCH_BULK, 2000)
    assert timing["l2_hits"] == 0 and timing["prefetched_mb"] == pytest.approx(4096 / 1e6)


def test_a_prefetch_is_checked_as_a_load_and_does_nothing_else():
    """Eager mode: the prefetch leaves memory alone and the load after it reads the box; a prefetch with the
    wrong number of coordinates, or a 1-D one at an address not 16-byte aligned, is an error at issue."""
    stamp, _ = tma_load(PREFETCH_TENSOR, 0, mode="eager")
    with pytest.raises(EmulatorError, match="coordinates"):
        tma_load("cp.async.bulk.prefetch.tensor.1d.L2.global.tile [%rd1, {%r7}];", 0, mode="eager")
    with pytest.raises(EmulatorError, match="misaligned"):
        tma_load("add.s64 %rd5, %rd1, 4100;\n\tcp.async.bulk.prefetch.L2.global [%rd5], 4096;", 0, mode="eager")


def test_a_single_launch_is_a_stream_of_one():
    """execute() is a stream of one launch: the same figures, no stream time per call."""
    out = np.zeros(32, np.int32)
    memory = GlobalMemory()
    memory.register(out.ctypes.data, out.nbytes, "out")
    single = execute(launch_of(out, 20), ptx_of(LOOP), memory, mode="timed", step_budget=100_000)
    result = stream(out, [(LOOP, launch_of(out, 20))])
    assert single.timing == result.launches[0].timing
    assert result.timing["stream_us"] is None and result.timing["calls"] == 1


def test_nvidias_kernel_as_three_calls_is_its_single_call_time_three_times(nvidia_example):
    """NVIDIA's kernel (no PDL) as a stream of 3 calls on 3 inputs: each call starts a launch gap after the one
    before completed, so every gap between completions is the single-call formula's time (launch gap + span),
    and every call's output is checked."""
    done = subprocess.run([sys.executable, "tools/emulate.py", "nvidia", "--no-races", "--time", "--mnk", "256,256,512",
                           "--clusters", "2", "--calls", "3"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines[-1].startswith("PASS"), done.stdout[-3000:] + done.stderr[-3000:]
    timing = timing_of(lines)
    assert timing["calls"] == 3 and not timing["pdl"]
    assert timing["call_gaps_us"] == pytest.approx([timing["formula_us"]] * 2, rel=1e-3)
    assert timing["stream_us"] >= timing["kernel_us"]
    assert "simulated " + f"{timing['stream_us']:.2f} us (stream of 3 calls; single-call formula" in lines[-1]
    assert timing["board_mean_us"] == pytest.approx(timing["stream_us"], rel=1e-3)  # no PDL: every call as the first
