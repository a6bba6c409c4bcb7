"""Harness checks that need a CUDA GPU; they skip without one."""
import shutil

import pytest
import torch

from conftest import ROOT, run_eval, run_popcorn

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_local_benchmark_prints_the_table(harness_dir):
    done = run_eval(harness_dir, "benchmark", "--only", "4")
    assert done.returncode == 0, done.stdout + done.stderr
    row = next(line.split() for line in done.stdout.splitlines() if line.split()[:1] == ["4"])
    mean, median, best, worst, runs, slow, sol, ratio = row[1:9]
    assert 0 < float(best) <= float(median) <= float(worst) and float(best) <= float(mean) <= float(worst)
    assert int(runs) >= 3 and 0 <= int(slow) < int(runs)
    assert sol == "1.525" and float(ratio) == pytest.approx(float(mean) / 1.525, rel=0.01)
    if int(slow):
        assert "slower than 2x the median" in done.stdout


def test_local_benchmark_draws_the_plot(harness_dir, tmp_path):
    pytest.importorskip("matplotlib")
    (harness_dir / "tools").mkdir()
    shutil.copy(ROOT / "tools" / "plot_benchmarks.py", harness_dir / "tools" / "plot_benchmarks.py")
    done = run_eval(harness_dir, "benchmark", "--only", "4", "--plot", str(tmp_path / "bench.png"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_popcorn_benchmark_reports_stats(harness_dir):
    spec = "m: [200]; n: [128]; k: [256]; g: 1; seed: 5\n"
    done, result, _ = run_popcorn(harness_dir, "benchmark", spec)
    assert done.returncode == 0, done.stderr
    assert result["check"] == "pass" and result["benchmark-count"] == "1"
    assert int(result["benchmark.0.runs"]) >= 3
    assert 0 < float(result["benchmark.0.best"]) <= float(result["benchmark.0.mean"]) <= float(
        result["benchmark.0.worst"])
    assert {f"benchmark.0.{key}" for key in ("std", "err")} <= set(result)
