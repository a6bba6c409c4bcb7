"""Time a submission against what a Hopper user would do, on task.yml's benchmarks. Needs a CUDA GPU.

    python tools/bench_h200.py [--submission FILE] [--only N] [--repeats N] [--markdown]

Per benchmark, the same timing protocol for both contenders (eval.py's, which is the board's): 15 inputs
from reference.generate_input (seed + 42 each), then per timed repeat an L2 flush (utils.clear_l2_cache),
CUDA events around 15 back-to-back calls, elapsed / 15; --repeats timed repeats.
  submission: custom_kernel of FILE, its outputs checked once on clones with
      reference.check_implementation; then, as on the board, the timed repeats start at once, so the
      first is the first call on the original inputs. Its mean (the board's statistic) and median
      are reported, and every repeat slower than 2x the median is flagged.
  (a) torch._grouped_mm in bf16 with A and B dequantized to bf16 ahead of time, outside the timing
      (a loop of per-group torch.matmul where torch._grouped_mm is missing or refuses; the table says so);
      warm-up repeats first, then the median.
  (b) the fp16/bf16 tensor-core floor: 2 * sum(M * N * K) / the bf16 matmul rate measured in this run.
Exit status: 0 all good, 1 the submission failed on a benchmark, 2 bad use or no GPU.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import shlex
import statistics
import sys
from pathlib import Path
from typing import Callable, Optional

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# eval.py is the harness: its task reader, submission loader and helpers are the ones used here.
import eval as harness  # noqa: E402
from reference import _dequantize, check_implementation, generate_input, ref_kernel  # noqa: E402
from utils import clear_l2_cache  # noqa: E402

DEFAULT_REPEATS = 50
WARMUP_REPEATS = 3
RATE_SIZE = 8192  # torch.mm of RATE_SIZE^3 in bf16: large enough to run at the tensor cores' peak
RATE_REPEATS = 20


@dataclasses.dataclass
class Row:
    bench: int
    groups: int
    submission_us: Optional[float]  # median of the repeats; None: the submission failed
    submission_mean_us: Optional[float]  # the board's statistic
    slow_repeats: int  # repeats slower than 2x the median
    baseline_us: float
    baseline_method: str  # "grouped_mm" or "matmul loop"
    floor_us: float


# ---------------------------------------------------------------------------------------------
# Pure parts (tested on the CPU).


def gemm_flops(args: dict) -> int:
    """2 * sum(M * N * K) over the groups of a generate_input spec."""
    return 2 * sum(m * n * k for m, n, k in zip(args["m"], args["n"], args["k"]))


def floor_us(flops: int, rate_flops_per_s: float) -> float:
    return flops / rate_flops_per_s * 1e6


def _ratio(numerator: Optional[float], denominator: float) -> str:
    return "-" if numerator is None else f"{numerator / denominator:.2f}"


def _cells(row: Row) -> list[str]:
    baseline = f"{row.baseline_us:.1f}" + ("" if row.baseline_method == "grouped_mm" else " (matmul loop)")
    failed = row.submission_us is None
    mean = "FAIL" if failed else f"{row.submission_mean_us:.1f}"
    median = "-" if failed else f"{row.submission_us:.1f}"
    slow = "-" if failed else str(row.slow_repeats)
    return [str(row.bench), str(row.groups), mean, median, slow, baseline, f"{row.floor_us:.1f}",
            _ratio(row.submission_mean_us, row.baseline_us), _ratio(row.submission_mean_us, row.floor_us)]


MARKDOWN_HEADER = ["bench", "G", "submission µs (mean, the board's statistic)", "submission µs (median)",
                   "repeats > 2x median",
                   "(a) torch._grouped_mm bf16, weights dequantized ahead of time, µs",
                   "(b) fp16 tensor-core floor µs = FLOPs ÷ bf16 matmul rate",
                   "submission mean / (a)", "submission mean / (b)"]
TEXT_HEADER = ["bench", "G", "mean us", "median us", ">2x med", "(a) grouped_mm us", "(b) floor us",
               "mean/(a)", "mean/(b)"]


def format_table(rows: list[Row], context: list[str], markdown: bool) -> str:
    """The short table, preceded by its context lines (device, torch, date, command, rate, notes)."""
    cells = [_cells(row) for row in rows]
    if markdown:
        lines = [f"- {line}" for line in context] + [""]
        separator = ["---"] * len(MARKDOWN_HEADER)
        lines += ["| " + " | ".join(r) + " |" for r in [MARKDOWN_HEADER, separator] + cells]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in [TEXT_HEADER] + cells) for i in range(len(TEXT_HEADER))]
    lines = list(context)
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in [TEXT_HEADER] + cells]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Baseline (a): what a Hopper user with the weights already in bf16 would run.


@dataclasses.dataclass
class DenseInput:
    a: torch.Tensor  # [sum M, K] bf16: the groups' tokens, concatenated
    b: torch.Tensor  # [G, K, N] bf16: a transposed view of [G, N, K] weights, as nn.Linear keeps them
    offs: torch.Tensor  # [G] int32: where each group's rows end in `a`
    ends: list[int]  # the same on the host, for the loop (reading offs would synchronize)


def dequantize_input(data) -> DenseInput:
    """Exact bf16 copy of one generate_input result (every FP4 value times its scale fits bf16)."""
    abc_tensors, sfasfb_tensors, _, problem_sizes = data
    if len({(n, k) for _, n, k, _ in problem_sizes}) != 1:
        raise ValueError("the grouped baseline needs one N and one K for all groups")
    a = torch.cat([_dequantize(a[:, :, 0], sfa[:, :, 0], torch.bfloat16)
                   for (a, _, _), (sfa, _) in zip(abc_tensors, sfasfb_tensors)])
    b = torch.stack([_dequantize(b[:, :, 0], sfb[:, :, 0], torch.bfloat16)
                     for (_, b, _), (_, sfb) in zip(abc_tensors, sfasfb_tensors)])
    ends = torch.tensor([m for m, _, _, _ in problem_sizes]).cumsum(0)
    return DenseInput(a, b.transpose(1, 2), ends.to(device=a.device, dtype=torch.int32), ends.tolist())


def grouped_mm(x: DenseInput) -> torch.Tensor:
    return torch._grouped_mm(x.a, x.b, offs=x.offs)


def matmul_loop(x: DenseInput) -> torch.Tensor:
    out = x.a.new_empty(x.a.shape[0], x.b.shape[2])
    for group, (start, end) in enumerate(zip([0] + x.ends[:-1], x.ends)):
        torch.matmul(x.a[start:end], x.b[group], out=out[start:end])
    return out


def pick_baseline(sample: DenseInput) -> tuple[Callable[[DenseInput], torch.Tensor], str, str]:
    """(function, method name, note): torch._grouped_mm if this torch has it and it runs here."""
    if not hasattr(torch, "_grouped_mm"):
        return matmul_loop, "matmul loop", f"torch {torch.__version__} has no torch._grouped_mm"
    try:
        grouped_mm(sample)
        if sample.a.is_cuda:
            torch.cuda.synchronize()
    except RuntimeError as error:
        reason = " ".join(str(error).split())[:200]
        return matmul_loop, "matmul loop", f"torch._grouped_mm failed here ({reason})"
    return grouped_mm, "grouped_mm", f"torch._grouped_mm: {torch.ops.aten._grouped_mm.default._schema}"


def check_baseline(output: torch.Tensor, data) -> None:
    """Guard against timing a wrongly laid-out baseline: its [sum M, N] output must equal the
    reference's within bf16 rounding (the reference's is fp16 and exact up to its own rounding)."""
    expected = torch.cat([c[:, :, 0] for c in ref_kernel(harness._clone_data(data))]).float()
    error = (output.float() - expected).abs() - (1e-2 + 1e-2 * expected.abs())
    if output.shape != expected.shape or (error > 0).any():
        raise RuntimeError(f"baseline output disagrees with the reference (shape {tuple(output.shape)}"
                           f" vs {tuple(expected.shape)}): a bug in {Path(__file__).name}")


# ---------------------------------------------------------------------------------------------
# Timing (CUDA).


def time_per_call_us(call: Callable, inputs: list, repeats: int, warmup: int) -> list[float]:
    """eval.py's timed repeat (the board's), `warmup` untimed repeats first, then a fixed number
    of repeats so that mean and median are over a known count (eval.py's loop stops on its own
    criteria and times only submission.custom_kernel). One duration per timed repeat, in
    microseconds per call."""
    durations = []
    for repeat in range(warmup + repeats):
        torch.cuda.synchronize()
        clear_l2_cache()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        outputs = [call(data) for data in inputs]  # kept alive as in eval.py's loop
        end.record()
        torch.cuda.synchronize()
        del outputs
        if repeat >= warmup:
            durations.append(start.elapsed_time(end) * 1e3 / len(inputs))
    return durations


def bf16_rate() -> float:
    """Dense bf16 matmul rate of this GPU in FLOP/s: median of torch.mm at RATE_SIZE^3."""
    a, b = (torch.randn(RATE_SIZE, RATE_SIZE, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    times_ms = []
    for repeat in range(WARMUP_REPEATS + RATE_REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.mm(a, b)
        end.record()
        torch.cuda.synchronize()
        if repeat >= WARMUP_REPEATS:
            times_ms.append(start.elapsed_time(end))
    return 2 * RATE_SIZE**3 / (statistics.median(times_ms) * 1e-3)


def first_failure(inputs: list, outputs: list) -> Optional[str]:
    """reference.check_implementation's message for the first wrong output, None if all are right."""
    for data, output in zip(inputs, outputs):
        good, message = check_implementation(data, output)
        if not good:
            return message
    return None


