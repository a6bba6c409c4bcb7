"""On a B200: the means that tools/b200_model.py --refit needs, for every configuration it tabulates.

    python calibration/b200_profile.py [--out b200.json] [--configs shipped,safe] [--timeout S]

Each configuration (by default b200_model.py's table: shipped, each Sm100Config switch flipped
alone, safe; --configs takes ";"-separated Sm100Config texts) runs in its own process, which sets
`submission.SM100_CONFIG` before the first custom_kernel call and times every task.yml benchmark
in eval.py's protocol (eval._run_single_benchmark, the board's: 15 inputs, outputs checked once on
clones, then up to 100 timed repeats of 15 back-to-back calls, L2 flushed before each). A process
that fails, raises or runs past --timeout (a hang: the kernel has never run) is recorded with its
error and the next configuration goes on.

The file (format "b200_profile/1"):
    {"format": "b200_profile/1", "device": ..., "torch": ..., "cutlass_dsl": ..., "date": ...,
     "runs": [{"config": "shipped", "benchmark": 1, "mean_us": 28.1, "median_us": 27.9,
               "repeats": 100, "error": null}, ...]}
mean_us (the board's statistic) is null where the run failed; error then says why.

Not recorded: per-tile clock stamps (calibration/sm90_profile.py has them on Hopper). Every column of the
B200 kernel's tile records is read on the device, so stamps would need a table of their own and a
kernel argument for it; b200_model.py --refit fits the means alone.
"""

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

DEFAULT_TIMEOUT_S = 900  # the first call of a configuration compiles its kernels (minutes on a small CPU)


def benchmark_means() -> list:
    """[{"benchmark", "mean_us", "median_us", "repeats", "error"}] of the `submission` module in
    this process, every task.yml benchmark in eval.py's protocol."""
    import eval as harness
    from utils import clear_l2_cache

    _, benchmarks, sol_us = harness.load_task(ROOT / "task.yml")
    harness.set_seed(42)
    rows = []
    for case in harness._select_cases(benchmarks, None, sol_us):
        result = harness._call_catching(harness._run_single_benchmark, case.test, False, 100, 10e9, clear_l2_cache)
        row = {"benchmark": case.number, "mean_us": None, "median_us": None, "repeats": 0, "error": None}
        if isinstance(result, list):
            summary = harness.summarize_repeats([ns / 1000 for ns in result])
            row.update(mean_us=summary.stats.mean, median_us=summary.median, repeats=summary.stats.runs)
        else:
            row["error"] = result.summary if isinstance(result, harness.Raised) else str(result)
        rows.append(row)
    return rows


def run_one(config: str) -> list:
    """The child process: `config`'s kernel on every benchmark."""
    import submission

    submission.SM100_CONFIG = config  # read when the first plan is built (submission.sm100_config)
    return [dict(row, config=config) for row in benchmark_means()]


def run_in_child(config: str, timeout_s: float, argv=("--one",)) -> list:
    """run_one(config) in a fresh process; on a failure, one error row per benchmark."""
    command = [sys.executable, str(Path(__file__).resolve()), *argv, config]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        last = done.stdout.strip().splitlines()[-1:] or [""]
        if done.returncode == 0 and last[0].startswith("["):
            return json.loads(last[0])
        error = f"exit status {done.returncode}: " + " ".join((done.stderr or done.stdout).split())[-300:]
    except subprocess.TimeoutExpired:
        error = f"HANG: no result after {timeout_s:g} s"
    return [{"config": config, "benchmark": number, "mean_us": None, "median_us": None, "repeats": 0,
             "error": error} for number in range(1, 5)]


def _versions() -> dict:
    import importlib.metadata

    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA GPU"
    return {"device": device, "torch": torch.__version__,
            "cutlass_dsl": importlib.metadata.version("nvidia-cutlass-dsl"),
            "date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="b200_profile.py", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("b200.json"), help="the file to write (default b200.json)")
    parser.add_argument("--configs", help='";"-separated Sm100Config texts (default: b200_model.py\'s table)')
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per configuration")
    parser.add_argument("--one", metavar="CONFIG", help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one)))
        return 0
    if args.configs:
        configs = [c.strip() for c in args.configs.split(";") if c.strip()]
    else:
        import b200_model

        configs = [label for label, _ in b200_model.single_flips()]
    runs = []
    for config in configs:
        rows = run_in_child(config, args.timeout)
        for row in rows:
            shown = f"{row['mean_us']:.2f} us" if row["mean_us"] is not None else f"FAIL ({row['error']})"
            print(f"{config:40s} bench {row['benchmark']}: {shown}", flush=True)
        runs += rows
    args.out.write_text(json.dumps({"format": "b200_profile/1", **_versions(), "runs": runs}, indent=1))
    print(f"written: {args.out}; next: python tools/b200_model.py --refit {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
