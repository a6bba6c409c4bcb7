"""The timed emulator against measured times: per case the measured and simulated times, the error, and
whether the case was used to fit a constant or held out; then the held-out RMS error, the worst case, and
whether every ranking of two configurations of one shape came out right.

    python calibration/validate_timing.py MEASURED [--arch sm_90a|sm_100a] [--fit-cases 1,3,...] [--jobs N]
        [--timing-only] [--calls N] [--save FILE.json] [--markdown]
    python calibration/validate_timing.py --simulated FILE.json [--fit-cases ...] [--markdown]   # report saved rows
    python calibration/validate_timing.py --flashinfer-anchors [--points 1,2,..] [--jobs N] [--save FILE.json]
    python calibration/validate_timing.py --peers DIR [--versions v6b,..] [--benchmarks 1,..] [--jobs N] [--calls N]
        [--save FILE.json]                                        # the peers' published board times (issue 46)

MEASURED: the JSON that calibration/h200_timing_cases.py writes on an H200 (a list of {"case", "spec", "config",
"mean_us"}), or a CSV (`case,config,mean_us`, header first) whose case is `task N` (task.yml's benchmark N),
`spec N` (line N of calibration/timing_cases.txt) or a spec line itself; config is an SM100_CONFIG text ("shipped",
"jobs=weight_blocks"). `--from-eval FILE:CASES:CONFIG` reads `python eval.py benchmark` output instead
(CASES: "task" or "spec": which list its row numbers index), repeatable.

Each case is simulated by its own `tools/emulate.py submission --time` process (`--jobs` at once: the
emulator is single-threaded), as one call (the single-call formula's figure) or, with `--calls N`, as N
calls in one stream (the steady-state time per call; emulate.py); `--timing-only` skips the data the control flow does not read (the same
times: tests/emulator/test_emulator_clock.py). `--save` keeps the measured and simulated figures, so that a report
with other fit cases needs no second simulation (`--simulated`).

Fitting (issue 24: a constant fitted to measured times is fitted on a subset and tested on the rest): the
launch gap per call is the one constant fitted, additively, to minimise the relative error over
`--fit-cases` (row numbers, from 1; default: none, every case held out). Every other constant is the
machine description's.

`--flashinfer-anchors`: FlashInfer's masked grouped NVFP4 GEMM on a B200, published in flashinfer-ai/flashinfer
PR #2503 (benchmarks/bench_cute_dsl_blockscaled_gemm.py) and PR #1502, simulated with the B200 description
(`emulate.py flashinfer --time`, its default tactic: 128x128 MMA tile, 1x1 cluster, one CTA per SM on 148
SMs). The published figure is the kernel's own time (kineto), so it is compared with the simulated kernel
span, not the board time; its `bench_kineto` zero-fills 8 GB before every call, so each simulated call
starts with L2 dirty (`--flush-every 1`). masked_m is the benchmark's own draw: Python's `random.seed(42)`,
then per case in the script's order `int(expected_m * random.uniform(0.7, 1.3))` per group, once without
and once with autotuning; the draw without autotuning is used.

The published figures of the calibration set (these FlashInfer points, gau-nernst's ladder, teelaitila's final,
Nareg's designs) with their sources, runners, host-blocking verdicts and the proposed fit subset:
tools/data/published_b200_times.csv, loaded by calibration/published.py (load_published).

`--peers DIR`: every row of that file whose entry has a route (tools/emulate.py peer) and whose file is in DIR
(gau-nernst's as DIR/gau-nernst/submission_VERSION.py, teelaitila's as DIR/teelaitila_submissionv3.py; the files
carry no license and are not in this repository: the CSV's `code` column says where each is), simulated on its
task.yml benchmark as a stream of `--calls` calls (default 4: the board's back-to-back calls), timing only, with
the B200 description; the board time per call is compared with the published figure. The report gives each row's
error, whether the row is in the CSV's fit subset or held out, the held-out RMS and worst error, and the ladder
check: every step of a peer's ladder (a version against its parent) whose published geomean moves by more than
3% must move the same way simulated. A CuTe DSL peer runs under `--dsl-python` (its DSL version's interpreter).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SPEC_FILE = ROOT / "calibration" / "timing_cases.txt"
EMULATE = ROOT / "tools" / "emulate.py"

# (G, expected m per group, N, K, published us, source); ../shared/ANCHORS.md
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
B200_SMS = 148


# --------------------------------------------------------------------------------------------------
# measured rows
# --------------------------------------------------------------------------------------------------


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
    """[(case, spec, config, mean_us)] from h200_timing_cases.py's JSON or a CSV."""
    text = path.read_text()
    rows = json.loads(text) if path.suffix == ".json" else list(csv.DictReader(text.splitlines()))
    return [(r["case"], r.get("spec") or spec_of(r["case"]), r.get("config") or "shipped", float(r["mean_us"]))
            for r in rows]


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
            case = f"{cases} {match[1]}"
            rows.append((case, spec_of(case), config, float(match[2])))
    return rows


