"""Run an sm_100a (or sm_90a) kernel on this CPU, in the emulator, and check it against the exact reference.

    python tools/emulate.py nvidia --mma-tiler 128,128 --cluster 1,1 --mnk 512,384,1024 \\
        [--clusters N] [--mode eager|adversarial] [--seed S] [--ptx-filter CMD] [--no-races]
    python tools/emulate.py nvidia-grouped --groups G --mnk M,N,K [--mnk M,N,K ..] [--mma-tiler 128,128|256,128] \\
        [--cluster CM,CN] [--clusters N] [--mode ..] [--seed S] [--ptx-filter CMD] [--no-races]
    python tools/emulate.py flashinfer --groups G --masked-m 100,37 --nk N,K [--mma-tiler 128,128|256,128] \\
        [--cluster CM,CN] [--clusters N] [--m-max M] [--masked-m-slack E] [--mode ..] [--seed S] [--ptx-filter CMD]
    python tools/emulate.py submission [--config CONFIG] --spec "m: [..]; n: [..]; k: [..]; g: G; seed: S" \\
        [--workers W] [--mode eager|adversarial] [--seed S] [--ptx-filter CMD] [--submission FILE] [--no-races]
        [--arch sm_100a|sm_90a]

    python tools/emulate.py peer --source FILE --spec SPEC [--row NAME=VALUE,..] [--repair NAME] [--time]
        [--timing-only] [--calls N] [--no-races] [--mode eager|adversarial|timed] [--seed S] [--ptx-filter CMD]

    python tools/emulate.py benchmarks [--kernel submission|flashinfer|both] [--peer FILE [--repair NAME]]
        [--config TEXT] [--arch sm_100a|sm_90a]
        [--only N] [--calls N] [--timing-only]
        [--timeline FILE.png [--timeline-call N] [--timeline-ctas I,J,..] [--timeline-trace FILE.txt]]

`--time` (or `--mode timed`) runs the timed mode (emulator/clock.py, with emulator/machines/'s description
of the GPU): the verdict line adds `simulated X.XX us`, one call's board time (DESIGN.md, "Timed mode");
`--calls N` (nvidia, flashinfer, submission; default 1) runs N consecutive calls on N inputs (submission:
the board's, seed + 42, + 84, ...) as one CUDA stream in one clock, consecutive calls overlapping as CUDA
lets them (PDL), every call's output checked: `simulated` is then the steady-state time per call (the mean
of the last even number of gaps between calls' completions after the first: with 4 calls, the last two) and
the single-call formula's figure follows it, and the `timing:` line adds each call's completion, the gaps
and `stream_us`, and `board_mean_us`: eval.py's mean over a flush of 15 calls, the first (cold, after the
flush, nothing to overlap) counted once, the others at the steady gap (`benchmarks` prints it on each line);
`--timeline FILE.png` also draws the first two CTAs' warps over time and prints every worker's phases
(start-up, first load, mainloop, tail) of the stream's first call (`--timeline-call N`, from 1: call N's, a
later one shows the steady state; the call's first launch, on the Hopper path its token pre-pass;
`--timeline-ctas I,J,..`: other CTAs, as on benchmarks 3 and 4, whose first CTAs are warmers;
`--timeline-trace FILE.txt`: every instruction those CTAs' warps issue, with its time, a stall as a gap;
picture and trace are written after a run that completes, not after a hang or an error); `--timing-only` skips TMA data and MMA
arithmetic (the same times; outputs neither computed nor checked: verdict TIMED). `benchmarks` runs task.yml's four
benchmarks timed, at the B200's worker count, each as a stream of `--calls` calls (default 4; 1: the
single-call formula alone) checked against the reference, prints per benchmark the stream figure, its gaps
and the formula's figure, and a geomean row last; `--kernel flashinfer` times FlashInfer's masked kernel on the same shapes (its padded layout:
masked_m is the M list; default tactic, 148 SMs), `--kernel both` the two side by side; `--peer FILE` adds
another entrant's file beside ours (the `peer` routes; `--repair` as there). With more than one kernel each
benchmark's line `ours X us, ...` gives the ratio to ours, then `geomean ratio ...` and `geomean ours X us, ...`.

`nvidia` runs NVIDIA's dense_blockscaled_gemm_persistent.py (torch's copy of the CUTLASS v4.3.5 example) on
random FP4 data and random e4m3 scales; `nvidia-grouped` runs NVIDIA's grouped_blockscaled_gemm.py (CUTLASS
v4.5.0's, from flashinfer-python 0.6.17's wheel; nvidia-cutlass-dsl 4.5.2) on G groups, one --mnk per group
(one: the same for all), through the example's own host set-up (groundtruth/nvidia_grouped.py); `flashinfer`
runs FlashInfer's masked grouped NVFP4 GEMM (the flashinfer-python installed beside this DSL,
groundtruth/flashinfer.py) on G groups of N x K weights with masked_m valid rows each (one value: the same for
every group), masked_m registered as exactly its G elements (--masked-m-slack E: E elements more); `submission` runs submission.py's B200 kernel through its real host
path (plan, schedule tables, LaunchArgs, CompiledLaunch) on the board's inputs for SPEC, with c poisoned and
guard rows around each c. `--clusters` / `--workers` set how many clusters (pairs) the persistent grid has.
`--ptx-filter CMD` pipes the PTX text through the shell command CMD before the emulator reads it.
`--arch sm_90a` runs the Hopper path instead (sm90_kernel.py, reached through custom_kernel on a
capability-9.0 device): the stub driver answers as an H200 (132 SMs) and the DSL compiles for sm_90a.
Of `--config`, the Hopper kernel has `pdl` (its GEMM launched with PDL on the token pre-pass) and `jobs`
(its schedule's job policy, sm90_kernel.SCHEDULE; named explicitly, else its own "tiles"); a text that
changes any other field is refused. `--workers` is then the SM count its schedule spreads tiles over.

`peer` runs another entrant's submission FILE (groundtruth/peers.py picks the route by the file's kind; a file
no route recognizes is refused in one line, exit 2): for a CUDA C++ entry compiled with torch's load_inline
(groundtruth/peer_cuda.py), nvcc's PTX of its own source and a Python twin of its host code, on the board's
inputs for SPEC (reference.generate_input; its outputs poisoned with NaN), checked against the exact
reference; `--calls N` draws the board's N inputs (seed + 42, + 84, ...). Its groups must share N and K where
its host code sends other shapes to torch._scaled_mm (gau-nernst's from v2 on); a shape outside its LAUNCH
table gets an instance of the same kernel with `--row NAME=VALUE,..`: the launch parameters other than G, N
and K (v6b: BLOCK_M=256,CTA_GROUP=2; v2d: CTA_GROUP=2,NUM_BLOCKS=148,raster=Raster::M; the pair
BLOCK_M,CTA_GROUP also works; default: the twin's). The line before the verdict names the twin and the row.

Happens-before race detection (emulator/happens_before.py) is on in every run that checks outputs: two
conflicting accesses (shared, tensor or global memory; by warps or by the TMA and tensor-core units acting
for them) that no synchronization orders, whatever interleaving ran, end the run with RACE naming both PTX
lines; a PASS says races=0. `--no-races` turns it off (faster; a PASS then vouches only for the interleaving
that ran); `--timing-only` and `benchmarks`, which time, run without it.

The last line is the verdict, then the figures: PASS, FAIL (an output beyond |out - ref| <= 1e-3 + 1e-3 |ref|),
OUTSIDE (a cell outside a group's M x N was written), HANG (every warp blocked: the report precedes it),
ERROR (the emulator caught a defect, e.g. an out-of-bounds access: the PTX line is named; or its set-up
failed), or RACE (an unordered pair of accesses). The figures: error/tol, the worst
|out - ref| / (1e-3 + 1e-3 |ref|) (PASS needs <= 1), and max_abs_error, the worst |out - ref| (outputs
reach the hundreds, so it may exceed 1e-3 on a PASS).
Exit status 0 only for PASS (or TIMED); FAIL 1, HANG 3, ERROR 4, RACE 6, OUTSIDE 7; 2 bad use, one line,
before any emulation (as eval.py, check.py and inspect_sm100.py): a missing or malformed option, --timeline
without matplotlib, a configuration text (--config or the file's SM100_CONFIG line), spec or shape that does not
parse or that the kernel refuses, a --submission without a B200 kernel.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# The emulator is one thread: NumPy's and torch's thread pools only fight each other and whatever else runs
# (measured 2026-11-28 on the 2-core machine, load 3.7: 12.1 s against 7.2 s of emulation for one case).
os.environ.setdefault("OMP_NUM_THREADS", "1")

EXIT = {"PASS": 0, "TIMED": 0, "FAIL": 1, "HANG": 3, "ERROR": 4, "RACE": 6, "OUTSIDE": 7}
BAD_USE = 2  # every tool's status for a command it refuses (eval.py, check.py, inspect_sm100.py)
SEVERITY = ("PASS", "TIMED", "FAIL", "OUTSIDE", "HANG", "ERROR", "RACE")  # the worst case's word is the run's
ARCH_GPU = {"sm_100a": "B200", "sm_90a": "H200"}  # --arch -> the GPU the stub driver answers as
ATOL = RTOL = 1e-3  # the board's check
GUARD_ROWS = 2  # poisoned rows before and after each c
POISON = 0x7E00  # fp16 NaN: a cell the kernel should have written and did not stays NaN
GUARD = 0x5A5A


# A stream of 4 calls: the gap between the first two calls' completions is a transient (the first call starts
# cold: the second hides all its start-up under the first's tail), and the calls after it may alternate
# between hiding more and less of theirs (benchmark 3: gaps 6.84, 6.23, 6.85, 6.23 us): 4 is the fewest
# calls whose time per call (the mean of the last two gaps, clock.Clock.stream_figures) leaves out the
# transient and takes a whole period; each call more costs a call's emulation (benchmark 1: 75 s).
DEFAULT_CALLS = 4
BOARD_SEED_STEP = 42  # eval.py: each of the board's inputs is drawn with the seed 42 past the one before


# The opt-out, in one line: what a run without the detector gives up (eval.py and check.py --emulate say the same).
NO_RACES_HELP = ("--no-races: no race detection; faster, but a PASS then vouches only for the interleaving that ran: a "
                 "missing fence, barrier or wait that this order did not expose passes unseen")


def _calls(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of calls, at least 1")
    return value


def _pair(text: str) -> tuple:
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated integers") from None
    return values


def _row(text: str):
    """A peer's launch parameters for a shape outside its LAUNCH table: `NAME=VALUE,..` (a value an integer
    or an enumerator such as Raster::M), or the pair BLOCK_M,CTA_GROUP."""
    if "=" not in text:
        return _pair(text)
    out = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        if not name.strip() or not value.strip():
            raise argparse.ArgumentTypeError(f"{text!r}: NAME=VALUE items, comma-separated")
        value = value.strip()
        out[name.strip()] = int(value) if value.lstrip("-").isdigit() else value
    return out


def _timeline_choices(p) -> None:
    p.add_argument("--timeline-call", type=_calls, default=None, metavar="N",
                   help="with --timeline: draw call N of the stream (from 1; default 1): a later call shows the "
                        "steady state, the first its cold start")
    p.add_argument("--timeline-ctas", type=_cta_list, default=None, metavar="I,J,..",
                   help="with --timeline: the CTAs drawn, by index in the grid (default 0,1)")
    p.add_argument("--timeline-trace", type=Path, default=None, metavar="FILE.txt",
                   help="with --timeline: also list every instruction the drawn CTAs' warps issue, with its time "
                        "and the cycles since the warp's previous one")


def _cta_list(text: str) -> tuple:
    ctas = _pair(text)
    if min(ctas) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: CTA indices, comma-separated, from 0")
    return ctas


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="emulate.py", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("nvidia", "nvidia-grouped", "flashinfer", "submission", "peer"):
        p = sub.add_parser(name)
        p.add_argument("--mode", choices=("eager", "adversarial", "timed"), default="eager")
        p.add_argument("--time", action="store_true",
                       help="timed mode (--mode timed): the verdict line adds the simulated board time per call")
        p.add_argument("--machine", choices=("b200", "h200"), default=None,
                       help="timed mode's machine description (default: the kernel's architecture's)")
        p.add_argument("--timeline", type=Path, default=None, metavar="FILE.png",
                       help="timed mode: draw each warp role of a few workers over time")
        _timeline_choices(p)
        p.add_argument("--timing-only", action="store_true",
                       help="timed mode's fast path: TMA data and MMA arithmetic skipped, outputs not checked "
                            "(verdict TIMED)")
        p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                       help="timed mode: change one constant of the machine description (a what-if run)")
        p.add_argument("--flush-every", type=int, default=15, metavar="CALLS",
                       help="timed mode: timed calls per L2 flush (the board's 15; FlashInfer's benchmark 1): "
                            "the flush leaves L2 dirty")
        if name != "nvidia-grouped":
            p.add_argument("--calls", type=_calls, default=1, metavar="N",
                           help="N consecutive calls on N inputs as one CUDA stream (timed: in one clock; the "
                                "simulated time is the steady-state time per call, the single-call formula beside it)")
        p.add_argument("--seed", type=int, default=0, help="adversarial order and (nvidia) data seed")
        p.add_argument("--ptx-filter", metavar="CMD", help="shell command the PTX text is piped through")
        p.add_argument("--step-budget", type=int, default=None, metavar="N", help="warp instructions before a HANG")
        p.add_argument("--races", action=argparse.BooleanOptionalAction, default=True,
                       help=NO_RACES_HELP)
        if name == "nvidia":
            p.add_argument("--mma-tiler", type=_pair, default=(128, 128), metavar="M,N")
            p.add_argument("--cluster", type=_pair, default=(1, 1), metavar="CM,CN")
            p.add_argument("--mnk", type=_pair, default=(512, 384, 1024), metavar="M,N,K")
            p.add_argument("--clusters", type=int, default=None, metavar="N",
                           help="max active clusters (persistent grid size; default: a few, so tiles wrap)")
        elif name == "nvidia-grouped":
            p.add_argument("--groups", type=int, required=True, metavar="G")
            p.add_argument("--mnk", type=_pair, required=True, action="append", metavar="M,N,K",
                           help="one group's shape; repeat it for each group (one: the same for all G)")
            p.add_argument("--mma-tiler", type=_pair, default=(128, 128), metavar="M,N")
            p.add_argument("--cluster", type=_pair, default=(1, 1), metavar="CM,CN")
            p.add_argument("--clusters", type=int, default=None, metavar="N",
                           help="max active clusters (persistent grid size; default 2, so tiles wrap)")
        elif name == "peer":
            p.add_argument("--source", type=Path, required=True, metavar="FILE", help="the entrant's submission file")
            p.add_argument("--spec", required=True, metavar="SPEC", help='"m: [..]; n: [..]; k: [..]; g: G; seed: S"')
            p.add_argument("--row", type=_row, default=None, metavar="NAME=VALUE,..|BLOCK_M,CTA_GROUP",
                           help="for a shape outside the entry's LAUNCH table: the instance to add")
            p.add_argument("--repair", action="append", default=[], metavar="NAME",
                           help="a known defect of the entry repaired in a copy before it runs (its route names them)")
        elif name == "flashinfer":
            p.add_argument("--groups", type=int, required=True, metavar="G")
            p.add_argument("--masked-m", type=_pair, required=True, metavar="M0,M1,..",
                           help="valid rows of each group (G values, or one for all)")
            p.add_argument("--nk", type=_pair, required=True, metavar="N,K")
            p.add_argument("--mma-tiler", type=_pair, default=(128, 128), metavar="M,N")
            p.add_argument("--cluster", type=_pair, default=(1, 1), metavar="CM,CN")
            p.add_argument("--clusters", type=int, default=None, metavar="N",
                           help="max active clusters (persistent grid size; default 2, so tiles wrap)")
            p.add_argument("--m-max", type=int, default=None, metavar="M",
                           help="rows of each group's A and C (default: what the largest group covers + a tile)")
            p.add_argument("--masked-m-slack", type=int, default=0, metavar="E",
                           help="elements registered past masked_m's end (0: reading masked_m[G] is an error)")
        else:
            p.add_argument("--config", default=None, metavar="TEXT",
                           help="an SM100_CONFIG text (default: the submission file's SM100_CONFIG line)")
            p.add_argument("--spec", required=True, action="append", metavar="SPEC",
                           help='"m: [..]; n: [..]; k: [..]; g: G; seed: S"; repeat it for several cases (one '
                                'verdict line each, then the overall verdict)')
            p.add_argument("--workers", type=int, default=None, metavar="W",
                           help="co-resident workers (clusters); default: a B200's (74 pairs or 148 CTAs)")
            p.add_argument("--submission", type=Path, default=ROOT / "submission.py", metavar="FILE")
            p.add_argument("--arch", choices=tuple(ARCH_GPU), default="sm_100a",
                           help="sm_100a: the B200 kernel; sm_90a: the Hopper kernel on an emulated H200")
    p = sub.add_parser("benchmarks", help="task.yml's benchmarks, timed")
    p.add_argument("--kernel", choices=("submission", "flashinfer", "both"), default="submission",
                   help="whose kernel: ours, FlashInfer's masked kernel, or both side by side")
    p.add_argument("--config", default=None, metavar="TEXT",
                   help="an SM100_CONFIG text (default: the submission file's SM100_CONFIG line)")
    p.add_argument("--arch", choices=tuple(ARCH_GPU), default="sm_100a")
    p.add_argument("--only", type=int, default=None, metavar="N", help="only benchmark N (from 1)")
    p.add_argument("--timeline", type=Path, default=None, metavar="FILE.png")
    _timeline_choices(p)
    p.add_argument("--timing-only", action="store_true", help="skip TMA data and MMA arithmetic (verdict TIMED)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="change one constant of the machine description (a what-if run)")
    p.add_argument("--flush-every", type=int, default=15, metavar="CALLS",
                   help="timed calls per L2 flush (the board's 15): the flush leaves L2 dirty")
    p.add_argument("--calls", type=_calls, default=DEFAULT_CALLS, metavar="N",
                   help=f"consecutive calls on the board's inputs as one CUDA stream (default {DEFAULT_CALLS}; 1: the "
                        "single-call formula alone)")
    p.add_argument("--submission", type=Path, default=ROOT / "submission.py", metavar="FILE")
    p.add_argument("--peer", type=Path, default=None, metavar="FILE",
                   help="also time another entrant's file (tools/emulate.py peer's routes) beside ours")
    p.add_argument("--repair", action="append", default=[], metavar="NAME",
                   help="with --peer: a known defect of its file repaired in a copy (its route names them)")
    args = parser.parse_args(argv)
    if args.timeline is None and (args.timeline_call, args.timeline_ctas, args.timeline_trace) != (None,) * 3:
        parser.error("--timeline-call, --timeline-ctas and --timeline-trace go with --timeline FILE.png")
    if args.timeline_call is not None and args.timeline_call > getattr(args, "calls", 1):
        parser.error(f"--timeline-call {args.timeline_call}: the stream has {args.calls} call(s) (--calls)"
                     if hasattr(args, "calls") else f"--timeline-call {args.timeline_call}: {args.command} runs one call")
    if args.command == "benchmarks":
        args.mode, args.time, args.seed, args.ptx_filter, args.step_budget, args.workers = \
            "timed", True, 0, None, None, None
        args.races = False  # timings of the board's sizes: `submission --spec` checks races
    if args.timing_only:
        args.races = False  # no data moves: a TIMED verdict checks nothing, races included
    if hasattr(args, "arch") and getattr(args, "machine", None) is None:  # the kernel's architecture's
        args.machine = {"sm_100a": "b200", "sm_90a": "h200"}[args.arch]
    return args


def verdict(word: str, figures: str) -> int:
    print(f"{word} {figures}", flush=True)
    return EXIT[word]


def figures(errors, stats, seconds, races: bool = False) -> str:
    """`errors`: (worst error / tolerance, worst absolute error), or None where no output was compared."""
    rate = stats.instructions / stats.seconds if stats.seconds else 0.0  # emulation only, not compiling
    err = "error/tol=n/a" if errors is None else f"error/tol={errors[0]:.3g} max_abs_error={errors[1]:.3g}"
    simulated = f" simulated {stats.timing['board_us']:.2f} us" if stats.timing else ""
    if stats.timing and stats.timing.get("calls", 1) > 1:
        formula = stats.timing.get("formula_us")
        simulated += (f" (stream of {stats.timing['calls']} calls; single-call formula "
                      + (f"{formula:.2f} us)" if formula is not None else "n/a: run --calls 1)"))
    return (f"{err} instructions={stats.instructions} seconds={seconds:.1f} "
            f"rate={rate / 1e3:.0f}k_instr/s ctas={stats.ctas}" + (" races=0" if races else "") + simulated)


# --------------------------------------------------------------------------------------------------
# NVIDIA's kernel
# --------------------------------------------------------------------------------------------------


def run_nvidia(args, emulator) -> tuple:
    import torch

    from groundtruth.nvidia import NvidiaExample

    m, n, k = args.mnk
    example = NvidiaExample(tuple(args.mma_tiler), tuple(args.cluster), m, n, k, seed=args.seed,
                            max_active_clusters=args.clusters)
    emu = make_emulator(args, emulator, example.warp_roles)
    if args.calls > 1:  # the same kernel on other inputs, one call each
        examples = [example] + [example.with_inputs(args.seed + BOARD_SEED_STEP * i) for i in range(1, args.calls)]
        for e in examples:
            emu.register(*e.tensors)
        stats = run_calls(emu, emulator, [(e.compiled, e.args) for e in examples])
    else:
        examples = [example]
        emu.register(*example.tensors)
        stats = emulator.combine(emu.call(example.compiled, *example.args))
    if args.timing_only:
        return TIMING_ONLY, stats
    return _compare([(e.output().to(torch.float64), e.reference().to(torch.float64), None) for e in examples]), stats


def run_calls(emu, emulator, calls: list):
    """`compiled(*args)` for each (compiled, args) of `calls`, recorded, then run as one stream: its RunStats
    (emulator.summarize)."""
    from emulator import driver

    driver.take_launches()  # drop launches nobody ran
    recorded = []
    for compiled, call_args in calls:
        compiled(*call_args)
        recorded.append(emu.take(compiled))
    return emulator.summarize(emu.run_stream(recorded))


def run_nvidia_grouped(args, emulator) -> tuple:
    from groundtruth.nvidia_grouped import NvidiaGrouped

    problems = args.mnk * args.groups if len(args.mnk) == 1 else args.mnk
    if len(problems) != args.groups or any(len(p) != 3 for p in problems):
        raise ValueError(f"--mnk: {len(problems)} M,N,K shapes for --groups {args.groups}")
    case = NvidiaGrouped(problems, mma_tiler_mn=tuple(args.mma_tiler), cluster_mn=tuple(args.cluster),
                         seed=args.seed, max_active_clusters=args.clusters)
    return run_example_calls(case, args, emulator)


def run_peer(args, emulator) -> tuple:
    """Another entrant's submission (groundtruth/peers.py): its route's case for SPEC, as `--calls` calls."""
    case = peer_case(args.source, args.spec[0], args)
    print(case.note, flush=True)
    return run_example_calls(case, args, emulator)


def peer_case(source: Path, spec: str, args):
    """The case of `source` (a peer's file) on SPEC, by its route (groundtruth/peers.py), with the command line's
    --row and --repair; with `--calls N` (N > 1) on the board's inputs (seed + 42, + 84, ...)."""
    from groundtruth import peers

    text = source.read_text()
    options = {"row": args.row} if getattr(args, "row", None) else {}
    if getattr(args, "repair", None):
        options["repairs"] = tuple(args.repair)
    if getattr(args, "calls", 1) > 1:
        options["seed_shift"] = BOARD_SEED_STEP
    return peers.route_for(text).make_case(source, text, spec, **options)


def peer_refusal(args) -> str | None:
    """One line refusing a --source file no peer route recognizes (or that cannot be read), else None."""
    from groundtruth import peers

    try:
        text = args.source.read_text()
    except (OSError, UnicodeDecodeError) as e:
        return f"emulate.py peer: {args.source}: cannot be read ({e.__class__.__name__})"
    if peers.route_for(text) is None:
        return f"emulate.py peer: {args.source}: not a kind of entry this tool runs (it runs {peers.kinds()})"
    return None


def merge_verdicts(verdicts: list) -> tuple:
    """One (word, errors, message) for several calls' checks: the first that is not PASS, else PASS with the
    worst errors."""
    for verdict in verdicts:
        if verdict[0] != "PASS":
            return verdict
    errors = [v[1] for v in verdicts if v[1] is not None]
    return "PASS", (max(e[0] for e in errors), max(e[1] for e in errors)) if errors else None, ""


# --------------------------------------------------------------------------------------------------
# FlashInfer's kernel
# --------------------------------------------------------------------------------------------------


def run_flashinfer(args, emulator) -> tuple:
    from groundtruth.flashinfer import FlashInferMasked

    masked_m = args.masked_m * args.groups if len(args.masked_m) == 1 else args.masked_m
    if len(masked_m) != args.groups:
        raise ValueError(f"--masked-m has {len(masked_m)} values for --groups {args.groups}")
    n, k = args.nk
    case = FlashInferMasked(masked_m, n, k, mma_tiler_mn=tuple(args.mma_tiler), cluster_mn=tuple(args.cluster),
                            m_max=args.m_max, seed=args.seed, max_active_clusters=args.clusters,
                            masked_m_slack=args.masked_m_slack)
    return run_example_calls(case, args, emulator)


def run_example_calls(case, args, emulator) -> tuple:
    """An example kernel's case (NvidiaGrouped, FlashInferMasked) as `--calls` calls, each on its own
    inputs (the board's seed steps), through the emulator the command line asks for: (verdict, stats)."""
    emu = make_emulator(args, emulator, case.warp_roles)
    calls = getattr(args, "calls", 1)
    cases = [case] + [case.with_inputs(case.seed + BOARD_SEED_STEP * i) for i in range(1, calls)]
    for c in cases:
        c.register(emu)
    if calls > 1:
        stats = run_calls(emu, emulator, [(c.compiled, c.args) for c in cases])
    else:
        stats = emulator.combine(emu.call(case.compiled, *case.args))
    if args.timing_only:
        return TIMING_ONLY, stats
    return merge_verdicts([c.compare(ATOL, RTOL) for c in cases]), stats


# --------------------------------------------------------------------------------------------------
# submission.py's kernel
# --------------------------------------------------------------------------------------------------


class EmulatedB200:
    """The device facts submission.py's host path asks for (its DEVICE seam), answered as a B200's."""

    def __init__(self, workers: int | None):
        self.workers = workers

    def capability(self, device):
        return (10, 0)

    def co_resident_workers(self, device, cluster_size: int) -> int:
        """--workers counts SM pairs (or SMs with cta_group 1): a cluster of two pairs takes two."""
        if self.workers:
            return self.workers // 2 if cluster_size == 4 else self.workers
        return 148 // cluster_size

    def stream(self, device):
        class Stream:
            cuda_stream = 0

        return Stream()


class EmulatedH200:
    """The device facts the Hopper path asks for, answered as an H200's: submission.DEVICE's capability and
    stream, and the SM count sm90_kernel.make_sm90_launch reads from torch.cuda.get_device_properties
    (`install` answers that query for the CPU device; `workers`, when given, replaces the 132 SMs)."""

    def __init__(self, workers: int | None):
        from emulator import driver

        self.sm_count = workers or driver.DEVICES["H200"].sm_count

    def capability(self, device):
        return (9, 0)

    def co_resident_workers(self, device, cta_group: int) -> int:
        return self.sm_count // cta_group

    def stream(self, device):
        return EmulatedB200.stream(self, device)

    def install(self, S) -> None:
        """Make `S` (submission.py) and torch's device-properties query see this H200."""
        import torch

        sm_count = self.sm_count

        class Properties:
            name = "NVIDIA H200 (emulated)"
            major, minor = 9, 0
            multi_processor_count = sm_count

        torch.cuda.get_device_properties = lambda device=None: Properties()
        S.DEVICE = self


def hopper_config(S, text: str):
    """Apply an SM100_CONFIG text to the Hopper path: `pdl` through SM100_CONFIG (make_sm90_launch reads
    it), `jobs` into sm90_kernel.SCHEDULE when the text names it; any other change has no Hopper
    counterpart and is refused (ValueError)."""
    import dataclasses

    import sm90_kernel

    config = S.sm100_config(text)
    base = S.sm100_config(text.split(",")[0] if "=" not in text.split(",")[0] else "shipped")
    # what pdl and jobs alone make of the base
    base = dataclasses.replace(base, pdl=config.pdl, jobs=config.jobs)
    named = {part.split("=")[0].strip() for part in text.split(",") if "=" in part}
    foreign = sorted(f.name for f in dataclasses.fields(config)
                     if f.name not in ("pdl", "jobs") and (f.name in named or getattr(config, f.name) !=
                                                           getattr(base, f.name)))
    if foreign:
        raise ValueError(f"--config {text!r}: {', '.join(foreign)} has no counterpart in the Hopper kernel "
                         "(it has pdl and jobs)")
    if "jobs" in named:
        sm90_kernel.SCHEDULE = dataclasses.replace(sm90_kernel.SCHEDULE, jobs=config.jobs)
    S.SM100_CONFIG = text


def board_inputs(spec: str, seed_shift: int = 0):
    """The board's inputs for SPEC (generate_input, on the CPU; `seed_shift` added to its seed), each c poisoned
    and inside guard rows."""
    import torch

    import eval as harness
    from reference import generate_input

    values = harness.parse_spec_line(spec)
    harness.check_spec_values(values, spec)
    values["seed"] += seed_shift
    data = generate_input(**values)
    guards = []
    abc = []
    for (a, b, _), (m, n, _, _) in zip(data[0], data[3]):
        buffer = torch.full(((m + 2 * GUARD_ROWS) * n,), GUARD, dtype=torch.int16)
        buffer[GUARD_ROWS * n:(GUARD_ROWS + m) * n] = POISON
        c_view = buffer.view(torch.float16)[GUARD_ROWS * n:(GUARD_ROWS + m) * n].view(m, n, 1)
        abc.append((a, b, c_view))
        guards.append(buffer)
    return (abc, data[1], data[2], data[3]), guards


def load_submission(path: Path):
    """The file imported as the module `submission`; ValueError in one line (bad use, exit 2, as eval.py says it) if
    it cannot be imported or defines no custom_kernel."""
    import eval as harness

    try:
        harness.load_submission(str(path))
    except harness.UsageError as error:
        raise ValueError(str(error)) from None
    return sys.modules["submission"]


def file_config(S, text: str | None) -> str:
    """--config, or without it the submission's own SM100_CONFIG line: the variant a user points at runs."""
    return text if text is not None else getattr(S, "SM100_CONFIG", "shipped")


def runs_as(S, spec: str) -> str:
    """' (runs as TEXT)': the configuration the plan of SPEC's shape signature was built with (the B200
    kernel's per-shape choice, sm100_shape_config; the Hopper kernel's pdl and schedule), once a call built
    it; '' for a submission whose plans do not say."""
    import eval as harness

    values = harness.parse_spec_line(spec)
    text = harness.runs_as(S, zip(values["m"], values["n"], values["k"]), isinstance(S.DEVICE, EmulatedH200))
    return f" (runs as {text})" if text else ""


def run_submission(args, emulator) -> tuple:
    """Every --spec through submission.py's real host path: a verdict line per case, then the overall one."""
    if not args.submission.is_file():
        raise ValueError(f"submission file not found: {args.submission}")
    if "\ndef compile_sm100" not in args.submission.read_text():
        raise ValueError(f"{args.submission} defines no compile_sm100: the emulator runs a B200 (sm_100a) kernel; "
                         f"python eval.py test --submission {args.submission} tests any other")
    S = load_submission(args.submission)
    import eval as harness

    problem = harness.config_problem(S, args.submission, args.config)  # the file's line and --config, as every tool
    if problem:
        raise ValueError(problem)
    args.config = file_config(S, args.config)
    S.sm100_config(args.config)  # a text that does not parse ends here, in one line
    if args.arch == "sm_90a":
        hopper_config(S, args.config)
        EmulatedH200(args.workers).install(S)
    else:
        S.SM100_CONFIG = args.config
        S.DEVICE = EmulatedB200(args.workers)
    results = []
    for spec in args.spec:
        start = time.perf_counter()
        try:
            (word, max_error, message), stats = run_submission_case(S, spec, args, emulator)
        except emulator.HangError as e:
            print(e.report, flush=True)
            word, max_error, message, stats = "HANG", None, e.message, None
        except emulator.RaceError as e:
            word, max_error, message, stats = "RACE", None, str(e), None
        except emulator.EmulatorError as e:
            word, max_error, message, stats = "ERROR", None, str(e), None
        results.append((word, max_error, message, stats))
        text = figures(max_error, stats, time.perf_counter() - start, args.races) if stats else message
        print(f"case {spec!r} {args.config}{runs_as(S, spec)} {args.mode} seed {args.seed}: {word} {text}",
              flush=True)
        if message and stats:
            print(f"  {message}", flush=True)
    worst = max(results, key=lambda r: SEVERITY.index(r[0]))
    ran = [r[3] for r in results if r[3] is not None]
    total = emulator.combine(ran) if ran else emulator.RunStats(0, 0.0, 0, 0)
    errors = [r[1] for r in results if r[1] is not None]
    passed = sum(r[0] == "PASS" for r in results)
    message = f"{passed} of {len(results)} cases pass"
    if worst[0] != "PASS":
        message += f"; first {worst[0]}: {worst[2]}"
    overall = (max(e[0] for e in errors), max(e[1] for e in errors)) if errors else None
    return (worst[0], overall, message), total


def run_benchmarks(args, emulator) -> tuple:
    """task.yml's benchmarks, timed: a line per benchmark and kernel (verdict, simulated board time, the
    clock's figures), then the geomean row; with `--kernel both`, ours and FlashInfer's masked kernel side by
    side, their ratio per benchmark and `geomean ours X us, flashinfer Y us` last."""
    import math

    import eval as harness

    kernels = ("submission", "flashinfer") if args.kernel == "both" else (args.kernel,)
    if args.peer is not None:
        kernels += ("peer",)
    S = None
    if "submission" in kernels:
        S = load_submission(args.submission)
        problem = harness.config_problem(S, args.submission, args.config)
        if problem:
            raise ValueError(problem)
        args.config = file_config(S, args.config)
        S.sm100_config(args.config)
        S.SM100_CONFIG = args.config
        if args.arch == "sm_90a":  # the same seam run_submission uses
            hopper_config(S, args.config)
            EmulatedH200(None).install(S)
        else:
            S.DEVICE = EmulatedB200(None)
    elif args.arch != "sm_100a":
        raise ValueError("benchmarks --kernel flashinfer: FlashInfer's masked kernel is sm_100a only")
    _, benchmarks, _ = harness.load_task(ROOT / "task.yml")
    names = {"submission": "ours", "flashinfer": "flashinfer", "peer": args.peer.stem if args.peer else "peer"}
    results, times, formulas, total = [], {k: [] for k in kernels}, {k: [] for k in kernels}, []
    for number, entry in enumerate(benchmarks, start=1):
        if args.only not in (None, number):
            continue
        for kernel in kernels:
            start = time.perf_counter()
            if kernel == "submission":
                (word, max_error, message), stats = run_submission_case(S, harness._spec_line(entry), args, emulator)
                label = args.config + runs_as(S, harness._spec_line(entry))
            elif kernel == "peer":
                case = peer_case(args.peer, harness._spec_line(entry), args)
                (word, max_error, message), stats = run_example_calls(case, args, emulator)
                label = f"peer {args.peer.name}"
            else:
                (word, max_error, message), stats = flashinfer_benchmark(entry, args, emulator)
                label = "flashinfer 128x128 1x1"
            t = stats.timing
            results.append((word, max_error, message))
            total.append(stats)
            times[kernel].append(t["board_us"])
            formulas[kernel].append(t.get("formula_us", t["board_us"]))
            stream = ""
            if t.get("calls", 1) > 1:
                def us(key):
                    return "n/a" if t.get(key) is None else f"{t[key]:.2f} us"
                stream = (f"stream of {t['calls']} calls, gaps " + ", ".join(f"{g:.2f}" for g in t["call_gaps_us"])
                          + f" us; board's mean over a flush, the first call counted once {us('board_mean_us')}"
                          + f"; single-call formula {us('formula_us')}; first call: ")
            print(f"benchmark {number} (G={entry['g']}, N={entry['n'][0]}, K={entry['k'][0]}) {label}: {word} "
                  f"simulated {t['board_us']:.2f} us ({stream}kernel {t['kernel_us']:.2f} us, prologue "
                  f"{t['prologue_us']:.2f} us, HBM read {t['hbm_read_mb']:.1f} MB, L2 hits "
                  f"{t['l2_hits']}/{t['l2_hits'] + t['l2_misses']}, tensor pipe busy {100 * t['tensor_busy']:.0f}%) "
                  f"seconds={time.perf_counter() - start:.1f}" + (f"\n  {message}" if message else ""), flush=True)
        if "submission" in kernels and len(kernels) > 1:
            ours = times["submission"][-1]
            print(f"benchmark {number}: ours {ours:.2f} us, " + ", ".join(
                f"{names[k]} {times[k][-1]:.2f} us (ours / {names[k]} {ours / times[k][-1]:.2f})"
                for k in kernels if k != "submission"), flush=True)
    def mean(values):
        return math.exp(sum(math.log(x) for x in values) / len(values)) if all(values) else None

    geomean = {k: mean(v) for k, v in times.items()}
    formula = {k: mean(v) for k, v in formulas.items()}
    streamed = args.calls > 1
    formulas_known = [k for k in kernels if formula[k]]
    if "submission" in kernels and len(kernels) > 1 and geomean["submission"]:
        print("geomean ratio " + ", ".join(f"ours / {names[k]} {geomean['submission'] / geomean[k]:.2f}"
                                           for k in kernels if k != "submission" and geomean[k]), flush=True)
    print("geomean " + ", ".join(f"{names[k]} {g:.2f} us" for k, g in geomean.items())
          + f" ({args.machine.upper()} description, {len(times[kernels[0]])} benchmark(s)"
          + (f", streams of {args.calls} calls" if streamed else "")
          + ("; single-call formula " + ", ".join(f"{names[k]} {formula[k]:.2f} us" for k in formulas_known)
             if streamed and formulas_known else "") + ")", flush=True)
    worst = max(results, key=lambda r: SEVERITY.index(r[0]))
    errors = [r[1] for r in results if r[1] is not None]  # (error/tol, max_abs_error) per benchmark
    combined = emulator.combine(total)
    combined.timing["board_us"] = geomean[kernels[0]]
    combined.timing["formula_us"] = formula[kernels[0]]
    return (worst[0], max(errors) if errors else None, ""), combined


def flashinfer_benchmark(entry: dict, args, emulator) -> tuple:
    """One task.yml benchmark on FlashInfer's masked kernel in its padded layout (every benchmark's groups
    share N and K: masked_m is the M list), its default tactic (128x128 tile, 1x1 cluster) on all 148 SMs."""
    from groundtruth.flashinfer import FlashInferMasked

    if len(set(entry["n"])) != 1 or len(set(entry["k"])) != 1:
        raise ValueError("benchmarks --kernel flashinfer: FlashInfer's layout needs one N and K for every group")
    # one element past masked_m is registered: flashinfer 0.6.7.post3 reads masked_m[G] (the field bug the
    # tests catch), and this route times the kernel rather than judging it
    case = FlashInferMasked(list(entry["m"]), entry["n"][0], entry["k"][0], max_active_clusters=148,
                            seed=entry.get("seed", 0) + (BOARD_SEED_STEP if args.calls > 1 else 0), masked_m_slack=1)
    return run_example_calls(case, args, emulator)


def submission_roles(S) -> dict:
    if isinstance(S.DEVICE, EmulatedH200):  # sm90_kernel.py's GEMM (its token pre-pass has warps 0-3 only)
        return {0: "weights TMA", 1: "tokens TMA", **{w: f"consumer warpgroup {w // 4}" for w in range(4, 12)}}
    return {**{w: "epilogue" for w in S.EPILOGUE_WARPS}, S.MMA_WARP: "MMA", S.TMA_WARP: "TMA"}


def compiled_kernel(S, data):
    """The compiled function whose PTX the emulator runs for the call on `data` (custom_kernel has built its
    plan): the B200 kernel the plan launches (the shape's configuration: sm100_shape_config), or (S.DEVICE an
    EmulatedH200) the Hopper pre-pass + GEMM's."""
    num_groups = len(data[3])
    if isinstance(S.DEVICE, EmulatedH200):
        import sm90_kernel

        return sm90_kernel.compile_sm90(num_groups, S.sm100_config().pdl)
    plan = S._plans.get((S._signature(data[3]), data[0][0][0].device, S.SM100_CONFIG))
    compiled = getattr(getattr(plan, "launch", None), "compiled", None)
    # a submission older than the per-shape choice compiles one kernel per group count and configuration
    return compiled if compiled is not None else S.compile_sm100(num_groups, S.sm100_config())


def emulated_call(S, data, extra_tensors, emu):
    """`S.custom_kernel(data)` with the emulator as the GPU (S.DEVICE an EmulatedB200 or EmulatedH200): every
    input, `extra_tensors` (e.g. guard buffers around c) and the plan's tables registered as global memory.
    Returns custom_kernel's outputs and the run's figures."""
    import emulator
    from emulator import driver

    emu.register(*extra_tensors)
    for group in (*data[0], *data[1], *data[2]):
        emu.register(*group)
    driver.take_launches()
    outputs = S.custom_kernel(data)
    for plan in S._plans.values():
        emu.register(*plan.launch.buffers)
    return outputs, emulator.combine(emu.run_pending(compiled_kernel(S, data)))


def emulated_calls(S, inputs: list, emu):
    """`S.custom_kernel(data)` for each (data, extra tensors) of `inputs`, recorded, then run as one CUDA
    stream (the board's back-to-back calls; emulator.Emulator.run_stream). Returns each call's outputs and
    the stream's figures (emulator.summarize)."""
    import emulator
    from emulator import driver

    driver.take_launches()
    outputs, recorded = [], []
    for data, extra_tensors in inputs:
        emu.register(*extra_tensors)
        for group in (*data[0], *data[1], *data[2]):
            emu.register(*group)
        outputs.append(S.custom_kernel(data))
        for plan in S._plans.values():
            emu.register(*plan.launch.buffers)
        recorded.append(emu.take(compiled_kernel(S, data)))
    return outputs, emulator.summarize(emu.run_stream(recorded))


def run_submission_case(S, spec: str, args, emulator) -> tuple:
    """SPEC through the host path, checked against the reference: one call on the spec's inputs, or with
    `--calls N` (N > 1) N calls as one stream on the board's N inputs (seed + 42, + 84, ...)."""
    import torch

    from reference import ref_kernel

    calls = getattr(args, "calls", 1)
    emu = make_emulator(args, emulator, submission_roles(S))
    if calls > 1:
        inputs = [board_inputs(spec, BOARD_SEED_STEP * (i + 1)) for i in range(calls)]
        outputs, stats = emulated_calls(S, inputs, emu)
    else:
        inputs = [board_inputs(spec)]
        outputs, stats = emulated_call(S, *inputs[0], emu)
        outputs = [outputs]
    if getattr(args, "timing_only", False):
        return TIMING_ONLY, stats
    verdicts = []
    for (data, guards), call_outputs in zip(inputs, outputs):
        # the kernel's results, copied before the reference runs: ref_kernel writes into the same c tensors
        results = [out.to(torch.float64) for out in call_outputs]
        reference = [ref.to(torch.float64) for ref in ref_kernel(data)]
        verdicts.append(_compare(list(zip(results, reference, guards))))
    return merge_verdicts(verdicts), stats


def _compare(pairs):
    """(verdict word, (worst error / tolerance, worst absolute error), message) over (out, ref, guard
    buffer) triples."""
    import torch

    worst = worst_ratio = 0.0
    for g, (out, ref, guard) in enumerate(pairs):
        if guard is not None:
            n = out.shape[1]
            rows = guard.numel() // n
            outside = torch.cat([guard[:GUARD_ROWS * n], guard[(rows - GUARD_ROWS) * n:]])
            if (outside != GUARD).any():
                return "OUTSIDE", None, f"group {g}: {(outside != GUARD).sum().item()} guard cells written"
        err = (out - ref).abs()
        tolerance = ATOL + RTOL * ref.abs()
        bad = ~(err <= tolerance)
        worst = max(worst, float(torch.nan_to_num(err, nan=float("inf")).max()))
        worst_ratio = max(worst_ratio, float(torch.nan_to_num(err / tolerance, nan=float("inf")).max()))
        if bad.any():
            idx = tuple(int(i) for i in bad.nonzero()[0])
            return "FAIL", (worst_ratio, worst), (f"group {g}: {int(bad.sum())} of {bad.numel()} outputs wrong, first at "
                                   f"{idx}: {float(out[idx])} vs {float(ref[idx])}")
    return "PASS", (worst_ratio, worst), ""


TIMING_ONLY = ("TIMED", None, "timing only: outputs not computed, not checked")


def make_emulator(args, emulator, warp_roles):
    """The Emulator the command line asks for: mode, seed, planted defect, race detection, step budget and
    timed mode's machine, timeline and fast path."""
    import torch

    torch.set_num_threads(1)  # in a process that imported torch before this file (eval.py's worker): as above
    return emulator.Emulator(mode=args.mode, seed=args.seed, ptx_filter=args.ptx_filter, warp_roles=warp_roles,
                             races=args.races, **_budget(args), **_timed(args))


def _budget(args) -> dict:
    return {} if args.step_budget is None else {"step_budget": args.step_budget}


def _timed(args) -> dict:
    """The Emulator's timed-mode arguments; with --timeline a fresh Timeline of the CTAs and call chosen
    (default: the first call's first pair of CTAs), drawn after the run (the last case's, when there are
    several)."""
    if args.mode != "timed":
        return {}
    machine = args.machine
    if args.set:
        from emulator.machines import load

        base = load(machine or "b200")
        try:
            values = {k: float(v) for k, v in (item.split("=", 1) for item in args.set)}
            machine = base.replace("--set " + " ".join(args.set), **values)
        except (ValueError, KeyError) as e:
            raise ValueError(f"--set {' '.join(args.set)}: NAME=VALUE with a constant of {base.name} ({e})") from None
    options = {"machine": machine, "timing_only": args.timing_only, "calls_per_flush": args.flush_every}
    if args.timeline is None:
        return options
    from emulator.timeline import Timeline

    args.recorded = Timeline(workers=args.timeline_ctas or (0, 1), call=(args.timeline_call or 1) - 1,
                             trace=args.timeline_trace is not None)
    return {**options, "timeline": args.recorded}


def _draw_timeline(args, word: str) -> None:
    recorded = getattr(args, "recorded", None)
    if recorded is None:
        return
    drawn = f"call {recorded.call + 1}, CTAs {','.join(str(c) for c in sorted(recorded.workers))}"
    if not recorded.rows:
        print(f"timeline: nothing drawn{', no trace' if args.timeline_trace else ''}: {drawn}: that call's launch "
              "has no such CTA", flush=True)
        return
    words, skip = [], False
    for a in sys.argv[1:]:  # the command line less the timeline's own options and their values
        if not skip and not a.startswith("--timeline"):
            words.append(a)
        skip = a.startswith("--timeline") and "=" not in a
    recorded.draw(args.timeline, title=" ".join(words) + f": {word}, {drawn}")
    first, last = recorded.span()
    print(f"timeline: {args.timeline} ({drawn}; its launch's CTAs ran {first:.2f} to {last:.2f} us)", flush=True)
    if args.timeline_trace is not None:
        print(f"trace: {args.timeline_trace} ({recorded.write_trace(args.timeline_trace)} instructions)", flush=True)
    phases = recorded.phases()
    print("phases (us, median / largest over the CTAs that ran MMAs, " + phases.pop("ctas") + " CTAs): "
          + ", ".join(f"{name} {mid:.2f} / {top:.2f}" for name, (mid, top) in phases.items()), flush=True)


# nvidia-cutlass-dsl 4.5.2 deprecates a pointer form that submission.py keeps because 4.3.5, the board's
# other version, needs it: once per compile, 18 warnings of 2 lines each, nothing the user can act on.
DSL_DEPRECATION = "Use explicit `struct.scalar.ptr` for pointer instead"


def silence_dsl_deprecation() -> None:
    """Drop that one warning. A filter cannot: the DSL raises it inside `warnings.catch_warnings()` with
    `simplefilter("always")`, which still prints through `warnings.showwarning`, so that is wrapped."""
    shown = warnings.showwarning

    def showwarning(message, category, *args, **kwargs):
        if not (issubclass(category, DeprecationWarning) and str(message).startswith(DSL_DEPRECATION)):
            shown(message, category, *args, **kwargs)

    warnings.showwarning = showwarning


def main(argv=None) -> int:
    silence_dsl_deprecation()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if args.timeline is not None:
        from plot_benchmarks import matplotlib_available  # tools/, beside this file

        if not matplotlib_available():  # said before minutes of emulation, as eval.py says it for --plot
            print("emulate.py: --timeline needs matplotlib, which is not installed (pip install matplotlib)",
                  file=sys.stderr, flush=True)
            return 2
    if args.time or args.timeline or args.timing_only:
        args.mode = "timed"
    if args.command == "peer":
        args.spec = [args.spec]
        refusal = peer_refusal(args)
        if refusal:
            print(refusal, file=sys.stderr, flush=True)
            return BAD_USE
    os.environ.setdefault("CUTE_DSL_DISABLE_FILE_CACHING", "1")
    start = time.perf_counter()
    try:
        from emulator import driver

        status = driver.rerun_with_stub(__file__, argv)  # a GPU machine: torch may hold the real driver here
        if status is not None:
            return status
        driver.install(gpu=ARCH_GPU[getattr(args, "arch", "sm_100a")])
        import emulator
    except Exception as e:  # noqa: BLE001 - the one line says why
        text = str(e)
        print(f"ERROR {text if text.startswith('setup: ') else 'setup: ' + text}", flush=True)
        return EXIT["ERROR"]
    try:
        run = {"nvidia": run_nvidia, "nvidia-grouped": run_nvidia_grouped, "flashinfer": run_flashinfer,
               "submission": run_submission, "benchmarks": run_benchmarks, "peer": run_peer}[args.command]
        (word, max_error, message), stats = run(args, emulator)
    except emulator.HangError as e:
        print(e.report, flush=True)
        return verdict("HANG", f"{e.message} seconds={time.perf_counter() - start:.1f}")
    except emulator.RaceError as e:
        return verdict("RACE", f"{e} seconds={time.perf_counter() - start:.1f}")
    except emulator.EmulatorError as e:
        return verdict("ERROR", f"{e} seconds={time.perf_counter() - start:.1f}")
    except RuntimeError as e:  # no nvcc, or nvcc refused a peer's source (groundtruth/cuda_toolkit.py)
        if e.__class__.__name__ != "ToolkitError":
            raise
        return verdict("ERROR", f"setup: {e}")
    except (FileNotFoundError, ImportError) as e:  # NVIDIA's example not found (groundtruth/nvidia.py says where it is looked for), flashinfer-python not installed
        return verdict("ERROR", f"setup: {e}")
    except ValueError as e:  # a configuration text or spec that does not parse, a shape the kernel refuses
        print(f"emulate.py: {e}", file=sys.stderr, flush=True)
        return BAD_USE
    if message:
        print(message, flush=True)
    if stats.timing:
        import json

        print("timing: " + json.dumps({k: round(v, 4) if isinstance(v, float) else v
                                       for k, v in stats.timing.items()}), flush=True)
    _draw_timeline(args, word)
    # races=0 only where every case ran to its end with the detector on
    return verdict(word, figures(max_error, stats, time.perf_counter() - start,
                                 args.races and word in ("PASS", "FAIL", "OUTSIDE")))


if __name__ == "__main__":
    sys.exit(main())
