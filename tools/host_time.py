"""Host time of one custom_kernel call, first call on never-seen tensors against a repeated call.

    python tools/host_time.py [--calls 40] [--markdown]

For each task.yml benchmark: a first call builds the shape's plan (compile, schedule), as the
board's correctness pass on clones does; then `--calls` never-seen inputs of the same shape are
each called once (first-seen), then all again five times (repeated), timed on the host with
perf_counter while the GPU is kept busy and the launch queue short (no launch waits). Rows:
  - the path this GPU runs (Hopper on 9.0, B200 on 10.0), whole calls: lookup, checks, address
    writes, the compiled host function (TMA descriptor encoding and the launches);
  - its compiled host function alone, repeated (what the launch itself costs);
  - on a GPU other than a B200, the sm_100a path up to the launch: the plan built with the B200
    schedule and launch arguments, the compiled launch replaced by a stand-in (the sm_100a cubin
    cannot load here); its descriptor encoding (5 per group) is not included.
Needs a CUDA GPU.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


class _StandIn:
    """Takes the place of a CompiledLaunch: holds the arguments, launches nothing."""

    def __init__(self, args):
        self.args = args

    def __call__(self, stream):
        self.args.stream.value = stream.cuda_stream


def _time_calls(function, inputs, rounds):
    import torch

    spans = []
    for _ in range(rounds):
        # Each round starts on an idle queue with the GPU kept busy, so no launch waits for
        # queue space (about a thousand pending launches block the host).
        torch.cuda.synchronize()
        torch.cuda._sleep(300_000_000)
        for data in inputs:
            start = time.perf_counter()
            function(data)
            spans.append((time.perf_counter() - start) * 1e6)
    return spans


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=40, help="never-seen inputs per benchmark")
    parser.add_argument("--markdown", action="store_true", help="print a table for BENCHMARKS.md")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("host_time.py needs a CUDA GPU", file=sys.stderr)
        return 2
    import yaml

    import submission
    from reference import generate_input

    major, _ = torch.cuda.get_device_capability()
    here = "B200 path" if major == 10 else "Hopper path"
    rows = []
    benchmarks = yaml.safe_load((ROOT / "task.yml").read_text())["benchmarks"]
    for number, spec in enumerate(benchmarks, 1):
        base = generate_input(**spec)
        submission.custom_kernel(base)
        torch.cuda.synchronize()
        key = (submission._signature(base[3]), base[0][0][0].device)
        plan = submission._plans[key]
        inputs = [generate_input(**dict(spec, seed=spec["seed"] + 42 * i)) for i in range(1, args.calls + 1)]
        torch.cuda.synchronize()
        first = _time_calls(submission.custom_kernel, inputs, 1)
        repeated = _time_calls(submission.custom_kernel, inputs, 5)
        stream = torch.cuda.current_stream()
        launch_only = _time_calls(lambda _: plan.launch(stream), inputs, 5)
        torch.cuda.synchronize()
        rows.append((number, f"{here}, whole call", first, repeated))
        rows.append((number, f"{here}, compiled host function alone", None, launch_only))
        if major != 10:
            sizes = submission.validate_inputs(base)
            launch_args, buffers = submission.sm100_launch_args(sizes, base[0][0][0].device, submission.sm100_config())
            standin = submission.ShapePlan(sizes, submission._metadata(submission._input_tensors(base)), _StandIn(launch_args))
            b200_first = _time_calls(standin.run, inputs, 1)
            b200_repeated = _time_calls(standin.run, inputs, 5)
            rows.append((number, "B200 path up to the launch", b200_first, b200_repeated))
        torch.cuda.synchronize()

    def cell(spans):
        return "-" if spans is None else f"{statistics.median(spans):.1f} / {max(spans):.1f}"

    header = ("bench", "what", "first-seen us (median / max)", "repeated us (median / max)")
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + " --- |" * len(header))
        for number, what, first, repeated in rows:
            print(f"| {number} | {what} | {cell(first)} | {cell(repeated)} |")
    else:
        print(f"{header[0]:5} {header[1]:40} {header[2]:>30} {header[3]:>28}")
        for number, what, first, repeated in rows:
            print(f"{number:<5} {what:40} {cell(first):>30} {cell(repeated):>28}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