# --------------------------------------------------------------------------------------------------
# simulation: one emulate.py process per case
# --------------------------------------------------------------------------------------------------


def emulate_timed(arguments: list, options, python: str = sys.executable) -> dict:
    """Run `tools/emulate.py ARGUMENTS --time` with the command line's --timing-only, --set and
    --case-timeout (`options`), and return its timing figures and verdict (a verdict other than PASS, or TIMED
    under --timing-only, is an error row: its last line is kept)."""
    command = [python, str(EMULATE), *arguments, "--time"]
    command += ["--timing-only"] if options.timing_only else []
    command += ["--calls", str(options.calls)] if getattr(options, "calls", 1) > 1 else []
    for setting in options.set:
        command += ["--set", setting]
    try:
        done = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=options.case_timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"not finished in {options.case_timeout} s (--case-timeout)", "verdict": "TIMEOUT"}
    lines = done.stdout.strip().splitlines()
    timing = next((json.loads(line[len("timing: "):]) for line in lines if line.startswith("timing: ")), None)
    last = lines[-1] if lines else (done.stderr.strip().splitlines() or ["no output"])[-1]
    word = last.split()[0] if last else ""
    if timing is None or word not in ("PASS", "TIMED"):
        return {"error": last, "verdict": word}
    seconds = re.search(r"seconds=([\d.]+)", last)
    return {**timing, "verdict": word, "seconds": float(seconds[1]) if seconds else None}


def hopper_or_b200_config(config: str) -> str:
    """A config text as emulate.py's --config takes it: a bare switch is applied to the shipped one."""
    return config if config.split(",")[0] in ("shipped", "safe") else f"shipped,{config}"


def in_parallel(function, items: list, jobs: int, save: Path | None) -> list:
    """[function(item)] computed `jobs` at a time; with `save`, the rows finished so far are written after
    each one (a run cut short keeps them)."""
    results = [None] * len(items)

    def run(index):
        results[index] = function(items[index])
        if save is not None:
            save.write_text(json.dumps([r for r in results if r is not None], indent=1) + "\n")

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(run, range(len(items))))
    return results


def simulate_cases(measured: list, options) -> list:
    def one(row):
        case, spec, config, mean_us = row
        figures = emulate_timed(["submission", "--arch", options.arch, "--config", hopper_or_b200_config(config),
                                 "--spec", spec], options)
        print(f"simulated {case} {config}: " + (f"{figures['board_us']:.2f} us ({figures['seconds']} s)"
                                                 if "error" not in figures else figures["error"]), flush=True)
        return {"case": case, "spec": spec, "config": config, "measured_us": mean_us, "simulated": figures}

    return in_parallel(one, measured, options.jobs, options.save)


