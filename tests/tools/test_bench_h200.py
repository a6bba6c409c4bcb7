"""tools/bench_h200.py: its pure parts and the baseline's arithmetic on the CPU, the whole tool on a GPU."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import bench_h200  # noqa: E402
import reference  # noqa: E402  (bench_h200 put the repository root on sys.path)

TOOL = ROOT / "tools" / "bench_h200.py"
REF_SUBMISSION = ROOT / "tests" / "ref_submission.py"


def run_tool(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, str(TOOL), *args], cwd=ROOT, env=env, text=True,
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=timeout)


def test_flops_of_the_benchmarks():
    _, benchmarks, _ = bench_h200.harness.load_task(ROOT / "task.yml")
    # 2 * sum(M) * N * K, since N and K are shared by the groups of each benchmark.
    assert [bench_h200.gemm_flops(b) for b in benchmarks] == [
        2 * 1024 * 4096 * 7168, 2 * 1024 * 7168 * 2048, 2 * 512 * 3072 * 4096, 2 * 512 * 4096 * 1536]
    assert bench_h200.gemm_flops({"m": (1, 2), "n": (3, 5), "k": (7, 11)}) == 2 * (21 + 110)


def test_floor_is_flops_over_rate_in_microseconds():
    assert bench_h200.floor_us(750e12 * 1e-6, 750e12) == pytest.approx(1.0)
    assert bench_h200.floor_us(2 * 1024 * 4096 * 7168, 750e12) == pytest.approx(80.17, abs=0.01)


ROWS = [bench_h200.Row(1, 8, 50.0, 56.0, 1, 223.0, "grouped_mm", 80.0),
        bench_h200.Row(4, 2, None, None, 0, 42.5, "matmul loop", 8.6)]
CONTEXT = ["device: X", "command: `python tools/bench_h200.py`"]


def test_markdown_table():
    lines = bench_h200.format_table(ROWS, CONTEXT, markdown=True).splitlines()
    assert lines[:3] == ["- device: X", "- command: `python tools/bench_h200.py`", ""]
    assert lines[3] == "| " + " | ".join(bench_h200.MARKDOWN_HEADER) + " |"
    assert lines[4] == "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    # mean, median, repeats over 2x the median; the ratios use the mean, the board's statistic
    assert lines[5] == "| 1 | 8 | 56.0 | 50.0 | 1 | 223.0 | 80.0 | 0.25 | 0.70 |"
    assert lines[6] == "| 4 | 2 | FAIL | - | - | 42.5 (matmul loop) | 8.6 | - | - |"


def test_text_table_is_aligned_and_last():
    lines = bench_h200.format_table(ROWS, CONTEXT, markdown=False).splitlines()
    assert lines[:2] == CONTEXT
    table = lines[2:]
    assert table[0].split() == ["bench", "G", "mean", "us", "median", "us", ">2x", "med", "(a)", "grouped_mm", "us",
                                "(b)", "floor", "us", "mean/(a)", "mean/(b)"]
    assert len({len(line) for line in table}) == 1  # right-aligned columns
    assert table[1].split() == ["1", "8", "56.0", "50.0", "1", "223.0", "80.0", "0.25", "0.70"]
    assert table[2].split() == ["4", "2", "FAIL", "-", "-", "42.5", "(matmul", "loop)", "8.6", "-", "-"]


def test_summary_line_gives_mean_and_median_and_flags_slow_repeats():
    summary = bench_h200.harness.summarize_repeats([300.0, 100.0, 101.0, 99.0])
    text = bench_h200._summary("submission", summary)
    first, second = text.splitlines()
    assert first.startswith("  submission: mean 150.00 ± ") and "median 100.50" in first and "4 repeats" in first
    assert second == ("    1 of 4 repeats slower than 2x the median (100.50 us): #1 300.00 us; "
                      "the mean counts them, as the board's does")
    assert "\n" not in bench_h200._summary("(a)", bench_h200.harness.summarize_repeats([1.0, 1.1, 0.9]))


def test_without_a_gpu_it_says_so_in_one_line_and_exits_2():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    done = run_tool("--only", "4", env=env, timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "needs a CUDA GPU" in done.stderr


def test_baseline_computes_the_reference_on_the_cpu():
    """Both baseline forms, on exactly dequantized inputs, match the reference (the layout is right)."""
    data = reference.generate_input(m=(40, 72, 8), n=(256,) * 3, k=(512,) * 3, g=3, seed=5)
    dense = bench_h200.dequantize_input(data)
    assert dense.a.shape == (120, 512) and dense.b.shape == (3, 512, 256)
    assert dense.a.dtype == dense.b.dtype == torch.bfloat16
    assert dense.offs.tolist() == dense.ends == [40, 112, 120]
    bench_h200.check_baseline(bench_h200.matmul_loop(dense), data)
    baseline, method, note = bench_h200.pick_baseline(dense)
    assert (method == "grouped_mm") == (baseline is bench_h200.grouped_mm), note
    bench_h200.check_baseline(baseline(dense), data)


def test_a_wrong_baseline_is_caught():
    data = reference.generate_input(m=(40, 72), n=(256,) * 2, k=(512,) * 2, g=2, seed=5)
    dense = bench_h200.dequantize_input(data)
    with pytest.raises(RuntimeError, match="disagrees with the reference"):
        bench_h200.check_baseline(bench_h200.matmul_loop(dense).flip(0), data)


def test_groups_of_different_n_are_refused():
    data = reference.generate_input(m=(40, 72), n=(128, 256), k=(256, 256), g=2, seed=5)
    with pytest.raises(ValueError, match="one N and one K"):
        bench_h200.dequantize_input(data)


def parse_markdown_table(text: str) -> list[list[str]]:
    rows = [line.strip("|").split("|") for line in text.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row] for row in rows]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.skipif(not REF_SUBMISSION.is_file(), reason="tests/ref_submission.py is absent")
def test_on_a_gpu_the_tool_times_the_reference_submission():
    done = run_tool("--submission", "tests/ref_submission.py", "--only", "4", "--repeats", "3",
                    "--markdown")
    assert done.returncode == 0, done.stdout + done.stderr
    header, separator, row = parse_markdown_table(done.stdout)
    assert header == bench_h200.MARKDOWN_HEADER and set(separator) == {"---"}
    assert row[:2] == ["4", "2"]
    mean, median, slow, baseline, floor, ratio_a, ratio_b = (float(c.split()[0]) for c in row[2:])
    assert 0 < floor < baseline and 0 < median and 0 < mean and 0 <= slow <= 3
    # The ratios come from unrounded times, the printed times are rounded to 0.1 us.
    assert ratio_a == pytest.approx(mean / baseline, rel=0.01)
    assert ratio_b == pytest.approx(mean / floor, rel=0.01)
    assert "bf16 dense matmul rate" in done.stdout and "command: `python" in done.stdout
