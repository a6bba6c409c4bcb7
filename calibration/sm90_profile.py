"""Where the Hopper kernel's time goes, on an H200 (the figures behind the scheduler's cost model).

    python calibration/sm90_profile.py tiles       # SM clock cycles per tile, by wgmma N and K
    python calibration/sm90_profile.py tiles --json FILE   # the same, also written to FILE for tools/b200_model.py --hopper
    python calibration/sm90_profile.py timeline    # token pre-pass and GEMM kernel times, overlaps, gaps

`tiles` runs an instrumented copy of sm90_kernel.py (written to a temporary directory, never to
the repository): the first consumer thread stamps %clock into columns 3 and 7 of each tile
record (the device never reads them) before and after the tile.  Each task.yml benchmark runs
twice (the second call is read); per (N, K) it prints the median cycles per tile and per k-tile,
and the busiest CTA's span against the mean (how well the schedule balanced). `--json FILE` writes
the same figures: {"format": "sm90_profile_tiles/1", "device": ..., "benchmarks": [{"benchmark": 1,
"busiest_span_cycles": ..., "mean_span_cycles": ..., "tiles": [{"n": wgmma N, "k": K, "count": tiles,
"median_cycles": cycles per tile}, ...]}, ...]}.

`phases` runs another instrumented copy: every consumer thread stamps %clock at five points of each
k-tile (before the weight-stage wait, after it, after the weights are dequantized and their stage
released, after the token-stage wait, after the wgmmas are issued and committed) and after the tile's
epilogue; the first consumer thread packs the tile's mean cycles per k-tile of each phase (10 bits each,
capped at 1023) and the tail (the last wgmma group's drain + the epilogue, in units of 4 cycles) into
columns 3 and 7. It prints, per (N, K), the median of each phase. `--emulate` runs the same copy in the
emulator's timed mode with the H200 description on this CPU (`--spec` chooses the cases; each one
prints beside the H200's figures when `--against FILE` names a `phases --json` file). The stamps cost a
few instructions per k-tile on both; compare `tiles` for the uninstrumented totals.

`timeline` records 3 rounds of eval.py's protocol (15 inputs, L2 flushed) with torch.profiler and
prints medians of the two kernels' durations and of the gaps between them.
"""

import argparse
import collections
import importlib.util
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

CLOCK_HELPER = '''
@dsl_user_op
def clock32(*, loc=None, ip=None):
    return cutlass.Int32(asm(T.i32(), [], "mov.u32 $0, %clock;", "=r", True))


'''
TILE_CALL = "            st = _consume_tile(VARIANTS[vi], c, tile, pw, pt, st)\n"
STAMPED_CALL = (
    "            if tidx == 128:\n                tiles[t, 3] = clock32()\n" + TILE_CALL
    + "            if tidx == 128:\n                tiles[t, 7] = clock32()\n"
)


def instrumented_source(source):
    """sm90_kernel.py's text with the clock stamps added; ValueError if its anchors moved."""
    anchor = "@dsl_user_op\ndef pin("
    if source.count(anchor) != 1 or source.count(TILE_CALL) != 1:
        raise ValueError("sm90_kernel.py changed: update the anchors in calibration/sm90_profile.py")
    return source.replace(anchor, CLOCK_HELPER.lstrip("\n") + anchor).replace(TILE_CALL, STAMPED_CALL)


# phases: (anchor in _consume_tile's k-loop, the accumulator the time since the previous stamp goes to);
# the stamp is inserted before the anchor text when the name starts with "<", else after it
PHASES = ("weight wait", "dequantize", "token wait", "wgmma issue", "wait_group + release")
LOOP = "            "
PHASE_STAMPS = (
    ("<" + LOOP + "pw.consumer_wait(w_read)\n", "ph4"),
    (LOOP + "pw.consumer_wait(w_read)\n", "ph0"),
    (LOOP + "w_read.advance()\n", "ph1"),
    (LOOP + "pt.consumer_wait(t_read)\n", "ph2"),
    (LOOP + "warpgroup.commit_group()\n", "ph3"),
)
PHASE_SETUP = ("    w_read, t_read, t_release = st\n",
               "    ph0 = ph1 = ph2 = ph3 = ph4 = cutlass.Int32(0)\n    last_ = clock32()\n")
