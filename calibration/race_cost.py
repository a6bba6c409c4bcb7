"""What the race detector costs: CPU seconds of emulated submission cases with and without `--races`.

    python calibration/race_cost.py [--config shipped] [--workers W] [--mode eager|adversarial] [--seed S]
        [--reps N] [--tests] [--spec SPEC ...] [--profile FILE]

Each case runs through tools/emulate.py's own path (run_submission_case: the submission's host path, the
emulator, the reference check) in this one process: first once to compile, then N times off and N times on,
alternating. Printed per case, off -> on (ratio): the median CPU seconds (time.process_time) of the whole case
(inputs, host path, emulator, reference check) and of the emulator's part (Emulator.run_pending: the PTX
read, the grid built and run), and the wall seconds of the grid's run alone (RunStats.seconds). `--tests` adds
task.yml's ten tests (eval.py test's cases) at the given worker count (default: a B200's). `--profile FILE`
writes a cProfile of the cases' detector-on runs (pstats format) to FILE. NumPy's and torch's thread pools
are held to one thread: the MMA's matrix products otherwise swing with the load of a shared machine.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse
import cProfile
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def task_tests() -> list[str]:
    import yaml

    tests = yaml.safe_load((ROOT / "task.yml").read_text())["tests"]
    return ["; ".join(f"{k}: {v}" for k, v in t.items()) for t in tests]


def _figures(med: dict) -> str:
    off, on = med[False], med[True]
    return " | ".join(f"{name} {a:.2f} -> {b:.2f} s (x{b / a:.2f})" for name, a, b in
                      zip(("case", "emulator", "grid"), off, on))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="shipped")
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--mode", default="eager", choices=("eager", "adversarial"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--tests", action="store_true", help="task.yml's tests")
    p.add_argument("--spec", action="append", default=[])
    p.add_argument("--profile", type=Path, default=None)
    args = p.parse_args(argv)
    specs = args.spec + (task_tests() if args.tests else [])
    if not specs:
        p.error("no case: --spec SPEC or --tests")

    import torch

    torch.set_num_threads(1)
    from emulator import driver

    driver.install()
    import emulator

    spec = importlib.util.spec_from_file_location("emulate", ROOT / "tools" / "emulate.py")
    emulate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(emulate)
    emulate.silence_dsl_deprecation()
    S = emulate.load_submission(ROOT / "submission.py")
    S.SM100_CONFIG = args.config
    S.DEVICE = emulate.EmulatedB200(args.workers)

    emulated = [0.0]
    run_pending = emulator.Emulator.run_pending

    def timed_run_pending(self, *a, **k):
        start = time.process_time()
        try:
            return run_pending(self, *a, **k)
        finally:
            emulated[0] += time.process_time() - start

    emulator.Emulator.run_pending = timed_run_pending
    profiler = cProfile.Profile() if args.profile else None

    def case(text: str, races: bool) -> tuple:
        run_args = SimpleNamespace(mode=args.mode, seed=args.seed, ptx_filter=None, races=races, step_budget=None,
                                   calls=1, timing_only=False)
        emulated[0] = 0.0
        start = time.process_time()
        if profiler is not None and races:
            profiler.enable()
        (word, _, message), stats = emulate.run_submission_case(S, text, run_args, emulator)
        if profiler is not None and races:
            profiler.disable()
        if word != "PASS":
            raise SystemExit(f"{text}: {word} {message}")
        return time.process_time() - start, emulated[0], stats.seconds

    print(f"config {args.config} workers {args.workers or 'B200'} mode {args.mode} seed {args.seed}, "
          f"{args.reps} rep(s), medians, detector off -> on", flush=True)
    totals = {False: [0.0, 0.0, 0.0], True: [0.0, 0.0, 0.0]}
    for text in specs:
        case(text, False)  # compiles
        runs = {False: [], True: []}
        for _ in range(args.reps):
            for races in (False, True):
                runs[races].append(case(text, races))
        med = {r: [statistics.median(x[i] for x in v) for i in range(3)] for r, v in runs.items()}
        for r in (False, True):
            totals[r] = [t + m for t, m in zip(totals[r], med[r])]
        print(f"{text}: {_figures(med)}", flush=True)
    if len(specs) > 1:
        print(f"total: {_figures(totals)}", flush=True)
    if profiler is not None:
        profiler.dump_stats(str(args.profile))
    return 0


if __name__ == "__main__":
    sys.exit(main())
