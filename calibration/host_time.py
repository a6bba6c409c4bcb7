"""Host time of one custom_kernel call on repeated tensors, per task.yml benchmark, and two floors.

    python calibration/host_time.py [--rounds 20] [--tree DIR] [--markdown]

For each benchmark: the board's 15 inputs (seed + 42 each), each called once to build the plan (and
compile); then `--rounds` rounds, each calling every variant on the 15 inputs in turn, timed on the
host with perf_counter while the GPU is kept busy and the launch queue short (no launch waits for
queue space). Variants, interleaved round by round so that drift touches them alike:
  - whole call: custom_kernel(data), the lookup, the input checks, the address writes, the stream
    query and the compiled host function;
  - compiled host function: the DSL's generated host code alone (TMA descriptors encoded for each
    group, the launches), on the last call's arguments;
  - driver launches, prepared parameters: the same kernels launched by cuLaunchKernelEx (through
    cuda.bindings) from parameter buffers copied once out of a CUDA-graph capture of the compiled
    host function, which bypasses that host function (descriptors encoded once, not per call).
    Its outputs are checked against the reference first.
Each row gives the median and the 90th percentile of rounds x 15 calls, in microseconds.

`--tree DIR` imports submission.py (and sm90_kernel.py) from DIR instead of the repository, e.g. an
older commit's files written by `git show COMMIT:submission.py > DIR/submission.py`, to compare the
per-call path of two trees on one machine; only the whole call is timed then. Separate processes
differ by more than the paths do (a median moved 54 -> 92 us between two runs of one tree), so
`--older` instead rebuilds the older trees' per-call code on this tree's plan (OlderPaths) and
times it in the same rounds. Needs a CUDA GPU.
"""

import argparse
import ctypes
import datetime
import functools
import importlib.metadata
import operator
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SLEEP_CYCLES = 50_000_000  # ~25 ms of GPU clock per round: longer than a round's host work


def _check(result):
    """cuda.bindings returns (CUresult, values...): the values, or RuntimeError naming the error."""
    from cuda.bindings import driver

    error, *values = result
    if error != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver error {error!r}")
    return values[0] if len(values) == 1 else values


class PreparedLaunch:
    """The kernels a compiled host function launches, captured once (CUDA graph stream capture) and
    launched again with cuLaunchKernelEx from copies of their parameter buffers: the host cost of a
    launch that skips the DSL's host code. The kernel after the first is launched with programmatic
    stream serialization when `pdl` is set (as the Hopper path's GEMM is)."""

    def __init__(self, launch, capture_stream: int, pdl: bool, stream_handle: int):
        from cuda.bindings import driver

        self.driver = driver
        launch.args.stream.value = capture_stream
        capture = driver.CUstream(capture_stream)
        _check(driver.cuStreamBeginCapture(capture, driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED))
        try:
            launch._run(launch._packed)
        finally:
            graph = _check(driver.cuStreamEndCapture(capture))
        _, count = _check(driver.cuGraphGetNodes(graph, 0))
        nodes, _ = _check(driver.cuGraphGetNodes(graph, count))
        self.launches, self._keep = [], []
        for index, node in enumerate(nodes):
            if _check(driver.cuGraphNodeGetType(node)) != driver.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL:
                continue
            params = _check(driver.cuGraphKernelNodeGetParams(node))
            # Handles copied by value: the struct's getters view its memory, which the graph frees.
            function = driver.CUfunction(int(params.func))
            if not int(function):
                function = driver.CUfunction(int(_check(driver.cuKernelGetFunction(driver.CUkernel(int(params.kern))))))
            config = driver.CUlaunchConfig()
            config.gridDimX, config.gridDimY, config.gridDimZ = params.gridDimX, params.gridDimY, params.gridDimZ
            config.blockDimX, config.blockDimY, config.blockDimZ = params.blockDimX, params.blockDimY, params.blockDimZ
            config.sharedMemBytes = params.sharedMemBytes
            config.hStream = driver.CUstream(stream_handle)
            if pdl and self.launches:
                attribute = driver.CUlaunchAttribute()
                attribute.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
                attribute.value.programmaticStreamSerializationAllowed = 1
                config.attrs = [attribute]
                config.numAttrs = 1
                self._keep.append(attribute)
            self.launches.append((config, function, self._copy_parameters(function, int(params.kernelParams))))
            self._keep.append(params)
        _check(driver.cuGraphDestroy(graph))

    def _copy_parameters(self, function, pointers: int) -> int:
        """The address of a void* array pointing into a buffer of our own that holds a copy of every
        parameter (cuFuncGetParamInfo gives each one's size)."""
        sizes = []
        while True:
            error, _, size = self.driver.cuFuncGetParamInfo(function, len(sizes))
            if error != self.driver.CUresult.CUDA_SUCCESS:
                break
            sizes.append(size)
        sources = (ctypes.c_void_p * len(sizes)).from_address(pointers)
        buffers = [ctypes.create_string_buffer(ctypes.string_at(sources[i], size), size) for i, size in enumerate(sizes)]
        array = (ctypes.c_void_p * len(sizes))(*(ctypes.addressof(buffer) for buffer in buffers))
        self._keep += [buffers, array]
        return ctypes.addressof(array)

    def __call__(self) -> None:
        for config, function, parameters in self.launches:
            _check(self.driver.cuLaunchKernelEx(config, function, parameters, 0))


