"""The timed emulator against measured board means: per case the measured and simulated means, the error,
and whether the case was used to fit a constant or held out; then the held-out RMS error, the worst case,
and whether every ranking of two configurations of one shape came out right.

    python tools/validate_timing.py MEASURED [--arch sm_90a|sm_100a] [--fit-cases 1,3,...] [--markdown]
    python tools/validate_timing.py --flashinfer-anchors          # FlashInfer's published B200 points

MEASURED: a CSV (`case,config,mean_us`, header first) or a JSON list of {"case", "config", "mean_us"}. A
case is `task N` (task.yml's benchmark N), `spec N` (line N of tools/timing_validation.spec) or a spec
line itself; config is an SM100_CONFIG text ("shipped", "shipped,jobs=weight_blocks"). `--from-eval
FILE:CASES:CONFIG` reads `python eval.py benchmark` output instead (CASES: "task" or "spec": which list
its row numbers index), repeatable.

Fitting (issue 24: a constant fitted to measured times is fitted on a subset and tested on the rest): the
launch gap per call (`launch_gap_us`, or `launch_gap_pdl_us` when the kernel uses PDL) is the one constant
fitted, additively, to minimise the relative error over `--fit-cases` (row numbers of MEASURED, from 1;
default: none, every case held out). Every other constant is the machine description's.

How the lead produces MEASURED on the H200 (eval.py's output, the board's protocol): see BENCHMARKS.md,
"Timed emulator: validation", for the device command.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
SPEC_FILE = ROOT / "tools" / "timing_validation.spec"

# FlashInfer's masked grouped NVFP4 GEMM on a B200, published (../shared/ANCHORS.md): flashinfer-ai/flashinfer
# PR #2503 (benchmarks/bench_cute_dsl_blockscaled_gemm.py, expected M per group) and PR #1502.
# (G, expected m per group, N, K, us, source)
FLASHINFER_ANCHORS = [
    (18, 28, 4096, 7168, 67, "PR #2503"), (18, 56, 4096, 7168, 67, "PR #2503"), (18, 113, 4096, 7168, 72, "PR #2503"),
    (18, 170, 4096, 7168, 89, "PR #2503"), (18, 227, 4096, 7168, 96, "PR #2503"), (18, 341, 4096, 7168, 123, "PR #2503"),
    (18, 28, 7168, 2048, 38, "PR #2503"), (18, 56, 7168, 2048, 38, "PR #2503"), (18, 113, 7168, 2048, 41, "PR #2503"),
    (18, 170, 7168, 2048, 53, "PR #2503"), (18, 227, 7168, 2048, 62, "PR #2503"), (18, 341, 7168, 2048, 74, "PR #2503"),
    (9, 56, 4096, 7168, 38, "PR #2503"), (9, 56, 7168, 2048, 24, "PR #2503"), (9, 113, 4096, 7168, 44, "PR #2503"),
    (4, 128, 7168, 2048, 16, "PR #2503"), (4, 256, 4096, 7168, 30, "PR #2503"), (4, 256, 7168, 2048, 19, "PR #2503"),
    (4, 512, 4096, 7168, 50, "PR #2503"), (4, 512, 7168, 2048, 30, "PR #2503"), (4, 1024, 4096, 7168, 75, "PR #2503"),
    (4, 1024, 7168, 2048, 39, "PR #2503"), (4, 2048, 4096, 7168, 130, "PR #2503"), (4, 2048, 7168, 2048, 82, "PR #2503"),
    (6, 1024, 4096, 7168, 87, "PR #1502"),
]


def spec_of(case: str) -> str:
    """`task N`, `spec N` or a spec line -> the spec line."""
    import eval as harness

    word, _, number = case.partition(" ")
    if word == "task":
        _, benchmarks, _ = harness.load_task(ROOT / "task.yml")
        return harness._spec_line(benchmarks[int(number) - 1])
    if word == "spec":
        return [line for line in SPEC_FILE.read_text().splitlines() if line.strip()][int(number) - 1]
    return case


def read_measured(path: Path) -> list:
    text = path.read_text()
    if path.suffix == ".json":
        rows = json.loads(text)
    else:
        rows = list(csv.DictReader(text.splitlines()))
    return [(r["case"], r.get("config") or "shipped", float(r["mean_us"])) for r in rows]


def read_eval_output(argument: str) -> list:
    """FILE:CASES:CONFIG -> rows from `python eval.py benchmark`'s table (number, then the mean)."""
    path, cases, config = argument.split(":", 2)
    rows, in_table = [], False
    for line in Path(path).read_text().splitlines():
        if "mean us" in line:
            in_table = True
            continue
        match = re.match(r"^\s*(\d+)\s+([\d.]+)\s", line)
        if in_table and match:
            rows.append((f"{cases} {match[1]}", config, float(match[2])))
    return rows


