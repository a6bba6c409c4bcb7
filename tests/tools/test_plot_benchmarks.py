"""tools/plot_benchmarks.py and `eval.py benchmark --plot`: what the picture shows, the PNG (when
matplotlib is installed; it is optional), and the one-line refusal without matplotlib."""
import math
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, require_matplotlib, run_eval

sys.path.insert(0, str(ROOT / "tools"))
import plot_benchmarks  # noqa: E402

TOOL = ROOT / "tools" / "plot_benchmarks.py"
SOL_US = {1: 18.833, 2: 10.667, 3: 2.406, 4: 1.525}


def test_series_hold_speed_of_light_the_published_entries_and_the_measured_times():
    means, medians = {1: 120.0, 2: 60.0, 3: 30.0, 4: 20.0}, {1: 110.0, 2: 59.0, 3: 29.0, 4: 19.0}
    series = {s.label: s.points for s in plot_benchmarks.plot_series(means, medians, SOL_US, "H200")}
    sol = series["speed of light (B200, 1.5 GHz)"]
    assert sol[:4] == sorted(SOL_US.items())
    assert sol[4][0] == plot_benchmarks.GEOMEAN_COLUMN and sol[4][1] == pytest.approx(5.211, abs=0.001)
    gau = series["gau-nernst v6b (CUDA), B200"]
    assert [t for _, t in gau[:4]] == [27.9, 19.4, 8.48, 6.43]
    assert gau[4][1] == pytest.approx(plot_benchmarks.BEST_KNOWN_GEOMEAN_US, abs=0.05)
    assert [t for _, t in series["Nareg Amirian Megan sub_v6_2_3 (CUDA), B200"][:4]] == [38.3, 24.9, 12.8, 9.1]
    assert [t for _, t in series["teelaitila (CuTe DSL), B200"][:4]] == [40.4, 28.3, 14.2, 11.0]
    assert series["H200, mean"][:4] == sorted(means.items())
    assert series["H200, mean"][4][1] == pytest.approx(math.exp(sum(map(math.log, means.values())) / 4))
    assert series["H200, median"][:4] == sorted(medians.items())


def test_a_partial_run_has_no_geomean_point():
    series = plot_benchmarks.plot_series({4: 20.0}, None, SOL_US, "run")
    assert series[-1].label == "run" and series[-1].points == [(4, 20.0)]


def test_the_tool_writes_a_png(tmp_path):
    require_matplotlib()
    out = tmp_path / "bench.png"
    done = subprocess.run([sys.executable, str(TOOL), str(out), "--times", "111.3,59.6,31.6,17.7", "--label", "H200"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_the_tool_without_matplotlib_says_so_in_one_line(tmp_path, without_matplotlib):
    done = subprocess.run([sys.executable, str(TOOL), str(tmp_path / "x.png"), "--times", "1,2,3,4"],
                          capture_output=True, text=True, env=without_matplotlib, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == "plot_benchmarks.py needs matplotlib, which is not installed (pip install matplotlib)"


def test_eval_benchmark_plot_without_matplotlib_refuses_before_benchmarking(harness_dir, without_matplotlib):
    (harness_dir / "tools").mkdir()
    shutil.copy(TOOL, harness_dir / "tools" / "plot_benchmarks.py")
    done = run_eval(harness_dir, "benchmark", "--plot", "out.png", env=without_matplotlib)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == "eval.py: --plot needs matplotlib, which is not installed (pip install matplotlib)"


def test_a_missing_output_folder_is_one_line_in_the_tool_and_in_eval(tmp_path, harness_dir):
    done = subprocess.run([sys.executable, str(TOOL), str(tmp_path / "no" / "x.png"), "--times", "1,2,3,4"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == f"plot_benchmarks.py: no folder {tmp_path / 'no'} to write x.png into"
    done = run_eval(harness_dir, "benchmark", "--plot", "no/x.png")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == "eval.py: --plot: no folder no to write x.png into"


def test_times_given_by_hand_are_labelled_as_such():
    options = plot_benchmarks.make_parser().parse_args(["x.png", "--times", "1,2,3,4"])
    series = plot_benchmarks.plot_series(options.times, None, SOL_US, options.label)
    assert series[-1].label == "times given with --times"