def _time_rounds(variants: dict, inputs, rounds: int) -> dict:
    """{name: [us per call]} over `rounds` rounds, each calling every variant on every input."""
    import torch

    spans = {name: [] for name in variants}
    for _ in range(rounds):
        for name, function in variants.items():
            # Each variant starts on an idle queue with the GPU kept busy, so no launch waits for
            # queue space (about a thousand pending launches block the host).
            torch.cuda.synchronize()
            torch.cuda._sleep(SLEEP_CYCLES)
            for data in inputs:
                start = time.perf_counter()
                function(data)
                spans[name].append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    return spans


class OlderPaths:
    """The per-call Python of older trees, rebuilt on this tree's plan and compiled launch, so that
    one process times them side by side (separate processes differ by more than the paths do). The
    compiled host function is the same in all of them; what differs is the code around it:
      - a1842eb: no lock, the stream as a torch.cuda.Stream built per call, no ordering of streams;
      - a1842eb + lock: the lock of 5b5003f around the address writes and the launch;
      - a1842eb + event: the per-call event of 316b4c0 (sm90_kernel.ScratchLaunch: a capture check,
        the stream compared with the previous call's, an event recorded after each launch);
      - 427c92b~1: both, as main was before issue 21 (the tree the issue measured as 90af688)."""

    def __init__(self, submission, plan):
        import torch

        self.s, self.plan, self.torch = submission, plan, torch
        self.event, self.previous_stream = torch.cuda.Event(), None
        self.plans = {}  # a1842eb's cache: (signature, device) -> plan

    def _lookup(self, data):
        key = (self.s._signature(data[3]), data[0][0][0].device)
        plan = self.plans.get(key)
        if plan is None:
            plan = self.plans[key] = self.plan
        return plan

    def _checked_pointers(self, data):
        s, plan = self.s, self.plan
        tensors = s._input_tensors(data)
        if s._metadata(tensors) != plan.metadata:
            s.validate_inputs(data)
        pointers = [t.data_ptr() for t in tensors]
        if functools.reduce(operator.or_, pointers) % 16:
            s.validate_inputs(data)
        return pointers

    def _launch_with_event(self, stream):
        torch, launch = self.torch, self.plan.launch
        if torch.cuda.is_current_stream_capturing():
            launch(stream)
            return
        if self.previous_stream is not None and stream != self.previous_stream:
            stream.wait_event(self.event)
        launch(stream)
        self.event.record(stream)
        self.previous_stream = stream

    def a1842eb(self, data):
        plan = self._lookup(data)
        pointers = self._checked_pointers(data)
        plan.launch.args.set_inputs(pointers)
        plan.launch(self.torch.cuda.current_stream(plan.metadata[0][3]))
        return [c for _, _, c in data[0]]

    def with_lock(self, data):
        plan = self._lookup(data)
        pointers = self._checked_pointers(data)
        stream = self.torch.cuda.current_stream(plan.metadata[0][3])
        with plan.launch_lock:
            plan.launch.args.set_inputs(pointers)
            plan.launch(stream)
        return [c for _, _, c in data[0]]

    def with_event(self, data):
        plan = self._lookup(data)
        pointers = self._checked_pointers(data)
        plan.launch.args.set_inputs(pointers)
        self._launch_with_event(self.torch.cuda.current_stream(plan.metadata[0][3]))
        return [c for _, _, c in data[0]]

    def before(self, data):
        plan = self._lookup(data)
        pointers = self._checked_pointers(data)
        stream = self.torch.cuda.current_stream(plan.metadata[0][3])
        with plan.launch_lock:
            plan.launch.args.set_inputs(pointers)
            self._launch_with_event(stream)
        return [c for _, _, c in data[0]]


