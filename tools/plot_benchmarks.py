"""Draw benchmark times against speed of light and the published B200 entries (needs matplotlib).

    python tools/plot_benchmarks.py OUT.png --times 111.3,59.6,31.6,17.7 [--label "H200, mean"]

One column per task.yml benchmark and one for their geometric mean (the board's ranking), time
per call in microseconds on a log scale: the given times, speed of light (from task.yml's
description: B200 at 1.5 GHz) and the times others published for B200 (see README.md, "Credits").
`python eval.py benchmark --plot OUT.png` draws the same picture from its own run, with the
median of the repeats next to their mean. Exit status 2, with one line, without matplotlib or
when OUT.png's folder does not exist.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Published B200 times, microseconds per call, benchmarks 1-4 (sources:
# gau-nernst/gpu-mode-kernels nvidia/nvfp4_group_gemm/README.md (v6b),
# NaregAmirianMegan/NVFP4_Kernels nvfp4_grouped_gemm/group_gemm_timings.txt (sub_v6_2_3, the design
# whose ladder tools/b200_model.py is calibrated on), teelaitila/nvfp4_gpumode group_gemm/worklog.md).
PUBLISHED_US = {
    "gau-nernst v6b (CUDA)": (27.9, 19.4, 8.48, 6.43),
    "Nareg Amirian Megan sub_v6_2_3 (CUDA)": (38.3, 24.9, 12.8, 9.1),
    "teelaitila (CuTe DSL)": (40.4, 28.3, 14.2, 11.0),
}
BEST_KNOWN_GEOMEAN_US = 13.1  # gau-nernst v6b; the best honest board entry was ~13.2
BENCHMARKS = (1, 2, 3, 4)
GEOMEAN_COLUMN = 5


@dataclasses.dataclass
class Series:
    label: str
    points: list[tuple[int, float]]  # (column, microseconds); columns 1-4 benchmarks, 5 geomean
    marker: str
    color: str
    size: float = 7.0
    filled: bool = True


def _geomean(values) -> float:
    values = list(values)
    return math.exp(sum(map(math.log, values)) / len(values))


def _with_geomean(times: dict[int, float]) -> list[tuple[int, float]]:
    """The benchmarks' points, plus the geomean column when all four are there."""
    points = sorted(times.items())
    if set(times) == set(BENCHMARKS):
        points.append((GEOMEAN_COLUMN, _geomean(times.values())))
    return points


def plot_series(means: dict[int, float], medians: dict[int, float] | None, sol_us: dict[int, float],
                label: str) -> list[Series]:
    """What the picture shows, as data: speed of light, the published entries, then the measured
    means (and medians, when given)."""
    series = [Series("speed of light (B200, 1.5 GHz)", _with_geomean(sol_us), "_", "black", 22)]
    colors = ("tab:green", "tab:blue", "tab:purple")
    markers = ("o", "s", "^")
    for (name, times), color, marker in zip(PUBLISHED_US.items(), colors, markers):
        series.append(Series(f"{name}, B200", _with_geomean(dict(zip(BENCHMARKS, times))), marker, color))
    series.append(Series(f"{label}, mean" if medians else label, _with_geomean(means), "D", "tab:red", 9))
    if medians:
        series.append(Series(f"{label}, median", _with_geomean(medians), "o", "tab:red", 11, filled=False))
    return series


def matplotlib_available() -> bool:
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")  # files only, no display needed
    return True


def draw(path: Path, means: dict[int, float], medians: dict[int, float] | None, sol_us: dict[int, float],
         label: str) -> list[Series]:
    """Write the picture to path (PNG); returns what it shows."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    series = plot_series(means, medians, sol_us, label)
    figure, axes = plt.subplots(figsize=(12, 5.5))
    for index, item in enumerate(series):
        offset = 0.0 if item.marker in ("_", "D") or not item.filled else 0.08 * (index - 2)
        xs = [column + offset for column, _ in item.points]
        ys = [time for _, time in item.points]
        axes.plot(xs, ys, linestyle="none", marker=item.marker, markersize=item.size, label=item.label,
                  color=item.color, markerfacecolor=item.color if item.filled else "none",
                  markeredgewidth=2 if item.marker == "_" else 1.2)
    for column, time in series[-2 if medians else -1].points:  # the measured means, written out
        axes.annotate(f"{time:.1f}", (column, time), textcoords="offset points", xytext=(8, -3), fontsize=8,
                      color="tab:red")
    axes.axhline(BEST_KNOWN_GEOMEAN_US, xmin=0.82, color="tab:green", linestyle=":", linewidth=1,
                 label=f"best known geomean, {BEST_KNOWN_GEOMEAN_US} µs")
    axes.set_yscale("log")
    # 20, not the log scale's default 2x10^1; minor ticks labelled at 2, 3 and 5 per decade only, so
    # that the labels do not crowd.
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axes.yaxis.set_minor_formatter(FuncFormatter(
        lambda value, _: f"{value:g}" if round(value / 10 ** math.floor(math.log10(value))) in (2, 3, 5) else ""))
    axes.set_xticks([*BENCHMARKS, GEOMEAN_COLUMN],
                    [f"benchmark {n}" for n in BENCHMARKS] + ["geomean\n(board's ranking)"])
    axes.set_xlim(0.5, GEOMEAN_COLUMN + 0.5)
    axes.set_ylabel("time per call, µs (log scale)")
    axes.set_title("nvfp4_group_gemm: time per call against speed of light and published B200 entries",
                   fontsize=10)
    axes.grid(axis="y", which="both", alpha=0.3)
    # Outside the axes: inside, it covered the geomean column's markers.
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return series


def _parse_times(text: str) -> dict[int, float]:
    try:
        times = [float(item) for item in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected microseconds such as 111.3,59.6,31.6,17.7, got {text!r}") from None
    if not 1 <= len(times) <= len(BENCHMARKS) or min(times) <= 0:
        raise argparse.ArgumentTypeError(
            f"expected 1 to 4 positive times (benchmarks 1, 2, ...), got {text!r}")
    return dict(zip(BENCHMARKS, times))


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="plot_benchmarks.py", description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path, metavar="OUT.png")
    parser.add_argument("--times", type=_parse_times, required=True, metavar="US,US,US,US",
                        help="microseconds per call of benchmarks 1, 2, ... "
                             "(e.g. the means of eval.py benchmark)")
    parser.add_argument("--label", default="times given with --times",
                        help="legend label of the times (say what they are: the GPU, mean or median)")
    return parser


def main(argv: list[str]) -> int:
    options = make_parser().parse_args(argv)
    if not options.output.parent.is_dir():
        print(f"plot_benchmarks.py: no folder {options.output.parent} to write {options.output.name} into",
              file=sys.stderr)
        return 2
    if not matplotlib_available():
        print("plot_benchmarks.py needs matplotlib, which is not installed (pip install matplotlib)",
              file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    import eval as harness  # the task.yml reader, for speed of light

    _, benchmarks, sol_by_shape = harness.load_task(ROOT / "task.yml")
    sol_us = {case.number: case.sol_us for case in harness._select_cases(benchmarks, None, sol_by_shape)}
    draw(options.output, options.times, None, sol_us, options.label)
    print(f"plot: {options.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
