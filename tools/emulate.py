"""Run an sm_100a kernel on this CPU, in the emulator, and check it against the exact reference.

    python tools/emulate.py nvidia --mma-tiler 128,128 --cluster 1,1 --mnk 512,384,1024 \\
        [--clusters N] [--mode eager|adversarial] [--seed S] [--ptx-filter CMD]
    python tools/emulate.py submission --config CONFIG --spec "m: [..]; n: [..]; k: [..]; g: G; seed: S" \\
        [--workers W] [--mode eager|adversarial] [--seed S] [--ptx-filter CMD] [--submission FILE]

    python tools/emulate.py benchmarks [--kernel submission|flashinfer] [--config TEXT] [--arch sm_100a|sm_90a]
        [--only N] [--timeline FILE.png]

`--time` (or `--mode timed`) runs the timed mode (emulator/clock.py, with emulator/machines/'s description
of the GPU): the verdict line adds `simulated X.XX us`, one call's board time (DESIGN.md, "Timed mode");
`--timeline FILE.png` also draws the first two CTAs' warps over time; `--timing-only` skips TMA data and MMA
arithmetic (the same times; outputs neither computed nor checked: verdict TIMED). `benchmarks` runs task.yml's four
benchmarks timed, at the B200's worker count, each checked against the reference, and prints a geomean
row last.

`nvidia` runs NVIDIA's dense_blockscaled_gemm_persistent.py (torch's copy of the CUTLASS v4.3.5 example) on
random FP4 data and random e4m3 scales; `submission` runs submission.py's B200 kernel through its real host
path (plan, schedule tables, LaunchArgs, CompiledLaunch) on the board's inputs for SPEC, with c poisoned and
guard rows around each c. `--clusters` / `--workers` set how many clusters (pairs) the persistent grid has.
`--ptx-filter CMD` pipes the PTX text through the shell command CMD before the emulator reads it.

The last line is the verdict, then the figures: PASS, FAIL (an output beyond |out - ref| <= 1e-3 + 1e-3 |ref|),
OUTSIDE (a cell outside a group's M x N was written), HANG (every warp blocked: the report precedes it), or
ERROR (the emulator caught a defect, e.g. an out-of-bounds access: the PTX line is named). Exit status 0 only
for PASS; FAIL 1, OUTSIDE 2, HANG 3, ERROR 4, a bad command line 5.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

EXIT = {"PASS": 0, "TIMED": 0, "FAIL": 1, "OUTSIDE": 2, "HANG": 3, "ERROR": 4}
ATOL = RTOL = 1e-3  # the board's check
GUARD_ROWS = 2  # poisoned rows before and after each c
POISON = 0x7E00  # fp16 NaN: a cell the kernel should have written and did not stays NaN
GUARD = 0x5A5A


def _pair(text: str) -> tuple:
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated integers") from None
    return values


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="emulate.py", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("nvidia", "submission"):
        p = sub.add_parser(name)
        p.add_argument("--mode", choices=("eager", "adversarial", "timed"), default="eager")
        p.add_argument("--time", action="store_true",
                       help="timed mode (--mode timed): the verdict line adds the simulated board time per call")
        p.add_argument("--machine", choices=("b200", "h200"), default=None,
                       help="timed mode's machine description (default: the kernel's architecture's)")
        p.add_argument("--timeline", type=Path, default=None, metavar="FILE.png",
                       help="timed mode: draw each warp role of a few workers over time")
        p.add_argument("--timing-only", action="store_true",
                       help="timed mode's fast path: TMA data and MMA arithmetic skipped, outputs not checked "
                            "(verdict TIMED)")
        p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                       help="timed mode: change one constant of the machine description (a what-if run)")
        p.add_argument("--seed", type=int, default=0, help="adversarial order and (nvidia) data seed")
        p.add_argument("--ptx-filter", metavar="CMD", help="shell command the PTX text is piped through")
        p.add_argument("--step-budget", type=int, default=None, metavar="N", help="warp instructions before a HANG")
        if name == "nvidia":
            p.add_argument("--mma-tiler", type=_pair, default=(128, 128), metavar="M,N")
            p.add_argument("--cluster", type=_pair, default=(1, 1), metavar="CM,CN")
            p.add_argument("--mnk", type=_pair, default=(512, 384, 1024), metavar="M,N,K")
            p.add_argument("--clusters", type=int, default=None, metavar="N",
                           help="max active clusters (persistent grid size; default: a few, so tiles wrap)")
        else:
            p.add_argument("--config", default="shipped", metavar="TEXT", help="an SM100_CONFIG text")
            p.add_argument("--spec", required=True, action="append", metavar="SPEC",
                           help='"m: [..]; n: [..]; k: [..]; g: G; seed: S"; repeat it for several cases (one '
                                'verdict line each, then the overall verdict)')
            p.add_argument("--workers", type=int, default=None, metavar="W",
                           help="co-resident workers (clusters); default: a B200's (74 pairs or 148 CTAs)")
            p.add_argument("--submission", type=Path, default=ROOT / "submission.py", metavar="FILE")
    p = sub.add_parser("benchmarks", help="task.yml's benchmarks, timed")
    p.add_argument("--kernel", choices=("submission", "flashinfer"), default="submission")
    p.add_argument("--config", default="shipped", metavar="TEXT", help="an SM100_CONFIG text")
    p.add_argument("--arch", choices=("sm_100a", "sm_90a"), default="sm_100a")
    p.add_argument("--only", type=int, default=None, metavar="N", help="only benchmark N (from 1)")
    p.add_argument("--timeline", type=Path, default=None, metavar="FILE.png")
    p.add_argument("--timing-only", action="store_true", help="skip TMA data and MMA arithmetic (verdict TIMED)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="change one constant of the machine description (a what-if run)")
    p.add_argument("--submission", type=Path, default=ROOT / "submission.py", metavar="FILE")
    args = parser.parse_args(argv)
    if args.command == "benchmarks":
        args.mode, args.time, args.seed, args.ptx_filter, args.step_budget, args.workers = \
            "timed", True, 0, None, None, None
        args.machine = {"sm_100a": "b200", "sm_90a": "h200"}[args.arch]
    return args


def verdict(word: str, figures: str) -> int:
    print(f"{word} {figures}", flush=True)
    return EXIT[word]


def figures(max_error, stats, seconds) -> str:
    rate = stats.instructions / stats.seconds if stats.seconds else 0.0  # emulation only, not compiling
    err = "n/a" if max_error is None else f"{max_error:.3g}"
    simulated = f" simulated {stats.timing['board_us']:.2f} us" if stats.timing else ""
    return (f"max_error={err} instructions={stats.instructions} seconds={seconds:.1f} "
            f"rate={rate / 1e3:.0f}k_instr/s ctas={stats.ctas}{simulated}")


# --------------------------------------------------------------------------------------------------
# NVIDIA's kernel
# --------------------------------------------------------------------------------------------------


def run_nvidia(args, emulator) -> tuple:
    import torch

    from emulator.nvidia import NvidiaExample

    m, n, k = args.mnk
    example = NvidiaExample(tuple(args.mma_tiler), tuple(args.cluster), m, n, k, seed=args.seed,
                            max_active_clusters=args.clusters)
    emu = emulator.Emulator(mode=args.mode, seed=args.seed, ptx_filter=args.ptx_filter,
                            warp_roles=example.warp_roles, **_budget(args), **_timed(args))
    emu.register(*example.tensors)
    stats = emulator.combine(emu.call(example.compiled, *example.args))
    if args.timing_only:
        return ("TIMED", None, "timing only: outputs not computed, not checked"), stats
    out = example.output().to(torch.float64)
    ref = example.reference().to(torch.float64)
    return _compare([(out, ref, None)]), stats


# --------------------------------------------------------------------------------------------------
# submission.py's kernel
# --------------------------------------------------------------------------------------------------


class EmulatedB200:
    """The device facts submission.py's host path asks for (its DEVICE seam), answered as a B200's."""

    def __init__(self, workers: int | None):
        self.workers = workers

    def capability(self, device):
        return (10, 0)

    def co_resident_workers(self, device, cta_group: int) -> int:
        return self.workers or 148 // cta_group

    def stream(self, device):
        class Stream:
            cuda_stream = 0

        return Stream()


def board_inputs(spec: str):
    """The board's inputs for SPEC (generate_input, on the CPU), each c poisoned and inside guard rows."""
    import torch

    import eval as harness
    from reference import generate_input

    values = harness.parse_spec_line(spec)
    harness.check_spec_values(values, spec)
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
    import importlib.util

    spec = importlib.util.spec_from_file_location("submission", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["submission"] = module
    spec.loader.exec_module(module)
    return module


def run_submission(args, emulator) -> tuple:
    """Every --spec through submission.py's real host path: a verdict line per case, then the overall one."""
    S = load_submission(args.submission)
    S.sm100_config(args.config)  # a text that does not parse ends here, in one line
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
        except emulator.EmulatorError as e:
            word, max_error, message, stats = "ERROR", None, str(e), None
        results.append((word, max_error, message, stats))
        text = figures(max_error, stats, time.perf_counter() - start) if stats else message
        print(f"case {spec!r} {args.config} {args.mode} seed {args.seed}: {word} {text}", flush=True)
        if message and stats:
            print(f"  {message}", flush=True)
    worst = max(results, key=lambda r: EXIT[r[0]])
    ran = [r[3] for r in results if r[3] is not None]
    total = emulator.combine(ran) if ran else emulator.RunStats(0, 0.0, 0, 0)
    errors = [r[1] for r in results if r[1] is not None]
    passed = sum(r[0] == "PASS" for r in results)
    message = f"{passed} of {len(results)} cases pass"
    if worst[0] != "PASS":
        message += f"; first {worst[0]}: {worst[2]}"
    return (worst[0], max(errors) if errors else None, message), total


def run_benchmarks(args, emulator) -> tuple:
    """task.yml's benchmarks, timed: a line per benchmark (verdict, simulated board time, the clock's
    figures), then the geomean row."""
    import math

    import eval as harness

    if args.kernel == "flashinfer" or args.arch == "sm_90a":
        what = "FlashInfer's route (emulate.py flashinfer)" if args.kernel == "flashinfer" else "the sm_90a route"
        raise ValueError(f"benchmarks --{'kernel flashinfer' if args.kernel == 'flashinfer' else 'arch sm_90a'}: "
                         f"{what} is not on this branch yet (issue 24); ours on sm_100a is")
    S = load_submission(args.submission)
    S.sm100_config(args.config)
    S.SM100_CONFIG = args.config
    S.DEVICE = EmulatedB200(None)
    _, benchmarks, _ = harness.load_task(ROOT / "task.yml")
    results, times, total = [], [], []
    for number, entry in enumerate(benchmarks, start=1):
        if args.only not in (None, number):
            continue
        spec = harness._spec_line(entry)
        start = time.perf_counter()
        (word, max_error, message), stats = run_submission_case(S, spec, args, emulator)
        t = stats.timing
        results.append((word, max_error, message))
        total.append(stats)
        times.append(t["board_us"])
        print(f"benchmark {number} (G={entry['g']}, N={entry['n'][0]}, K={entry['k'][0]}) {args.config}: {word} "
              f"simulated {t['board_us']:.2f} us (kernel {t['kernel_us']:.2f} us, prologue {t['prologue_us']:.2f} us, "
              f"HBM read {t['hbm_read_mb']:.1f} MB, L2 hits {t['l2_hits']}/{t['l2_hits'] + t['l2_misses']}, "
              f"tensor pipe busy {100 * t['tensor_busy']:.0f}%) seconds={time.perf_counter() - start:.1f}"
              + (f"\n  {message}" if message else ""), flush=True)
    geomean = math.exp(sum(math.log(x) for x in times) / len(times))
    print(f"geomean ours {geomean:.2f} us ({args.machine.upper()} description, {len(times)} benchmark(s))",
          flush=True)
    worst = max(results, key=lambda r: EXIT[r[0]])
    errors = [r[1] for r in results if r[1] is not None]
    combined = emulator.combine(total)
    combined.timing["board_us"] = geomean
    return (worst[0], max(errors) if errors else None, ""), combined


def submission_roles(S) -> dict:
    return {**{w: "epilogue" for w in S.EPILOGUE_WARPS}, S.MMA_WARP: "MMA", S.TMA_WARP: "TMA"}


def emulated_call(S, data, extra_tensors, emu):
    """`S.custom_kernel(data)` with the emulator as the B200 (S.DEVICE must be an EmulatedB200): every
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
    return outputs, emulator.combine(emu.run_pending(S.compile_sm100(len(data[3]), S.sm100_config())))


def run_submission_case(S, spec: str, args, emulator) -> tuple:
    import torch

    from reference import ref_kernel

    data, guards = board_inputs(spec)
    emu = emulator.Emulator(mode=args.mode, seed=args.seed, ptx_filter=args.ptx_filter,
                            warp_roles=submission_roles(S), **_budget(args), **_timed(args))
    outputs, stats = emulated_call(S, data, guards, emu)
    if getattr(args, "timing_only", False):
        return ("TIMED", None, "timing only: outputs not computed, not checked"), stats
    # the kernel's results, copied before the reference runs: ref_kernel writes into the same c tensors
    results = [out.to(torch.float64) for out in outputs]
    reference = [ref.to(torch.float64) for ref in ref_kernel(data)]
    return _compare(list(zip(results, reference, guards))), stats


def _compare(pairs):
    """(verdict word, max error, message) over (out, ref, guard buffer) triples."""
    import torch

    worst = 0.0
    for g, (out, ref, guard) in enumerate(pairs):
        if guard is not None:
            n = out.shape[1]
            rows = guard.numel() // n
            outside = torch.cat([guard[:GUARD_ROWS * n], guard[(rows - GUARD_ROWS) * n:]])
            if (outside != GUARD).any():
                return "OUTSIDE", None, f"group {g}: {(outside != GUARD).sum().item()} guard cells written"
        err = (out - ref).abs()
        bad = ~(err <= ATOL + RTOL * ref.abs())
        worst = max(worst, float(torch.nan_to_num(err, nan=float("inf")).max()))
        if bad.any():
            idx = tuple(int(i) for i in bad.nonzero()[0])
            return "FAIL", worst, (f"group {g}: {int(bad.sum())} of {bad.numel()} outputs wrong, first at "
                                   f"{idx}: {float(out[idx])} vs {float(ref[idx])}")
    return "PASS", worst, ""


def _budget(args) -> dict:
    return {} if args.step_budget is None else {"step_budget": args.step_budget}


def _timed(args) -> dict:
    """The Emulator's timed-mode arguments; with --timeline a fresh Timeline of the first pair of CTAs,
    drawn after the run (the last case's, when there are several)."""
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
    options = {"machine": machine, "timing_only": args.timing_only}
    if args.timeline is None:
        return options
    from emulator.timeline import Timeline

    args.recorded = Timeline(workers=(0, 1))
    return {**options, "timeline": args.recorded}


def _draw_timeline(args, word: str) -> None:
    recorded = getattr(args, "recorded", None)
    if recorded is not None and recorded.rows:
        title = " ".join(a for a in sys.argv[1:] if not a.startswith("--timeline")) + f": {word}"
        recorded.draw(args.timeline, title=title)
        print(f"timeline: {args.timeline}", flush=True)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.time or args.timeline or args.timing_only:
        args.mode = "timed"
    os.environ.setdefault("CUTE_DSL_DISABLE_FILE_CACHING", "1")
    start = time.perf_counter()
    try:
        from emulator import driver

        driver.install()
        import emulator
    except Exception as e:  # noqa: BLE001 - the one line says why
        text = str(e)
        print(f"ERROR {text if text.startswith('setup: ') else 'setup: ' + text}", flush=True)
        return EXIT["ERROR"]
    try:
        run = {"nvidia": run_nvidia, "submission": run_submission, "benchmarks": run_benchmarks}[args.command]
        (word, max_error, message), stats = run(args, emulator)
    except emulator.HangError as e:
        print(e.report, flush=True)
        return verdict("HANG", f"{e.message} seconds={time.perf_counter() - start:.1f}")
    except emulator.EmulatorError as e:
        return verdict("ERROR", f"{e} seconds={time.perf_counter() - start:.1f}")
    except ValueError as e:  # a configuration text or spec that does not parse, a shape the kernel refuses
        print(f"emulate.py: {e}", flush=True)
        return 5
    if message:
        print(message, flush=True)
    if stats.timing:
        import json

        print("timing: " + json.dumps({k: round(v, 4) if isinstance(v, float) else v
                                       for k, v in stats.timing.items()}), flush=True)
    _draw_timeline(args, word)
    return verdict(word, figures(max_error, stats, time.perf_counter() - start))


if __name__ == "__main__":
    sys.exit(main())
