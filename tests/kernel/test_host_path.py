"""submission.py's per-call path without a GPU (issue 21, items 8 and 9): a plan orders a call after
the previous one only when the stream changes, and the "cublas" rung hands each group's FP4 views and
pre-reordered scales to torch._scaled_mm, writing into c, with no layout conversion. The GPU side of
both is in tests/harness/test_reliability.py (races) and BENCHMARKS.md (host time)."""
import pytest
import torch

import reference
import submission
from conftest import expected, poisoned

SIZES = dict(m=(40, 200), n=(256, 384), k=(512, 256), g=2, seed=31)


class FakeDevice:
    """The DEVICE seam with a stream handle the test sets."""

    def __init__(self):
        self.handle = 7

    def capability(self, device):
        return (10, 0)

    def stream(self, device):
        return submission.StreamHandle(self.handle)


class RecordingLaunch:
    def __init__(self):
        self.args = type("Args", (), {"set_inputs": lambda self, pointers: None})()
        self.streams = []

    def __call__(self, stream):
        self.streams.append(stream.cuda_stream)


def test_a_plan_orders_a_call_after_the_previous_one_only_when_the_stream_changes(monkeypatch):
    waits = []

    class ExternalStream:
        def __init__(self, handle, device=None):
            self.handle = handle

        def wait_stream(self, other):
            waits.append((self.handle, other.handle))

    monkeypatch.setattr(submission, "DEVICE", FakeDevice())
    monkeypatch.setattr(torch.cuda, "ExternalStream", ExternalStream)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    data = reference.generate_input(**SIZES)
    tensors = submission._input_tensors(data)
    plan = submission.ShapePlan(submission.validate_inputs(data), submission._metadata(tensors), RecordingLaunch())
    for handle in (7, 7, 7, 9, 9, 7):
        submission.DEVICE.handle = handle
        plan.run(data)
    assert plan.launch.streams == [7, 7, 7, 9, 9, 7]
    assert waits == [(9, 7), (7, 9)]  # the first call has nothing to follow; same-stream calls pay nothing


def test_no_stream_is_waited_on_inside_a_graph_capture(monkeypatch):
    monkeypatch.setattr(submission, "DEVICE", FakeDevice())
    monkeypatch.setattr(torch.cuda, "ExternalStream", None)  # any use fails
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    data = reference.generate_input(**SIZES)
    plan = submission.ShapePlan(submission.validate_inputs(data), submission._metadata(submission._input_tensors(data)),
                                RecordingLaunch())
    plan.run(data)
    submission.DEVICE.handle = 9
    plan.run(data)
    assert plan.launch.streams == [7, 9]


