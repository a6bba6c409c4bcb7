"""Where the Hopper kernel's time goes, on an H200 (the figures behind the scheduler's cost model).

    python tools/sm90_profile.py tiles       # SM clock cycles per tile, by wgmma N and K
    python tools/sm90_profile.py tiles --json FILE   # the same, also written to FILE for tools/b200_model.py --hopper
    python tools/sm90_profile.py timeline    # token pre-pass and GEMM kernel times, overlaps, gaps

`tiles` runs an instrumented copy of sm90_kernel.py (written to a temporary directory, never to
the repository): the first consumer thread stamps %clock into columns 3 and 7 of each tile
record (the device never reads them) before and after the tile.  Each task.yml benchmark runs
twice (the second call is read); per (N, K) it prints the median cycles per tile and per k-tile,
and the busiest CTA's span against the mean (how well the schedule balanced). `--json FILE` writes
the same figures: {"format": "sm90_profile_tiles/1", "device": ..., "benchmarks": [{"benchmark": 1,
"busiest_span_cycles": ..., "mean_span_cycles": ..., "tiles": [{"n": wgmma N, "k": K, "count": tiles,
"median_cycles": cycles per tile}, ...]}, ...]}.

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
        raise ValueError("sm90_kernel.py changed: update the anchors in tools/sm90_profile.py")
    return source.replace(anchor, CLOCK_HELPER.lstrip("\n") + anchor).replace(TILE_CALL, STAMPED_CALL)


def load_instrumented():
    path = Path(tempfile.mkdtemp()) / "sm90_kernel.py"
    path.write_text(instrumented_source((ROOT / "sm90_kernel.py").read_text()))
    spec = importlib.util.spec_from_file_location("sm90_kernel", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["sm90_kernel"] = module  # submission imports it by this name
    spec.loader.exec_module(module)
    return module


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
        plan = submission._plans[(submission._signature(data[3]), data[0][0][0].device, submission.SM100_CONFIG)]
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
    parser.add_argument("what", choices=("tiles", "timeline"))
    parser.add_argument("--json", metavar="FILE", help="tiles: also write the figures to FILE (format above)")
    args = parser.parse_args()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        sys.exit("sm90_profile.py needs a CUDA GPU of compute capability 9.0 (H100/H200)")
    tiles_report(args.json) if args.what == "tiles" else timeline_report()


if __name__ == "__main__":
    main()