PHASE_RETURN = "    return w_read, t_read, t_release\n"
PHASE_PACK = """    now_ = clock32()
    tail_ = cutlass.min((now_ - last_) // 4, 1023)
    nk_ = tile.k_end // TILE_K
    p3_ = cutlass.min(ph0 // nk_, 1023) | (cutlass.min(ph1 // nk_, 1023) << 10) | (cutlass.min(ph2 // nk_, 1023) << 20)
    p7_ = cutlass.min(ph3 // nk_, 1023) | (cutlass.min(ph4 // nk_, 1023) << 10) | (tail_ << 20)
    return w_read, t_read, t_release, p3_, p7_
"""
PHASE_LOOP_END = ("    warpgroup.wait_group(0)\n", "ph4")
PHASE_CALL = (
    "            r_ = _consume_tile(VARIANTS[vi], c, tile, pw, pt, st)\n"
    "            st = (r_[0], r_[1], r_[2])\n"
    "            if tidx == 128:\n                tiles[t, 3] = r_[3]\n                tiles[t, 7] = r_[4]\n"
)


def _stamp(indent: str, name: str) -> str:
    return f"{indent}now_ = clock32()\n{indent}{name} = {name} + (now_ - last_)\n{indent}last_ = now_\n"


def phases_source(source):
    """sm90_kernel.py's text with the per-phase stamps of `phases`; ValueError if its anchors moved."""
    anchor = "@dsl_user_op\ndef pin("
    texts = [anchor, TILE_CALL, PHASE_SETUP[0], PHASE_RETURN, PHASE_LOOP_END[0]]
    texts += [a.lstrip("<") for a, _ in PHASE_STAMPS]
    if any(source.count(t) != 1 for t in texts):
        raise ValueError("sm90_kernel.py changed: update the phase anchors in calibration/sm90_profile.py")
    out = source.replace(anchor, CLOCK_HELPER.lstrip("\n") + anchor).replace(TILE_CALL, PHASE_CALL)
    out = out.replace(PHASE_SETUP[0], PHASE_SETUP[0] + PHASE_SETUP[1])
    for text, name in PHASE_STAMPS:
        if text.startswith("<"):
            out = out.replace(text[1:], _stamp(LOOP, name) + text[1:])
        else:
            out = out.replace(text, text + _stamp(LOOP, name))
    out = out.replace(PHASE_LOOP_END[0], _stamp("    ", PHASE_LOOP_END[1]) + PHASE_LOOP_END[0])
    return out.replace(PHASE_RETURN, PHASE_PACK)


def unpack_phases(col3: int, col7: int) -> list:
    """The five phases' mean cycles per k-tile and the tail's cycles, from one tile record."""
    fields = [(col3 >> s) & 1023 for s in (0, 10, 20)] + [(col7 >> s) & 1023 for s in (0, 10, 20)]
    return fields[:5] + [4 * fields[5]]