def _scaled_mm_by_dequantizing(calls):
    """torch._scaled_mm's contract for NVFP4, computed on the CPU: a [M, K/2] and b [K/2, N] FP4
    (b column-major), flat e4m3 scales in reference.to_blocked's order, fp16 into `out`."""

    def unblock(flat, rows, k):
        blocks = flat.view(torch.uint8).view(-1, k // 64, 32, 4, 4)  # (M/128, K/64, 32, 4, 4)
        matrix = blocks.permute(0, 3, 2, 1, 4).reshape(-1, k // 16)  # row = 128 * rb + 32 * i + r
        return matrix[:rows].view(torch.float8_e4m3fn)

    def fake(a, b, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False, *, out):
        calls.append((a, b, scale_a, scale_b, out))
        m, k = a.shape[0], 2 * a.shape[1]
        assert b.stride(0) == 1 and out_dtype == torch.float16 and scale_a.dim() == scale_b.dim() == 1
        a_values = reference._dequantize(a, unblock(scale_a, m, k), torch.float64)
        b_values = reference._dequantize(b.transpose(0, 1), unblock(scale_b, b.shape[1], k), torch.float64)
        out.copy_((a_values @ b_values.T).to(torch.float16))
        return out

    return fake


def test_the_cublas_rung_gives_scaled_mm_the_fp4_views_and_the_reordered_scales_as_they_lie(monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "_scaled_mm", _scaled_mm_by_dequantizing(calls))
    monkeypatch.setattr(submission, "SM100_CONFIG", "cublas")
    monkeypatch.setattr(submission, "DEVICE", FakeDevice())
    data = reference.generate_input(**SIZES)
    wanted = expected(data)
    plan = submission._build_plan(data)
    assert isinstance(plan, submission.CublasPlan)
    plan.run(poisoned(data))
    for group, ((a, b, c), (sfa, sfb), want) in enumerate(zip(data[0], data[2], wanted)):
        torch.testing.assert_close(c, want, rtol=0, atol=0)
        got_a, got_b, scale_a, scale_b, out = calls[group]
        # views of the inputs, not copies: same storage, nothing converted per call
        assert got_a.data_ptr() == a.data_ptr() and got_b.data_ptr() == b.data_ptr() and out.data_ptr() == c.data_ptr()
        assert scale_a.data_ptr() == sfa.data_ptr() and scale_b.data_ptr() == sfb.data_ptr()
        assert scale_a.numel() == sfa.numel()


@pytest.mark.skipif(torch.cuda.is_available(), reason="generate_input's tensors are on the GPU here")
def test_the_cublas_rung_says_in_one_line_why_it_cannot_run_on_a_cpu(monkeypatch):
    monkeypatch.setattr(submission, "SM100_CONFIG", "cublas")
    data = reference.generate_input(**SIZES)
    with pytest.raises(ValueError, match=r'^SM100_CONFIG = "cublas" runs cuBLAS\'s FP4 GEMM on a B200; the inputs are on cpu$'):
        submission._build_plan(data)


def test_the_cublas_rung_says_in_one_line_why_it_cannot_run_on_hopper(monkeypatch):
    monkeypatch.setattr(submission, "SM100_CONFIG", "cublas")
    data = reference.generate_input(**SIZES)

    class Hopper(FakeDevice):
        def capability(self, device):
            return (9, 0)

    monkeypatch.setattr(submission, "DEVICE", Hopper())
    monkeypatch.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda", 0)))
    with pytest.raises(ValueError, match=r"needs a B200: cuBLAS has no FP4 GEMM on compute capability 9\.0$"):
        submission._build_plan(data)


@pytest.mark.parametrize("text, rung", [("cublas", "cublas"), (" cublas ", "cublas"), ("safe", submission.SM100_SAFE)])
def test_sm100_rung_names_cublas_or_a_configuration(text, rung):
    assert submission.sm100_rung(text) == rung


def test_a_malformed_config_line_is_one_line_naming_the_text():
    with pytest.raises(ValueError, match=r"^SM100_CONFIG = 'bogus': unknown configuration 'bogus'.* \(or 'cublas'\)$"):
        submission.sm100_rung("bogus")
    with pytest.raises(ValueError, match="builds no kernel"):
        submission.sm100_config("cublas")


# ---------------------------------------------------------------- configurations: refused, never rewritten


@pytest.mark.parametrize("text, message", [
    ("shipped,cta_group=1",
     "cta_group=1 cannot run multicast=on: set multicast=off, or cta_group=2; "
     "cta_group=1 cannot run token_variants=64/128/192: set token_variants=64/128, or cta_group=2"),
    ("shipped,multicast=off", "multicast=off cannot run cluster_pairs=2: set cluster_pairs=1, or multicast=on"),
    ("safe,cluster_pairs=2", "multicast=off cannot run cluster_pairs=2: set cluster_pairs=1, or multicast=on"),
    ("safe,token_variants=64/128/192",
     "cta_group=1 cannot run token_variants=64/128/192: set token_variants=64/128, or cta_group=2"),
])
def test_a_configuration_that_cannot_run_is_refused_in_one_line_naming_the_switches(text, message):
    """Issue 47, item 2: every row of NEEDS that a configuration breaks is named, with what to change;
    nothing is rewritten behind the user's back."""
    with pytest.raises(ValueError) as refused:
        submission.Sm100Config.parse(text)
    assert str(refused.value) == message and "\n" not in str(refused.value)
    with pytest.raises(ValueError, match=r"^SM100_CONFIG = .*: " + message.split(":")[0]):
        submission.sm100_rung(text)


def test_what_a_configuration_says_is_what_it_holds():
    """Every field parses back to what was asked: the named configurations and each with_needs flip."""
    for config in (submission.SM100_SHIPPED, submission.SM100_SAFE):
        assert submission.Sm100Config.parse(config.describe()) == config
        assert not config.unmet_needs()
    flip = submission.SM100_SHIPPED.with_needs(cta_group=1)
    assert flip.describe() == "shipped,cta_group=1,token_variants=64/128,multicast=off,cluster_pairs=1"
    assert submission.SM100_SAFE.with_needs(cluster_pairs=2).describe() == "safe,cta_group=2,multicast=on,cluster_pairs=2"
    # a change the caller made is kept: asking for both sides of a need is refused, not resolved
    with pytest.raises(ValueError, match="cta_group=1 cannot run multicast=on"):
        submission.SM100_SHIPPED.with_needs(cta_group=1, multicast=True)


@pytest.mark.parametrize("text, message", [
    ("shipped,pdl=maybe", "'pdl=maybe': pdl is on or off"),
    ("shipped,cta_group=two", "'cta_group=two': cta_group is an integer"),
    ("shipped,token_variants=64/x", "'token_variants=64/x': token_variants is token widths as 64/128"),
    ("shipped,prefetch=on", "'prefetch=on': expected field=value with a field of cta_group, token_variants, "
                            "multicast, pdl, l2_hints, epilogue, descriptors, jobs, warmers, self_warm, cluster_pairs, "
                            "lean_walk"),
    ("shipped,epilogue=tma", "epilogue must be one of ('tma_last', 'atoms'), got 'tma'"),
    ("shipped,jobs=stream", "jobs must be one of ('tiles', 'weight_blocks', 'hybrid'), got 'stream'"),
])
def test_a_malformed_or_retired_field_is_one_line(text, message):
    with pytest.raises(ValueError) as refused:
        submission.Sm100Config.parse(text)
    assert str(refused.value) == message
