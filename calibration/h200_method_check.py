"""On an H200: test the B200 model's method where hardware exists (issue 15, item 5), in one command.

    python calibration/h200_method_check.py [--out DIR]

1. `python calibration/sm90_profile.py tiles --json DIR/sm90_tiles.json`: SM cycles per tile by (wgmma N, K).
2. The Hopper kernel's means on every task.yml benchmark in eval.py's protocol (calibration/b200_profile.py's
   benchmark_means), once with its shipped schedule (sm90_kernel.SCHEDULE) and once flipped to
   weight-block jobs; each in its own process, which replaces sm90_kernel.SCHEDULE before the first
   call (no file is edited). nvidia-smi samples the SM clock every 50 ms meanwhile; the median of
   the samples taken at 90% utilization or more (the timed repeats, not the compiles) converts the
   profile's cycles to microseconds.
3. b200_model.hopper_estimate for both schedules: the same schedule code, estimate, makespan and tail
   as the B200 model, with the measured tile cycles and HOPPER_START_US (stated, not fitted). Prints
   predicted against measured means and the busiest CTA's modeled time; the profile's measured
   busiest CTA (shipped schedule only) beside it.
Everything it wrote stays in DIR (default: a new temporary folder).
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import b200_model  # noqa: E402

SCHEDULES = ("shipped", "weight_blocks")  # sm90_kernel.SCHEDULE as it is, and its jobs flipped
DEFAULT_CLOCK_MHZ = 1700.0  # used only without nvidia-smi: BENCHMARKS.md's estimate for back-to-back calls


def run_means(schedule: str) -> list:
    """The child process: the Hopper kernel's means with `schedule`."""
    import dataclasses

    import sm90_kernel

    if schedule != "shipped":
        sm90_kernel.SCHEDULE = dataclasses.replace(sm90_kernel.SCHEDULE, jobs=schedule)
    import b200_profile

    return b200_profile.benchmark_means()


def busy_clock(line: str) -> float:
    """The SM clock of one nvidia-smi sample "MHz, utilization %", 0 when the GPU was not busy."""
    try:
        clock, utilization = (float(x) for x in line.split(","))
    except ValueError:
        return 0.0
    return clock if utilization >= 90 else 0.0


def clocked_means(schedule: str) -> tuple:
    """(means rows, busy SM clock samples in MHz) of run_means(schedule) in a child process."""
    sampler = None
    try:
        sampler = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,utilization.gpu", "--format=csv,noheader,nounits",
                                    "-lms", "50"], stdout=subprocess.PIPE, text=True)
    except OSError:
        pass
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--means", schedule],
                          capture_output=True, text=True)
    samples = []
    if sampler is not None:
        sampler.terminate()
        samples = [busy_clock(line) for line in sampler.communicate()[0].splitlines()]
    if done.returncode != 0:
        raise RuntimeError(f"means of the {schedule} schedule failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]), samples


def compare(profile: dict, means: dict, clock_mhz: float, start_us=b200_model.HOPPER_START_US) -> str:
    """Predicted against measured, per schedule and benchmark; means: schedule -> rows."""
    benches = b200_model.load_benchmarks()
    measured_busiest = {b["benchmark"]: b["busiest_span_cycles"] / clock_mhz for b in profile["benchmarks"]}
    rows = []
    for schedule in SCHEDULES:
        jobs = None if schedule == "shipped" else schedule
        for row in means[schedule]:
            i = row["benchmark"]
            e = b200_model.hopper_estimate(profile, benches[i - 1].sizes, clock_mhz, jobs, start_us)
            measured = row["mean_us"]
            rows.append((schedule, i, f"{e.total_us:.2f}", "FAIL" if measured is None else f"{measured:.2f}",
                         "-" if measured is None else f"{100 * (e.total_us / measured - 1):+.1f}",
                         f"{e.busiest_us:.2f}", f"{measured_busiest[i]:.2f}" if schedule == "shipped" else "-",
                         f"{e.busy_workers}/{e.workers}"))
    header = ("schedule", "bench", "predicted mean us", "measured mean us", "error %", "busiest CTA us, modeled",
              "busiest CTA us, profiled", "busy CTAs")
    return "\n".join([f"SM clock {clock_mhz:g} MHz, start {start_us:g} us (HOPPER_START_US, stated, not fitted)",
                      "", b200_model._table(header, rows, False)])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="h200_method_check.py", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="folder for the profile and the means (default: a new temporary one)")
    parser.add_argument("--means", choices=SCHEDULES, help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args(argv)
    if args.means:
        print(json.dumps(run_means(args.means)))
        return 0
    out = args.out or Path(tempfile.mkdtemp(prefix="h200_method_check_"))
    out.mkdir(parents=True, exist_ok=True)
    profile_path = out / "sm90_tiles.json"
    subprocess.run([sys.executable, str(ROOT / "calibration" / "sm90_profile.py"), "tiles", "--json", str(profile_path)],
                   check=True)
    means, samples = {}, []
    for schedule in SCHEDULES:
        means[schedule], clocks = clocked_means(schedule)
        samples += [c for c in clocks if c > 0]
        print(f"{schedule}: " + ", ".join(f"bench {r['benchmark']} {r['mean_us'] or 'FAIL'}" for r in means[schedule]),
              flush=True)
    (out / "means.json").write_text(json.dumps({"means": means, "clock_samples_mhz": samples}, indent=1))
    clock = statistics.median(samples) if samples else DEFAULT_CLOCK_MHZ
    if not samples:
        print(f"no nvidia-smi clock samples: assuming {DEFAULT_CLOCK_MHZ:g} MHz")
    print()
    print(compare(json.loads(profile_path.read_text()), means, clock))
    print(f"\nfiles: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