def load_instrumented(phases: bool = False):
    path = Path(tempfile.mkdtemp()) / "sm90_kernel.py"
    source = (ROOT / "sm90_kernel.py").read_text()
    path.write_text(phases_source(source) if phases else instrumented_source(source))
    spec = importlib.util.spec_from_file_location("sm90_kernel", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["sm90_kernel"] = module  # submission imports it by this name
    spec.loader.exec_module(module)
    return module


def plan_of(submission, data):
    """The plan custom_kernel made for `data` (its tile table is where the stamps land)."""
    return submission._plans[(submission._signature(data[3]), data[0][0][0].device, submission.SM100_CONFIG)]


def _benchmarks():
    import check

    return [case for case in check.ladder() if case.stage == "benchmarks"]


def tiles_report(json_path=None):
    kernel = load_instrumented()  # submission imports sm90_kernel by name: it gets this copy
    import check
    import submission

    found = []
    for number, case in enumerate(_benchmarks(), 1):
        data, _ = check.make_input(case, "cuda")
        for _ in range(2):
            submission.custom_kernel(data)
        torch.cuda.synchronize()
        plan = plan_of(submission, data)
        tiles, cta_tiles = (t.tolist() for t in plan.launch.buffers[:2])
        by_shape = collections.defaultdict(list)
        spans = []
        for row in cta_tiles:
            records = tiles[row[0]:row[-1]]
            for rec in records:  # group, n0, t0, (start), m_end, n, k, (end)
                n_tok = -(-(rec[4] - rec[2]) // kernel.TOKEN_STEP) * kernel.TOKEN_STEP  # wgmma N
                by_shape[(n_tok, rec[6])].append((rec[7] - rec[3]) & 0xFFFFFFFF)
            spans.append((records[-1][7] - records[0][3]) & 0xFFFFFFFF)
        mean = statistics.mean(spans)
        print(f"bench{number}: {len(spans)} CTAs, busiest span {max(spans)} cycles, "
              f"mean {mean:.0f}, busiest / mean {max(spans) / mean:.3f}")
        shapes = []
        for (n_tok, k), cycles in sorted(by_shape.items()):
            med = statistics.median(cycles)
            print(f"  N {n_tok:3d}  K {k:5d}  tiles {len(cycles):4d}  cycles/tile {med:8.0f}  "
                  f"cycles/k-tile {med / (k // kernel.TILE_K):7.1f}")
            shapes.append({"n": n_tok, "k": k, "count": len(cycles), "median_cycles": med})
        found.append({"benchmark": number, "busiest_span_cycles": max(spans), "mean_span_cycles": mean,
                      "tiles": shapes})
    if json_path is not None:
        Path(json_path).write_text(json.dumps(
            {"format": "sm90_profile_tiles/1", "device": torch.cuda.get_device_name(), "benchmarks": found}, indent=1))
        print(f"written: {json_path}")


def phase_rows(kernel, plan) -> dict:
    """(wgmma N, K) -> the tiles' phase records (unpack_phases), from a plan's tile table after a call."""
    tiles, cta_tiles = (t.tolist() for t in plan.launch.buffers[:2])
    by_shape = collections.defaultdict(list)
    for row in cta_tiles:
        for rec in tiles[row[0]:row[-1]]:
            n_tok = -(-(rec[4] - rec[2]) // kernel.TOKEN_STEP) * kernel.TOKEN_STEP
            by_shape[(n_tok, rec[6])].append(unpack_phases(rec[3] & 0xFFFFFFFF, rec[7] & 0xFFFFFFFF))
    return by_shape


def phase_summary(label: str, by_shape: dict, against: dict | None = None) -> list:
    """Print and return, per (N, K), the median of each phase (and its H200 counterpart from `against`)."""
    print(f"{label}:  cycles per k-tile: " + " | ".join(PHASES) + " || tail cycles (drain + epilogue)")
    shapes = []
    for (n_tok, k), rows in sorted(by_shape.items()):
        med = [statistics.median(column) for column in zip(*rows)]
        line = f"  N {n_tok:3d} K {k:5d} tiles {len(rows):4d}: " + " ".join(f"{v:6.0f}" for v in med[:5]) \
            + f" = {sum(med[:5]):6.0f} || {med[5]:6.0f}"
        other = (against or {}).get((n_tok, k))
        if other is not None:
            line += "\n    H200:                  " + " ".join(f"{v:6.0f}" for v in other[:5]) \
                + f" = {sum(other[:5]):6.0f} || {other[5]:6.0f}"
        print(line)
        shapes.append({"n": n_tok, "k": k, "count": len(rows), "median": med})
    return shapes


def phases_report(specs, json_path=None):
    kernel = load_instrumented(phases=True)
    import eval as harness
    import submission
    from reference import generate_input

    found = []
    for spec in specs:
        data = generate_input(**harness.parse_spec_line(spec))
        for _ in range(2):
            submission.custom_kernel(data)
        torch.cuda.synchronize()
        plan = plan_of(submission, data)
        found.append({"spec": spec, "shapes": phase_summary(f"H200 {spec!r}", phase_rows(kernel, plan))})
    if json_path is not None:
        Path(json_path).write_text(json.dumps(
            {"format": "sm90_profile_phases/1", "device": torch.cuda.get_device_name(), "phases": PHASES,
             "benchmarks": found}, indent=1))
        print(f"written: {json_path}")


def phases_emulated(specs, against_path=None, machine_set=()):
    """`phases --emulate`: the same stamps, read from the timed emulator's H200 (tools/emulate.py's route)."""
    import emulate

    emulate.silence_dsl_deprecation()
    from emulator import driver

    status = driver.rerun_with_stub(__file__, sys.argv[1:])  # a GPU machine: torch holds the real driver
    if status is not None:
        return status
    driver.install(gpu=emulate.ARCH_GPU["sm_90a"])
    import emulator

    kernel = load_instrumented(phases=True)
    against = {}
    if against_path is not None:
        for bench in json.loads(Path(against_path).read_text())["benchmarks"]:
            against[bench["spec"]] = {(s["n"], s["k"]): s["median"] for s in bench["shapes"]}
    argv = ["submission", "--arch", "sm_90a", "--mode", "timed", "--machine", "h200", "--timing-only"]
    for item in machine_set:
        argv += ["--set", item]
    for spec in specs:
        args = emulate.parse_args(argv + ["--spec", spec])
        args.mode = "timed"
        S = emulate.load_submission(ROOT / "submission.py")
        emulate.EmulatedH200(None).install(S)
        _, stats = emulate.run_submission_case(S, spec, args, emulator)
        (plan,) = S._plans.values()
        print(f"simulated: {stats.timing}")
        phase_summary(f"emulated {spec!r}", phase_rows(kernel, plan), against.get(spec))


def timeline_report():
    import check
    import submission
    from torch.profiler import ProfilerActivity, profile

    median = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731
    for number, case in enumerate(_benchmarks(), 1):
        inputs = [check.make_input(case, "cuda", seed=1111 + 42 * i)[0] for i in range(15)]
        for data in inputs:
            submission.custom_kernel(data)
        flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                flush.zero_()
                torch.cuda._sleep(3_000_000)
                for data in inputs:
                    submission.custom_kernel(data)
            torch.cuda.synchronize()
        kernels = sorted(
            (e.time_range.start, e.time_range.end, "token" if "token_kernel" in e.name else "gemm")
            for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA and ("token_kernel" in e.name or "gemm_kernel" in e.name)
        )
        length = collections.defaultdict(list)
        for start, end, name in kernels:
            length[name].append(end - start)
        overlap, gap, call = [], [], []
        for (s0, e0, n0), (s1, e1, n1) in zip(kernels, kernels[1:]):
            if (n0, n1) == ("token", "gemm"):
                overlap.append(e0 - s1)
                call.append(e1 - s0)
            elif (n0, n1) == ("gemm", "token"):
                gap.append(s1 - e0)
        print(f"bench{number}: token pre-pass {median(length['token']):.1f} us, GEMM {median(length['gemm']):.1f} us, "
              f"overlap (PDL) {median(overlap):.1f} us, GEMM end -> next pre-pass {median(gap):.1f} us, "
              f"pre-pass start -> GEMM end {median(call):.1f} us ({len(call)} calls)")


def main():
    parser = argparse.ArgumentParser(prog="sm90_profile.py", description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=("tiles", "phases", "timeline"))
    parser.add_argument("--json", metavar="FILE", help="tiles, phases: also write the figures to FILE (format above)")
    parser.add_argument("--emulate", action="store_true", help="phases: the timed emulator's H200, on this CPU")
    parser.add_argument("--spec", action="append", default=None, help="phases: a case, as eval.py's spec (default: task.yml's benchmarks)")
    parser.add_argument("--against", metavar="FILE", help="--emulate: the H200's `phases --json` file, printed beside")
    parser.add_argument("--set", nargs="*", default=(), metavar="NAME=VALUE",
                        help="--emulate: change constants of the H200 description (what-if runs)")
    args = parser.parse_args()
    if args.what == "phases":
        import check

        specs = args.spec or [check.case_spec(c) for c in _benchmarks()]
        if args.emulate:
            sys.exit(phases_emulated(specs, args.against, args.set))
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        sys.exit("sm90_profile.py needs a CUDA GPU of compute capability 9.0 (H100/H200)")
    if args.what == "phases":
        return phases_report(specs, args.json)
    tiles_report(args.json) if args.what == "tiles" else timeline_report()


if __name__ == "__main__":
    main()
