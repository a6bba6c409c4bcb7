"""custom_kernel where callers differ from the board's harness: inputs on a device other than the
current one, a side stream, two threads at once, a CUDA graph replayed on new inputs, and many shapes
in one process. Every check is against reference.py on fresh random inputs, with each c poisoned
(NaN) first, so an output that was not written fails. GPU only: without a supported GPU (B200 or
H100/H200) every test skips.
"""
import random
import threading
import time

import pytest
import torch

import reference
import submission
from conftest import expected, poisoned


def _supported_gpu() -> bool:
    if not torch.cuda.is_available():
        return False
    major, minor = torch.cuda.get_device_capability()
    return major == 10 or (major, minor) == (9, 0)


pytestmark = pytest.mark.skipif(not _supported_gpu(), reason=f"needs a {submission.SUPPORTED_GPUS} GPU")

SHAPE = ((40, 200), (256, 384), (512, 256))  # M, N, K per group: partial M tiles, two N and K sizes


def make_inputs(m, n, k, seed):
    return reference.generate_input(m=m, n=n, k=k, g=len(m), seed=seed)


def assert_matches(outputs, wanted):
    assert len(outputs) == len(wanted)
    for g, (out, ref) in enumerate(zip(outputs, wanted)):
        # check_implementation's tolerance; a NaN left in c fails
        torch.testing.assert_close(out, ref, rtol=1e-3, atol=1e-3, msg=lambda m, g=g: f"group {g}: {m}")


def overwrite_inputs(data, source):
    """Copy source's a, b and reordered scales into data's tensors, in place (on the current stream):
    same addresses, new values. Byte views, since copy_ does not take every FP4/FP8 dtype."""
    for (a, b, _), (sa, sb, _) in zip(data[0], source[0]):
        a.view(torch.uint8).copy_(sa.view(torch.uint8))
        b.view(torch.uint8).copy_(sb.view(torch.uint8))
    for pair, source_pair in zip(data[2], source[2]):
        for t, s in zip(pair, source_pair):
            t.view(torch.uint8).copy_(s.view(torch.uint8))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_inputs_on_a_device_other_than_the_current_one():
    with torch.cuda.device(1):
        data = make_inputs(*SHAPE, seed=21)
        wanted = expected(data)
        poisoned(data)
        torch.cuda.synchronize()
    assert torch.cuda.current_device() == 0 and data[0][0][0].device == torch.device("cuda", 1)
    outputs = submission.custom_kernel(data)
    torch.cuda.synchronize(1)
    assert all(out.device == torch.device("cuda", 1) for out in outputs)
    assert_matches(outputs, wanted)


def test_a_call_on_a_side_stream_runs_on_that_stream():
    """The side stream first sleeps, then writes new inputs: a kernel launched on any other stream
    would read the old ones."""
    data, fresh = make_inputs(*SHAPE, seed=22), make_inputs(*SHAPE, seed=23)
    wanted = expected(fresh)
    submission.custom_kernel(data)  # plans (and compiles) this signature outside the timed race
    poisoned(data)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)  # ~50 ms of GPU clock cycles
        overwrite_inputs(data, fresh)
        outputs = submission.custom_kernel(data)
    side.synchronize()
    assert_matches(outputs, wanted)


def test_two_threads_calling_at_once():
    """Same shape signature, so both threads share one plan; each thread, on its own stream, poisons
    its c, calls and checks, many times, with the calls released together."""
    inputs = [make_inputs(*SHAPE, seed=24), make_inputs(*SHAPE, seed=25)]
    wanted = [expected(data) for data in inputs]
    submission.custom_kernel(inputs[0])  # compile once, before the threads
    torch.cuda.synchronize()
    start, errors = threading.Barrier(2), []

    def worker(data, want):
        try:
            stream = torch.cuda.Stream()
            for _ in range(20):
                with torch.cuda.stream(stream):
                    poisoned(data)
                    start.wait()
                    outputs = submission.custom_kernel(data)
                stream.synchronize()
                assert_matches(outputs, want)
        except Exception as error:  # reported by the main thread; the other thread stops waiting
            errors.append(error)
            start.abort()

    threads = [threading.Thread(target=worker, args=pair) for pair in zip(inputs, wanted)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    assert not errors, errors[0]


def test_calls_on_two_streams_share_one_plan_safely():
    """Same shape on two streams at once. On Hopper the plan's fp16 token scratch is one buffer, so
    the second stream's call must wait on the GPU for the first's kernels, still queued behind a
    sleep: 10 ms after both calls the second has not finished (its own kernels take microseconds)."""
    first, second = make_inputs(*SHAPE, seed=29), make_inputs(*SHAPE, seed=30)
    wanted = [expected(first), expected(second)]
    submission.custom_kernel(first)  # plan and compile outside the race
    poisoned(first)
    poisoned(second)
    streams = torch.cuda.Stream(), torch.cuda.Stream()
    for stream in streams:
        stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(streams[0]):
        torch.cuda._sleep(200_000_000)  # ~100 ms of GPU clock cycles
        outputs = [submission.custom_kernel(first)]
    with torch.cuda.stream(streams[1]):
        outputs.append(submission.custom_kernel(second))
        second_done = torch.cuda.Event()
        second_done.record()
    time.sleep(0.01)
    if torch.cuda.get_device_capability() == (9, 0):
        assert not second_done.query(), "the second stream's call did not wait for the first's"
    torch.cuda.synchronize()
    for got, want in zip(outputs, wanted):
        assert_matches(got, want)


def test_a_cuda_graph_recomputes_on_every_replay():
    data = make_inputs(*SHAPE, seed=26)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture: plan and compile
        submission.custom_kernel(data)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = submission.custom_kernel(data)
    for seed in (27, 28):
        fresh = make_inputs(*SHAPE, seed=seed)
        wanted = expected(fresh)
        overwrite_inputs(data, fresh)
        poisoned(data)
        graph.replay()
        torch.cuda.synchronize()
        assert_matches(outputs, wanted)


def test_twelve_random_shapes_in_one_process():
    rng = random.Random(2026)
    for case in range(12):
        groups = rng.choice((1, 2, 3, 4, 5, 8))
        m = tuple(rng.randint(1, 400) for _ in range(groups))
        n = tuple(128 * rng.randint(1, 8) for _ in range(groups))
        k = tuple(256 * rng.randint(1, 8) for _ in range(groups))
        data = make_inputs(m, n, k, seed=100 + case)
        wanted = expected(data)
        outputs = submission.custom_kernel(poisoned(data))
        torch.cuda.synchronize()
        for out, (_, _, c) in zip(outputs, data[0]):
            assert out.data_ptr() == c.data_ptr(), "must return the given c"
        assert_matches(outputs, wanted)