def _summary(name: str, summary: harness.RepeatSummary) -> str:
    stats = summary.stats
    line = (f"  {name}: mean {stats.mean:.2f} ± {stats.err:.2f} us, median {summary.median:.2f}, "
            f"best {stats.best:.2f}, worst {stats.worst:.2f}, {stats.runs} repeats")
    slow = harness.describe_slow_repeats(summary)
    return line + (f"\n    {slow}" if slow else "")


def measure(case: harness.Case, repeats: int, rate: float) -> tuple[Row, str]:
    """One benchmark's row, and the note of the baseline method used."""
    custom_kernel = harness._custom_kernel()
    args = dict(case.test.args)
    inputs = []
    for _ in range(harness.NUM_ITERATIONS_PER_BENCHMARK):
        args["seed"] += 42  # as eval.py: the 15 inputs are the seeds after the spec's
        inputs.append(generate_input(**args))
    print(f"bench {case.number}: {case.test.spec}", flush=True)

    submission = None
    try:
        check_copy = harness._clone_data(inputs)
        outputs = [custom_kernel(harness._clone_data(data)) for data in inputs]
        failure = first_failure(check_copy, outputs)
        del check_copy, outputs
        if failure is None:
            # No warm-up: as on the board, the first timed repeat is the first call on these inputs.
            submission = harness.summarize_repeats(time_per_call_us(custom_kernel, inputs, repeats, warmup=0))
            print(_summary("submission", submission), flush=True)
    except Exception as error:  # a kernel for another GPU, say: the baselines are still worth having
        failure = f"custom_kernel raised {harness._describe(error)}"
    if failure is not None:
        print(f"  submission: FAIL: {failure}", flush=True)

    dense = [dequantize_input(data) for data in inputs]
    baseline, method, note = pick_baseline(dense[0])
    check_baseline(baseline(dense[0]), inputs[0])
    baseline_summary = harness.summarize_repeats(time_per_call_us(baseline, dense, repeats, WARMUP_REPEATS))
    print(_summary(f"(a) {method}", baseline_summary), flush=True)
    row = Row(case.number, case.test.args["g"],
              None if submission is None else submission.median,
              None if submission is None else submission.stats.mean,
              0 if submission is None else len(submission.slow),
              baseline_summary.median, method, floor_us(gemm_flops(case.test.args), rate))
    del inputs, dense
    torch.cuda.empty_cache()
    return row, note


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench_h200.py", description=__doc__.split("\n")[0])
    parser.add_argument("--submission", default=str(ROOT / "submission.py"), metavar="FILE",
                        help="file defining custom_kernel (default: the repository's submission.py)")
    parser.add_argument("--only", type=int, metavar="N", help="only benchmark number N (1-based)")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, metavar="N",
                        help=f"timed repeats per measurement (default {DEFAULT_REPEATS})")
    parser.add_argument("--markdown", action="store_true", help="print the table in Markdown")
    options = parser.parse_args(argv)
    if options.repeats < 1:
        parser.error("--repeats must be at least 1")
    if not torch.cuda.is_available():
        print("bench_h200.py needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    try:
        _, benchmarks, sol_us = harness.load_task(ROOT / "task.yml")
        cases = harness._select_cases(benchmarks, options.only, sol_us)
        harness.load_submission(options.submission)
    except harness.UsageError as error:
        print(f"bench_h200.py: {error}", file=sys.stderr)
        return 2
    harness.set_seed(42)

    rate = bf16_rate()
    print(f"bf16 matmul rate: {rate / 1e12:.1f} TFLOP/s", flush=True)
    rows, notes = [], []
    for case in cases:
        row, note = measure(case, options.repeats, rate)
        rows.append(row)
        if note not in notes:
            notes.append(note)

    context = [
        f"device: {harness._device_name()}; torch {torch.__version__}; "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"command: `python {shlex.join([sys.argv[0], *argv])}`",
        f"bf16 dense matmul rate: {rate / 1e12:.1f} TFLOP/s (torch.mm {RATE_SIZE}^3, median of "
        f"{RATE_REPEATS}); times: {options.repeats} repeats of 15 calls, L2 flushed before each; "
        "the submission's first repeat is its first call on the inputs (no warm-up), as on the board",
        f"submission: {harness._shown(Path(options.submission))}; (a) {'; '.join(notes)}",
    ]
    print()
    print(format_table(rows, context, options.markdown))
    return 1 if any(row.submission_us is None for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