def _plan_of(submission, sizes):
    """The plan custom_kernel built for `sizes` (any tree's _plans, whatever its key)."""
    return next(plan for plan in submission._plans.values() if tuple(plan.sizes) == tuple(sizes))


def _prepared_launch_checked(submission, plan, data, pdl: bool):
    """A PreparedLaunch of the plan, after checking that it computes data's outputs."""
    import torch

    from reference import ref_kernel

    expected = [c.clone() for c in ref_kernel(([(a, b, torch.empty_like(c)) for a, b, c in data[0]], *data[1:]))]
    submission.custom_kernel(data)  # the plan's arguments now hold data's addresses
    for _, _, c in data[0]:
        c.fill_(float("nan"))
    torch.cuda.synchronize()
    capture = torch.cuda.Stream()  # the legacy default stream cannot be captured
    prepared = PreparedLaunch(plan.launch, capture.cuda_stream, pdl, torch.cuda.current_stream().cuda_stream)
    prepared()
    torch.cuda.synchronize()
    for group, ((_, _, c), want) in enumerate(zip(data[0], expected)):
        if not torch.allclose(c.float(), want.float(), rtol=1e-3, atol=1e-3):
            raise RuntimeError(f"the prepared launch's group {group} differs from the reference")
    return prepared


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="rounds of 15 calls per variant")
    parser.add_argument("--tree", type=Path, metavar="DIR", help="import submission.py from DIR (whole call only)")
    parser.add_argument("--older", action="store_true",
                        help="also time the per-call paths of older trees on this plan (OlderPaths)")
    parser.add_argument("--only", type=int, metavar="N", help="benchmark number N only (from 1)")
    parser.add_argument("--markdown", action="store_true", help="print a table for BENCHMARKS.md")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("host_time.py needs a CUDA GPU", file=sys.stderr)
        return 2
    if args.tree:
        sys.path.insert(0, str(args.tree.resolve()))
    import submission

    import eval as harness
    from reference import generate_input

    _, benchmarks, _ = harness.load_task(ROOT / "task.yml")
    tree = str(args.tree) if args.tree else "this tree"
    print(f"{datetime.date.today()}, {torch.cuda.get_device_name()}, Python {platform.python_version()}, "
          f"torch {torch.__version__}, nvidia-cutlass-dsl {importlib.metadata.version('nvidia-cutlass-dsl')}, "
          f"submission from {tree}; {args.rounds} rounds x 15 calls per variant", flush=True)
    rows = []
    for number, spec in enumerate(benchmarks, 1):
        if args.only not in (None, number):
            continue
        inputs = []
        for i in range(1, 16):
            inputs.append(generate_input(**dict(spec, seed=spec["seed"] + 42 * i)))
        for data in inputs:
            submission.custom_kernel(data)
        torch.cuda.synchronize()
        variants = {"whole call": submission.custom_kernel}
        if not args.tree:
            plan = _plan_of(submission, submission.validate_inputs(inputs[0]))
            if args.older:
                older = OlderPaths(submission, plan)
                variants.update({"whole call, a1842eb's path": older.a1842eb,
                                 "whole call, a1842eb's path + lock": older.with_lock,
                                 "whole call, a1842eb's path + event": older.with_event,
                                 "whole call, 427c92b~1's path (lock + event)": older.before})
            variants["compiled host function"] = lambda _, launch=plan.launch: launch._run(launch._packed)
            try:
                prepared = _prepared_launch_checked(submission, plan, inputs[0], submission.sm100_config().pdl)
                variants["driver launches, prepared parameters"] = lambda _, prepared=prepared: prepared()
            except Exception as error:  # noqa: BLE001 - the other rows still stand; say why this one is missing
                print(f"bench {number}: no prepared launch: {type(error).__name__}: {error}", flush=True)
        try:
            spans = _time_rounds(variants, inputs, args.rounds)
        except RuntimeError as error:  # the prepared launch failed when repeated: time the rest
            print(f"bench {number}: driver launches dropped: {error}", flush=True)
            variants.pop("driver launches, prepared parameters", None)
            spans = _time_rounds(variants, inputs, args.rounds)
        for name, values in spans.items():
            values = sorted(values)
            rows.append((number, name, statistics.median(values), values[int(0.9 * (len(values) - 1))]))
            print(f"bench {number} {name}: median {rows[-1][2]:.1f} us, p90 {rows[-1][3]:.1f} us", flush=True)

    if args.markdown:
        print("| bench | what | median us | p90 us |")
        print("| --- | --- | --- | --- |")
        for number, name, median, p90 in rows:
            print(f"| {number} | {name} | {median:.1f} | {p90:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