def simulate(spec: str, config: str, arch: str) -> dict:
    """The timed emulator's figures for one case (emulate.py's submission route, timed)."""
    import emulate
    from emulator import driver

    driver.install()
    import emulator

    if arch == "sm_90a" and not hasattr(emulate, "run_sm90_case"):
        raise SystemExit("validate_timing.py: the sm_90a route (issue 24 item 4) is not on this branch yet: "
                         "merge it, then run again")
    args = argparse.Namespace(mode="timed", seed=0, ptx_filter=None, step_budget=None, workers=None,
                              machine={"sm_100a": "b200", "sm_90a": "h200"}[arch], timeline=None, time=True,
                              timing_only=False)
    if arch == "sm_90a":
        (word, _, message), stats = emulate.run_sm90_case(spec, config, args, emulator)
    else:
        S = emulate.load_submission(ROOT / "submission.py")
        S.SM100_CONFIG = config
        S.DEVICE = emulate.EmulatedB200(None)
        (word, _, message), stats = emulate.run_submission_case(S, spec, args, emulator)
    if word != "PASS":
        raise SystemExit(f"validate_timing.py: {spec} {config}: {word} {message}")
    return stats.timing


def fit_gap(rows: list, fit: set) -> float:
    """The additive launch-gap change minimising the relative error over the fit rows (closed form)."""
    used = [(m, s) for i, (_, _, m, s) in enumerate(rows, 1) if i in fit]
    if not used:
        return 0.0
    return sum((m - s) / m ** 2 for m, s in used) / sum(1 / m ** 2 for m, _ in used)


def report(rows: list, fit: set, markdown: bool) -> None:
    shift = fit_gap(rows, fit)
    out = []
    held = []
    for i, (case, config, measured, simulated) in enumerate(rows, 1):
        predicted = simulated + shift
        error = (predicted - measured) / measured
        role = "fitted" if i in fit else "held out"
        if i not in fit:
            held.append((error, case, config))
        out.append((str(i), case, config, f"{measured:.2f}", f"{predicted:.2f}", f"{100 * error:+.1f}%", role))
    header = ("row", "case", "config", "measured us", "simulated us", "error", "use")
    if markdown:
        print("| " + " | ".join(header) + " |\n|" + " --- |" * len(header))
        for r in out:
            print("| " + " | ".join(r) + " |")
    else:
        for r in [header, *out]:
            print(f"{r[0]:>3}  {r[1]:<10.60} {r[2]:<28} {r[3]:>11} {r[4]:>12} {r[5]:>7}  {r[6]}")
    if fit:
        print(f"fitted: launch gap {shift:+.2f} us per call on rows {sorted(fit)}")
    if held:
        rms = math.sqrt(sum(e * e for e, _, _ in held) / len(held))
        worst = max(held, key=lambda h: abs(h[0]))
        print(f"held out: {len(held)} cases, RMS error {100 * rms:.1f}%, worst {100 * worst[0]:+.1f}% "
              f"({worst[1]}, {worst[2]})")
    by_case = {}
    for case, config, measured, simulated in rows:
        by_case.setdefault(case, []).append((config, measured, simulated))
    for case, configs in by_case.items():
        for a in range(len(configs)):
            for b in range(a + 1, len(configs)):
                (ca, ma, sa), (cb, mb, sb) = configs[a], configs[b]
                right = (ma < mb) == (sa < sb)
                print(f"ranking {case}: {ca} vs {cb}: measured {ma:.2f} vs {mb:.2f}, simulated {sa:.2f} vs "
                      f"{sb:.2f}: {'right' if right else 'WRONG'}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("measured", nargs="?", type=Path)
    parser.add_argument("--from-eval", action="append", default=[], metavar="FILE:CASES:CONFIG")
    parser.add_argument("--arch", choices=("sm_90a", "sm_100a"), default="sm_90a")
    parser.add_argument("--fit-cases", default="", metavar="ROWS", help="rows (from 1) the launch gap is fitted on")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--flashinfer-anchors", action="store_true",
                        help="list FlashInfer's published B200 points and simulate them once its route is merged")
    args = parser.parse_args(argv)
    if args.flashinfer_anchors:
        import emulate

        for g, m, n, k, us, source in FLASHINFER_ANCHORS:
            print(f"G={g} m={m} N={n} K={k}: published {us} us ({source})")
        if not hasattr(emulate, "run_flashinfer"):
            print("FlashInfer's route (emulate.py flashinfer, branch groundtruth) is not on this branch yet: "
                  "merge it, then each point runs timed on the B200 description")
            return 0
        raise SystemExit("validate_timing.py: wire the merged FlashInfer route here (emulate.run_flashinfer)")
    measured = (read_measured(args.measured) if args.measured else [])
    for argument in args.from_eval:
        measured += read_eval_output(argument)
    if not measured:
        parser.error("no measured means: give MEASURED or --from-eval")
    rows = []
    for case, config, mean_us in measured:
        timing = simulate(spec_of(case), config, args.arch)
        rows.append((case, config, mean_us, timing["board_us"]))
        print(f"simulated {case} {config}: {timing['board_us']:.2f} us", flush=True)
    fit = {int(x) for x in args.fit_cases.split(",") if x.strip()}
    report(rows, fit, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