def flashinfer_masked_m() -> dict:
    """(G, expected m, N, K) -> masked_m as PR #2503's benchmark drew it without autotuning (module docstring)."""
    draws = random.Random(42)
    cases = [(6, 1024), (6, 512), (1, 1024), (2, 512), (4, 256)]
    for ranks in (4, 8, 16, 32, 36, 48, 72):
        for tokens in (64, 128, 256, 384, 512, 768, 1024):
            groups = 288 // ranks
            cases.append((groups, tokens * 8 // groups))
    masked = {}
    for groups, m in cases:
        for n, k in ((4096, 7168), (7168, 2048)):
            for autotune in (False, True):
                values = [int(m * draws.uniform(0.7, 1.3)) for _ in range(groups)]
                if not autotune:
                    masked.setdefault((groups, m, n, k), values)
    return masked


def simulate_flashinfer(points: list, options) -> list:
    options = argparse.Namespace(**{**vars(options), "timing_only": True})
    masked = flashinfer_masked_m()

    def one(point):
        g, m, n, k, published, source = point
        values = masked[(g, m, n, k)]
        figures = emulate_timed(["flashinfer", "--groups", str(g), "--masked-m", ",".join(map(str, values)),
                                 "--nk", f"{n},{k}", "--clusters", str(B200_SMS),
                                 # 0.6.7.post3 reads masked_m[G] (the field bug the tests catch): let it, here
                                 "--masked-m-slack", "1",
                                 # its bench_kineto zero-fills 8 GB before every call: each starts with L2 dirty
                                 "--flush-every", "1"], options)
        case = f"FlashInfer G={g} m~{m} N={n} K={k} ({source})"
        print(f"simulated {case}: " + (f"kernel {figures['kernel_us']:.2f} us ({figures['seconds']} s)"
                                       if "error" not in figures else figures["error"]), flush=True)
        simulated = dict(figures)
        if "kernel_us" in simulated:  # the published time is the kernel's (kineto): compare the kernel span
            simulated["board_us"] = simulated["kernel_us"]
        return {"case": case, "spec": f"masked_m {values}", "config": "128x128, 1x1", "measured_us": published,
                "simulated": simulated}

    return in_parallel(one, points, options.jobs, options.save)


# The peers' files under --peers DIR, and what their route needs: (peer, version) -> (path in DIR, extra
# emulate.py arguments). A version not listed is gau-nernst's own layout (gau-nernst/submission_VERSION.py).
PEER_FILES = {
    # its CLC response is one Int32 where the ISA writes 16 bytes over the mbarrier after it: the named repair
    # (groundtruth/peer_dsl.py, PEERS) gives it the 16 bytes NVIDIA's examples reserve
    ("teelaitila", "submissionv3"): ("teelaitila_submissionv3.py", ["--repair", "clc-response-16"]),
}
LADDER_STEP = 0.03  # a step whose published geomean moves by more than this must be ranked right


def peer_file(peers: Path, peer: str, version: str) -> tuple:
    path, extra = PEER_FILES.get((peer, version), (f"{peer}/submission_{version}.py", []))
    return peers / path, extra


def simulate_peers(options) -> list:
    """The published rows the --peers files can run, simulated (one emulate.py process each, --jobs at once)."""
    import eval as harness
    from published import load_published

    _, benchmarks, _ = harness.load_task(ROOT / "task.yml")
    versions = {v for v in options.versions.split(",") if v}
    chosen = {int(b) for b in options.benchmarks.split(",") if b}
    rows = []
    for row in load_published():
        path, extra = peer_file(options.peers, row["peer"], row["version"])
        if row["benchmark"] is None or not path.is_file() or (versions and row["version"] not in versions) \
                or (chosen and row["benchmark"] not in chosen):
            continue
        rows.append((row, path, extra, harness._spec_line(benchmarks[row["benchmark"] - 1])))

    def one(item):
        row, path, extra, spec = item
        python = options.dsl_python if "import cutlass" in path.read_text() else sys.executable
        figures = emulate_timed(["peer", "--source", str(path), "--spec", spec, *extra], options, python=python)
        case = f"{row['peer']} {row['version']} benchmark {row['benchmark']}"
        print(f"simulated {case}: " + (f"{figures['board_us']:.2f} us against {row['published_us']} "
                                       f"({figures['seconds']} s)" if "error" not in figures else figures["error"]),
              flush=True)
        return {"case": case, "spec": spec, "config": row["version"], "measured_us": row["published_us"],
                "peer": row["peer"], "version": row["version"], "parent": row["parent"],
                "benchmark": row["benchmark"], "subset": row["subset"], "simulated": figures}

    return in_parallel(one, rows, options.jobs, options.save)


def ladder_check(saved: list) -> list:
    """Each (peer, version) whose parent is a version of the same peer, both with all four benchmarks simulated:
    (peer, parent, version, published geomean ratio, simulated geomean ratio, right), for the steps whose
    published geomean moves by more than LADDER_STEP."""
    from published import geomean

    times = {}
    for r in saved:
        if "peer" in r and "board_us" in r["simulated"]:
            times.setdefault((r["peer"], r["version"]), {})[r["benchmark"]] = (r["measured_us"], r["simulated"]["board_us"])
    steps = []
    for r in saved:
        if "peer" not in r or r["benchmark"] != 1:
            continue
        parent = re.match(r"\(?(?:README: from )?(v[\w]+)", r["parent"] or "")
        key, parent_key = (r["peer"], r["version"]), (r["peer"], parent[1] if parent else None)
        if parent is None or len(times.get(key, {})) != 4 or len(times.get(parent_key, {})) != 4:
            continue
        published = geomean(t[0] for t in times[key].values()) / geomean(t[0] for t in times[parent_key].values())
        simulated = geomean(t[1] for t in times[key].values()) / geomean(t[1] for t in times[parent_key].values())
        if abs(published - 1) > LADDER_STEP:
            steps.append((r["peer"], parent_key[1], r["version"], published, simulated,
                          (published < 1) == (simulated < 1)))
    return steps


def print_table(header: tuple, rows: list, markdown: bool, line: str) -> None:
    """The rows under the header, as markdown or in columns (`line`: one format field per column)."""
    if markdown:
        print("| " + " | ".join(header) + " |\n|" + " --- |" * len(header))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        for row in [header, *rows]:
            print(line.format(*row))


def peers_report(saved: list, markdown: bool) -> None:
    """The calibration table of the peers' rows: error per row, fit or held out, the held-out RMS and worst, the
    fit subset's, and the ladder check."""
    header = ("peer", "version", "benchmark", "published us", "simulated us", "error", "subset")
    out, errors = [], {"fit": [], "held-out": [], "excluded": []}
    for r in saved:
        simulated = r["simulated"]
        if "board_us" not in simulated:
            out.append((r["peer"], r["version"], str(r["benchmark"]), f"{r['measured_us']:.2f}",
                        simulated.get("verdict") or "no time", "", r["subset"]))
            continue
        error = (simulated["board_us"] - r["measured_us"]) / r["measured_us"]
        errors.setdefault(r["subset"], []).append((error, r["case"]))
        out.append((r["peer"], r["version"], str(r["benchmark"]), f"{r['measured_us']:.2f}",
                    f"{simulated['board_us']:.2f}", f"{100 * error:+.1f}%", r["subset"]))
    print_table(header, out, markdown, "{:<11} {:<14} {:>9} {:>12} {:>12} {:>7}  {}")
    for subset in ("fit", "held-out"):
        if errors[subset]:
            rms = math.sqrt(sum(e * e for e, _ in errors[subset]) / len(errors[subset]))
            worst = max(errors[subset], key=lambda e: abs(e[0]))
            print(f"{subset}: {len(errors[subset])} rows, RMS error {100 * rms:.1f}%, worst {100 * worst[0]:+.1f}% "
                  f"({worst[1]})")
    for peer, parent, version, published, simulated, right in ladder_check(saved):
        print(f"ladder {peer} {parent} -> {version}: published geomean x{published:.3f}, simulated x{simulated:.3f}: "
              f"{'right' if right else 'WRONG'}")


# --------------------------------------------------------------------------------------------------
# the report
# --------------------------------------------------------------------------------------------------


def fit_gap(rows: list, fit: set) -> float:
    """The additive launch-gap change minimising the relative error over the fit rows (closed form)."""
    used = [(m, s) for i, (_, _, m, s) in enumerate(rows, 1) if i in fit and not isinstance(s, str)]
    if not used:
        return 0.0
    return sum((m - s) / m ** 2 for m, s in used) / sum(1 / m ** 2 for m, _ in used)


def report(rows: list, fit: set, markdown: bool) -> None:
    """rows: [(case, config, measured us, simulated us, or the verdict of a run that gave no time)]."""
    shift = fit_gap(rows, fit)
    out, held = [], []
    for i, (case, config, measured, simulated) in enumerate(rows, 1):
        role = "fitted" if i in fit else "held out"
        if isinstance(simulated, str):
            out.append((str(i), case, config, f"{measured:.2f}", simulated, "", role))
            continue
        predicted = simulated + shift
        error = (predicted - measured) / measured
        if i not in fit:
            held.append((error, case, config))
        out.append((str(i), case, config, f"{measured:.2f}", f"{predicted:.2f}", f"{100 * error:+.1f}%", role))
    header = ("row", "case", "config", "measured us", "simulated us", "error", "use")
    print_table(header, out, markdown, "{:>3}  {:<40.40} {:<20} {:>11} {:>12} {:>7}  {}")
    if fit:
        print(f"fitted: launch gap {shift:+.2f} us per call on rows {sorted(fit)}")
    if held:
        rms = math.sqrt(sum(e * e for e, _, _ in held) / len(held))
        worst = max(held, key=lambda h: abs(h[0]))
        print(f"held out: {len(held)} cases, RMS error {100 * rms:.1f}%, worst {100 * worst[0]:+.1f}% "
              f"({worst[1]}, {worst[2]})")
    by_case = {}
    for case, config, measured, simulated in rows:
        if not isinstance(simulated, str):
            by_case.setdefault(case, []).append((config, measured, simulated))
    for case, configs in by_case.items():
        for a in range(len(configs)):
            for b in range(a + 1, len(configs)):
                (ca, ma, sa), (cb, mb, sb) = configs[a], configs[b]
                right = (ma < mb) == (sa < sb)
                print(f"ranking {case}: {ca} vs {cb}: measured {ma:.2f} vs {mb:.2f}, simulated {sa:.2f} vs "
                      f"{sb:.2f}: {'right' if right else 'WRONG'}")


def report_rows(saved: list) -> list:
    return [(r["case"], r["config"], r["measured_us"],
             r["simulated"].get("board_us", r["simulated"].get("verdict") or "no time")) for r in saved]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("measured", nargs="?", type=Path)
    parser.add_argument("--from-eval", action="append", default=[], metavar="FILE:CASES:CONFIG")
    parser.add_argument("--simulated", type=Path, action="append", default=[], metavar="FILE.json",
                        help="report rows saved by --save; a second file's rows replace the first's of the same "
                             "case and config (cases simulated apart, e.g. with --rows)")
    parser.add_argument("--rows", default="", metavar="N,..", help="simulate only these rows of MEASURED")
    parser.add_argument("--arch", choices=("sm_90a", "sm_100a"), default="sm_90a")
    parser.add_argument("--fit-cases", default="", metavar="ROWS", help="rows (from 1) the launch gap is fitted on")
    parser.add_argument("--jobs", type=int, default=1, metavar="N", help="cases simulated at once")
    parser.add_argument("--timing-only", action="store_true", help="emulate.py's fast path (the same times)")
    parser.add_argument("--calls", type=int, default=1, metavar="N",
                        help="simulate each case as N calls in one stream (emulate.py --calls): its steady-state "
                             "time per call instead of the single-call formula's (default 1: the formula)")
    parser.add_argument("--save", type=Path, metavar="FILE.json",
                        help="write the rows with their simulated figures (after each case)")
    parser.add_argument("--case-timeout", type=float, default=None, metavar="S",
                        help="seconds one case's emulate.py may run (then the row says so)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="change one constant of the machine description in every run (emulate.py --set)")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--flashinfer-anchors", action="store_true",
                        help="simulate FlashInfer's published B200 points (module docstring)")
    parser.add_argument("--points", default="", metavar="N,..", help="which anchors (from 1; default all)")
    parser.add_argument("--peers", type=Path, metavar="DIR",
                        help="simulate the peers' published rows whose files are in DIR (module docstring)")
    parser.add_argument("--versions", default="", metavar="V,..", help="with --peers: only these versions")
    parser.add_argument("--benchmarks", default="", metavar="N,..", help="with --peers: only these benchmarks")
    parser.add_argument("--dsl-python", default=sys.executable, metavar="PYTHON",
                        help="with --peers: the interpreter of a CuTe DSL peer's DSL version (default this one)")
    args = parser.parse_args(argv)
    if args.peers is not None:
        sys.path.insert(0, str(ROOT / "calibration"))
        if args.calls == 1:
            args.calls = 4  # the board's back-to-back calls: the steady state per call
        args.timing_only = True
        peers_report(simulate_peers(args), args.markdown)
        return 0
    if args.simulated:
        saved = json.loads(args.simulated[0].read_text())
        if saved and "peer" in saved[0]:
            sys.path.insert(0, str(ROOT / "calibration"))
            peers_report(saved, args.markdown)
            return 0
        for path in args.simulated[1:]:
            later = {(r["case"], r["config"]): r for r in json.loads(path.read_text())}
            saved = [later.get((r["case"], r["config"]), r) for r in saved]
    elif args.flashinfer_anchors:
        chosen = {int(x) for x in args.points.split(",") if x.strip()}
        points = [p for i, p in enumerate(FLASHINFER_ANCHORS, 1) if not chosen or i in chosen]
        saved = simulate_flashinfer(points, args)
    else:
        measured = read_measured(args.measured) if args.measured else []
        for argument in args.from_eval:
            measured += read_eval_output(argument)
        if not measured:
            parser.error("no measured times: give MEASURED, --from-eval, --simulated or --flashinfer-anchors")
        chosen = {int(x) for x in args.rows.split(",") if x.strip()}
        measured = [row for i, row in enumerate(measured, 1) if not chosen or i in chosen]
        saved = simulate_cases(measured, args)
    fit = {int(x) for x in args.fit_cases.split(",") if x.strip()}
    report(report_rows(saved), fit, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
