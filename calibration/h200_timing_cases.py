"""On an H200: the Hopper kernel's board-protocol means on the cases the timed emulator is validated on
(issue 24, item 5), in one command, as JSON for `calibration/validate_timing.py`.

    python calibration/h200_timing_cases.py --out FILE.json [--plan SCHEDULE:CASES ..]

Cases: task.yml's four benchmarks with the shipped schedule, benchmarks 3 and 4 with the schedule flipped
to weight-block jobs (`jobs=weight_blocks`), and every line of calibration/timing_cases.txt (shapes outside
task.yml: G 1 to 16, M 1 to 1000, N and K 1024 to 7168). Each schedule runs in its own process, which
replaces sm90_kernel.SCHEDULE before the first call (no file is edited). Each case is timed as eval.py
benchmark times it (15 inputs, L2 flushed before each timed repeat, CUDA events, mean and median).
`--plan SCHEDULE:CASES` (repeatable) runs those instead: SCHEDULE "shipped" or a job policy, CASES "task",
"task:1,2" or "extra" (e.g. `--plan shipped:task:1,2 --plan hybrid:task:1,2`: one flip side by side).
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
EXTRA_CASES = ROOT / "calibration" / "timing_cases.txt"
# (label, schedule jobs or "shipped", which cases): the flip only where the issue measured it
PLAN = (("task", "shipped", "task"), ("task", "weight_blocks", "task:3,4"), ("extra", "shipped", "extra"))


def cases(which: str) -> list:
    """[(label, TestCase)] of task.yml's benchmarks (optionally only some numbers) or the extra file."""
    import eval as harness

    if which == "extra":
        return [(f"extra {i + 1}", t) for i, t in enumerate(harness.read_spec_file(EXTRA_CASES))]
    _, benchmarks, sol_us = harness.load_task(ROOT / "task.yml")
    chosen = harness._select_cases(benchmarks, None, sol_us)
    numbers = {int(n) for n in which.split(":")[1].split(",")} if ":" in which else None
    return [(f"benchmark {c.number}", c.test) for c in chosen if numbers is None or c.number in numbers]


def measure(schedule: str, which: str) -> list:
    """The child process: every case of `which` under `schedule`, one row each."""
    import dataclasses

    import sm90_kernel

    if schedule != "shipped":
        sm90_kernel.SCHEDULE = dataclasses.replace(sm90_kernel.SCHEDULE, jobs=schedule)
    import eval as harness
    from utils import clear_l2_cache

    harness.set_seed(42)
    rows = []
    for label, test in cases(which):
        row = {"case": label, "spec": test.spec, "config": f"jobs={schedule}" if schedule != "shipped" else "shipped",
               "mean_us": None, "median_us": None, "repeats": 0, "error": None}
        result = harness._call_catching(harness._run_single_benchmark, test, False, 100, 10e9, clear_l2_cache)
        if isinstance(result, list):
            summary = harness.summarize_repeats([ns / 1000 for ns in result])
            row.update(mean_us=summary.stats.mean, median_us=summary.median, repeats=summary.stats.runs)
        else:
            row["error"] = result.summary if isinstance(result, harness.Raised) else str(result)
        rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file of the rows")
    parser.add_argument("--plan", action="append", metavar="SCHEDULE:CASES",
                        help="schedule (shipped or a job policy) and cases (task, task:1,2, extra); repeatable")
    parser.add_argument("--child", nargs=2, metavar=("SCHEDULE", "CASES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    plan = PLAN if not args.plan else tuple(("", *item.split(":", 1)) for item in args.plan)
    if args.plan:
        from submission import JOB_POLICIES

        for entry in plan:
            schedule, which = entry[1], entry[2] if len(entry) == 3 else ""
            if schedule != "shipped" and schedule not in JOB_POLICIES or which.split(":")[0] not in ("task", "extra"):
                parser.error(f"--plan {schedule}:{which}: SCHEDULE is shipped or one of {JOB_POLICIES}, CASES task[:N,..] or extra")
    if args.child:
        rows = measure(*args.child)
        args.out.write_text(json.dumps(rows))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("h200_timing_cases.py needs a CUDA GPU (the Hopper kernel is timed on hardware)", file=sys.stderr)
        return 3
    rows = []
    for _, schedule, which in plan:
        part = args.out.with_suffix(f".{schedule}.{which.replace(':', '').replace(',', '')}.json")
        done = subprocess.run([sys.executable, __file__, "--out", str(part), "--child", schedule, which])
        if done.returncode != 0:
            rows.append({"case": which, "config": schedule, "error": f"exit status {done.returncode}"})
            continue
        rows.extend(json.loads(part.read_text()))
    args.out.write_text(json.dumps(rows, indent=1))
    device = torch.cuda.get_device_name()
    print(f"{'case':<13} {'config':<20} {'mean us':>9} {'median us':>10}  ({device})")
    for row in rows:
        if row.get("error"):
            print(f"{row['case']:<13} {row['config']:<20} {row['error']}")
        else:
            print(f"{row['case']:<13} {row['config']:<20} {row['mean_us']:9.2f} {row['median_us']:10.2f}")
    return 0 if all(not row.get("error") for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
