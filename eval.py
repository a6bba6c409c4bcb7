"""Check and time a submission for the nvfp4_group_gemm leaderboard.

Two faces:
* With POPCORN_FD set (how the board runs it): `python eval.py MODE SPEC_FILE` speaks the protocol
  of the board's evaluator (gpu-mode/reference-kernels, problems/nvidia/
  eval_better_bench_grouped_gemm.py): modes test / benchmark / leaderboard / profile, results as
  `key: value` lines on that file descriptor, work done in a spawned worker process.
* Otherwise, a local command: `python eval.py test|benchmark [SPEC_FILE] [--submission FILE] [--only N]
  ...` runs task.yml's tests or benchmarks (or SPEC_FILE's) and prints a table (see `--help` and
  README.md, "eval.py").
"""
import os

# As on the board: CuTe DSL's on-disk kernel cache would make first-call times vary.
os.environ["CUTE_DSL_DISABLE_FILE_CACHING"] = "1"

import argparse
import base64
import contextlib
import dataclasses
import importlib.util
import json
import math
import multiprocessing
import re
import statistics
import subprocess
import sys
import sysconfig
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Optional



class _ImportedOnFirstUse:
    """A module imported when one of its names is first used. torch (and the board's reference.py and utils.py,
    which import it) take seconds to import: a command line that is refused is refused before (issue 48, item 6).
    Once imported, the module itself replaces this stand-in among eval.py's names."""

    def __init__(self, name: str, namespace: Optional[dict] = None):
        self._name = name
        self._namespace = globals() if namespace is None else namespace  # where the module takes its place

    def __getattr__(self, attribute: str):
        import importlib

        module = importlib.import_module(self._name)
        if self._namespace.get(self._name) is self:
            self._namespace[self._name] = module
        return getattr(module, attribute)


torch = _ImportedOnFirstUse("torch")
reference = _ImportedOnFirstUse("reference")  # the board's: check_implementation, generate_input
utils = _ImportedOnFirstUse("utils")  # the board's: clear_l2_cache, clear_l2_cache_large, set_seed
_BOARD_NAMES = {"check_implementation": "reference", "generate_input": "reference", "clear_l2_cache": "utils",
                "clear_l2_cache_large": "utils", "set_seed": "utils"}


def __getattr__(name: str):
    """eval.generate_input, eval.set_seed, ...: the board's functions, as `from reference import ...` made them."""
    if name in _BOARD_NAMES:
        return getattr(globals()[_BOARD_NAMES[name]], name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# Every default path is relative to this file, so eval.py behaves the same from any directory.
ROOT = Path(__file__).resolve().parent
DEFAULT_SUBMISSION = ROOT / "submission.py"
REFERENCE_SUBMISSION = ROOT / "tests" / "ref_submission.py"
INSPECTION_TOOL = ROOT / "tools" / "inspect_sm100.py"
EMULATE_TOOL = ROOT / "tools" / "emulate.py"
PLOT_TOOL = ROOT / "tools" / "plot_benchmarks.py"
INSPECTION_TIMEOUT_S = 900
NUM_ITERATIONS_PER_BENCHMARK = 15
SLOW_REPEAT_FACTOR = 2.0  # a timed repeat above this multiple of the median is flagged


# ---------------------------------------------------------------------------------------------
# Test specs: `key: value; key: value` lines; values are integers, names, or [..] / (..) lists.

_SPEC_PART = re.compile(r"\s*([a-zA-Z_]+)\s*:\s*(\[[^\]]*\]|\([^)]*\)|[a-zA-Z_]+|[+-]?[0-9]+)\s*")
_GROUP_SIZE_KEYS = ("m", "n", "k")  # one value per group
_INTEGER_KEYS = ("g", "seed")
SPEC_KEYS = "m, n, k, g, seed"  # generate_input's arguments, all required
K_MULTIPLE = 16  # one e4m3 scale per 16 FP4 values along K: generate_input's scales need whole blocks


class SpecError(ValueError):
    pass


class SubmissionError(Exception):
    """The submission file cannot be imported or has no custom_kernel."""


class KernelError(Exception):
    """custom_kernel raised; the message describes the original error in one line."""


@dataclasses.dataclass
class TestCase:
    args: dict
    spec: str


def _spec_value(text: str):
    try:
        return int(text)
    except ValueError:
        pass
    if text[0] in "([":
        inner = text[1:-1].strip()
        try:
            return tuple(int(item) for item in inner.split(",")) if inner else ()
        except ValueError:
            pass  # like the board: a list that is not all integers stays a string
    return text


def parse_spec_line(line: str) -> dict:
    """The board's parser: the syntax only, values as the board reads them."""
    args = {}
    for part in line.split(";"):
        match = _SPEC_PART.fullmatch(part)
        if not match:
            raise SpecError(f"invalid test case: '{line}': '{part}' is not `key: value` (a name, then an "
                            "integer, a name or a [..] list; parts separated by ';')")
        args[match[1]] = _spec_value(match[2])
    return args


def check_spec_values(args: dict, line: str) -> None:
    """Values generate_input can take: every key, g and seed integers, m, n and k lists of g positive
    integers, each k a multiple of 16.

    The board's evaluator leaves this to generate_input, which fails with a traceback; here it is
    a malformed spec (exit 113)."""
    def invalid(why: str) -> SpecError:
        return SpecError(f"invalid test case: '{line}': {why}")

    keys = (*_GROUP_SIZE_KEYS, *_INTEGER_KEYS)
    unknown = set(args) - set(keys)
    if unknown:
        raise invalid(f"unknown key {sorted(unknown)[0]!r} (keys: {SPEC_KEYS})")
    missing = [key for key in keys if key not in args]
    if missing:
        raise invalid(f"missing key {missing[0]!r} (keys: {SPEC_KEYS})")
    for key in _INTEGER_KEYS:
        if not isinstance(args[key], int):
            raise invalid(f"{key} must be an integer, got {args[key]!r}")
    for key in _GROUP_SIZE_KEYS:
        value = args[key]
        if not (isinstance(value, tuple) and value and all(v > 0 for v in value)):
            raise invalid(f"{key} must be a list of positive integers such as [128, 256], got {value!r}")
    lengths = {key: len(args[key]) for key in _GROUP_SIZE_KEYS}
    if args["g"] < 1 or any(length != args["g"] for length in lengths.values()):
        raise invalid(f"g = {args['g']} groups, but m, n, k have {lengths} values")
    if any(k % K_MULTIPLE for k in args["k"]):
        raise invalid(f"each k must be a multiple of {K_MULTIPLE} (one scale per {K_MULTIPLE} values), "
                      f"got {args['k']!r}")


def _combine(a: int, b: int) -> int:
    # The board mixes the public test seed with its secret seed (Cantor pairing, kept large).
    return int(a + (a + b) * (a + b + 1) // 2)


def read_spec_file(file_name) -> list[TestCase]:
    """The spec file's tests (blank lines skipped); SpecError with one line if it is unreadable, a
    line is malformed or there is no test."""
    try:
        content = Path(file_name).read_text()
    except Exception as error:
        raise SpecError(f"Could not open test file `{file_name}`: {error}") from None
    tests = []
    for line in content.splitlines():
        if not line.strip():
            continue
        args = parse_spec_line(line)
        check_spec_values(args, line)
        tests.append(TestCase(args=args, spec=line))
    if not tests:
        # The board's evaluator would report `test-count: 0` and `check: pass` in test mode (and
        # fail with a traceback in benchmark mode): a pass that checked nothing.
        raise SpecError(f"no test cases in `{file_name}`: nothing to check")
    return tests


def get_test_cases(file_name: str, seed: Optional[int]) -> list[TestCase]:
    """read_spec_file's tests with the board's seed mixed in; exit 113 with its one line."""
    try:
        tests = read_spec_file(file_name)
    except SpecError as error:
        print(error, file=sys.stderr)
        sys.exit(113)
    if seed is not None:
        for test in tests:
            test.args["seed"] = _combine(test.args["seed"], seed)
    return tests


# ---------------------------------------------------------------------------------------------
# Work shared by both faces: one test, one benchmark. With POPCORN_FD these run in the worker.


@dataclasses.dataclass
class Stats:
    runs: int
    mean: float
    std: float
    err: float
    best: float
    worst: float


def calculate_stats(durations: list[float]) -> Stats:
    """Durations -> Stats in the same unit (std with Bessel's correction, err = std / sqrt(runs))."""
    runs = len(durations)
    mean = sum(durations) / runs
    std = math.sqrt(sum((d - mean) ** 2 for d in durations) / (runs - 1))
    return Stats(runs=runs, mean=mean, std=std, err=std / math.sqrt(runs),
                 best=float(min(durations)), worst=float(max(durations)))


def _clone_data(data):
    if isinstance(data, tuple):
        return tuple(_clone_data(x) for x in data)
    if isinstance(data, list):
        return [_clone_data(x) for x in data]
    if isinstance(data, dict):
        return {key: _clone_data(value) for key, value in data.items()}
    if isinstance(data, torch.Tensor):
        return data.clone()
    return data


def _synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


_EMULATED_KERNEL: Optional[Callable] = None  # set in a worker whose submission runs in the emulator


def _custom_kernel(workers: Optional[int] = None) -> Callable:
    """custom_kernel of the module `submission` (the board's submission.py, or --submission); in an
    emulating worker, the same call with the sm_100a emulator as the B200, at `workers` SM pairs (None:
    a B200's)."""
    if _EMULATED_KERNEL is not None:
        return lambda data: _EMULATED_KERNEL(data, workers)
    try:
        from submission import custom_kernel
    except BaseException as error:  # a SystemExit at import would otherwise end the worker
        raise SubmissionError(f"cannot import submission.py: {_describe(error)}") from None
    return custom_kernel


@contextlib.contextmanager
def _errors_are_the_kernels():
    """What the block raises was raised by custom_kernel: say so, in one line."""
    try:
        yield
    except Exception as error:
        raise KernelError(f"custom_kernel raised {_describe(error)}") from error


def _shape_text(shape) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def _what_came_back(output) -> str:
    """A returned value, in a few words: 'None', 'a list of 3 items', 'a float32 tensor shaped [2, 3]'."""
    if isinstance(output, torch.Tensor):
        return f"a {str(output.dtype).replace('torch.', '')} tensor shaped {_shape_text(output.shape)}"
    if isinstance(output, (list, tuple)):
        return f"a {type(output).__name__} of {len(output)} item{'s' if len(output) != 1 else ''}"
    return "None" if output is None else f"a {type(output).__name__}"


def result_problem(data, output) -> str:
    """'' if custom_kernel's output has the form of the c tensors (a list of G float16 tensors
    shaped [M, N, 1]), else one line naming what came back and what was expected. Checked before
    the values, so a wrong form is named as such rather than failing inside the comparison."""
    shapes = [tuple(c.shape) for _, _, c in data[0]]
    expected = (f"instead of a list of {len(shapes)} float16 tensors shaped [M, N, 1] (the c tensors: "
                f"{', '.join(map(_shape_text, shapes))})")
    if not isinstance(output, (list, tuple)) or len(output) != len(shapes):
        return f"custom_kernel returned {_what_came_back(output)} {expected}"
    for group, (item, shape) in enumerate(zip(output, shapes)):
        if not isinstance(item, torch.Tensor) or item.dtype != torch.float16 or tuple(item.shape) != shape:
            return f"custom_kernel returned a list whose item {group} is {_what_came_back(item)} {expected}"
    return ""


def check_output(data, output) -> tuple[bool, str]:
    """The output's form (result_problem), then its values (reference.check_implementation)."""
    problem = result_problem(data, output)
    return (False, problem) if problem else reference.check_implementation(data, output)


def _run_single_test(test: TestCase, workers: Optional[int] = None) -> tuple[bool, str]:
    """One test's verdict, (passed, message); `workers`: an emulating worker's SM pairs for it."""
    custom_kernel = _custom_kernel(workers)
    data = reference.generate_input(**test.args)
    _synchronize()
    with _errors_are_the_kernels():
        output = custom_kernel(_clone_data(data))
        _synchronize()
    return check_output(data, output)


def _run_single_benchmark(
    test: TestCase, recheck: bool, max_repeats: int, max_time_ns: float, flush_l2: Callable,
    progress: Optional[Callable[[int, float], None]] = None,
) -> Any:
    """The timed repeats' durations (ns per call), or a message saying why it failed.
    `progress(repeats done, seconds since the first)` is called after each repeat."""
    if not torch.cuda.is_available():
        return "benchmarking needs a CUDA GPU (torch.cuda.is_available() is False)"
    custom_kernel = _custom_kernel()
    args = dict(test.args)
    data_list = []
    for _ in range(NUM_ITERATIONS_PER_BENCHMARK):
        if "seed" in args:
            args["seed"] += 42
        data_list.append(reference.generate_input(**args))
    check_copy = _clone_data(data_list)

    with _errors_are_the_kernels():
        outputs = [custom_kernel(_clone_data(data)) for data in data_list]
    for reference_data, output in zip(check_copy, outputs):
        good, message = check_output(reference_data, output)
        if not good:
            return message

    # Repeat until the mean is known to 0.1%, or the kernel ran max_time_ns in total, or two
    # minutes passed; at least 3 repeats and 100 ms, at most max_repeats.
    durations = []
    start_ns = time.perf_counter_ns()
    for repeat in range(max_repeats):
        torch.cuda.synchronize()
        flush_l2()
        start_event = torch.cuda.Event(enable_timing=True)
        end_event = torch.cuda.Event(enable_timing=True)
        with _errors_are_the_kernels():
            start_event.record()
            outputs = [custom_kernel(data) for data in data_list]
            end_event.record()
            torch.cuda.synchronize()
        durations.append(start_event.elapsed_time(end_event) / NUM_ITERATIONS_PER_BENCHMARK * 1e6)

        if recheck:
            # Every output is checked (the board's loop only acts on the last one's verdict).
            for reference_data, output in zip(check_copy, outputs):
                good, message = check_output(reference_data, output)
                if not good:
                    return message

        elapsed_ns = time.perf_counter_ns() - start_ns
        if progress is not None:
            progress(len(durations), elapsed_ns / 1e9)
        if repeat > 1 and elapsed_ns > 1e8:
            stats = calculate_stats(durations)
            if (stats.err / stats.mean < 0.001 or stats.mean * stats.runs > max_time_ns
                    or elapsed_ns > 120e9):
                break
    return durations


@dataclasses.dataclass
class Raised:
    """What a call raised, as text: a submission's or CuTe DSL's exceptions need not survive
    pickling back from the worker, and the board's face reports one line, never a traceback."""
    summary: str  # one line
    traceback: str


def _call_catching(function: Callable, *args, **kwargs) -> Any:
    """function(*args, **kwargs), or Raised if it raised (runs in the worker)."""
    try:
        return function(*args, **kwargs)
    except (SubmissionError, KernelError) as error:
        return Raised(str(error), traceback.format_exc())
    except Exception as error:
        return Raised(_describe(error), traceback.format_exc())


_LIBRARY_DIRS = tuple({sysconfig.get_paths()[name]
                       for name in ("stdlib", "platstdlib", "purelib", "platlib")})


def _describe(error: BaseException) -> str:
    """One line: exception type, message and, except for syntax errors (whose message has it),
    the innermost place in the user's code (not in Python's or installed packages' files)."""
    text = f"{type(error).__name__}: {error}"
    frames = traceback.extract_tb(error.__traceback__)
    own_frames = [frame for frame in frames if not frame.filename.startswith(_LIBRARY_DIRS)]
    if frames and not isinstance(error, SyntaxError):
        frame = (own_frames or frames)[-1]
        text += f" (at {Path(frame.filename).name}:{frame.lineno})"
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------------
# The worker: one spawned process runs the submission, in both faces. The board's evaluator uses
# multiprocessing.Pool(1), whose apply() waits forever when the worker dies (sys.exit, a
# segfault): the pool starts a new worker, but the lost task's result never comes. Here the
# worker's end of a pipe closes when it dies, so a death is a result: Raised("worker died ...").


def describe_exit(exitcode: Optional[int]) -> str:
    """How the worker ended, in one line: 'worker died (signal 11)' or 'worker died (exit code 5)'."""
    if exitcode is not None and exitcode < 0:
        return f"worker died (signal {-exitcode})"
    return f"worker died (exit code {exitcode})"


def _worker_main(connection, submission: Optional[str], emulate: bool = False, races: bool = True) -> None:
    """The worker's loop: import `submission` as the module `submission` if given (the local face
    and the reference stand-in; the board face imports it lazily, as the board does), check its
    SM100_CONFIG line (a malformed one ends the start in one line), then run (function, args,
    wants_progress) requests until None. Sends ('progress', *values) while a benchmark runs and
    ('result', value) at the end of each request. `emulate`: the stub driver first, then each call
    runs the submission's B200 kernel in the emulator (_emulate_submission), with race detection
    if `races`."""
    if submission is not None:
        try:
            if emulate:
                from emulator import driver  # before the submission imports cutlass

                driver.install()
            load_submission(submission)
            problem = config_problem(sys.modules["submission"], Path(submission))
            if problem:
                raise UsageError(problem)
            if emulate:
                _emulate_submission(races)
        except UsageError as error:
            connection.send(("result", Raised(str(error), error.details)))
            return
        except Exception as error:  # noqa: BLE001 - the emulator's set-up, in one line
            connection.send(("result", Raised(f"the emulator: {_describe(error)}", traceback.format_exc())))
            return
    connection.send(("result", None))
    while (request := connection.recv()) is not None:
        function, args, wants_progress = request
        kwargs = {"progress": lambda *values: connection.send(("progress", *values))} if wants_progress else {}
        connection.send(("result", _call_catching(function, *args, **kwargs)))


def _emulate_submission(races: bool = True) -> None:
    """In the worker: the submission's calls run its B200 kernel in the emulator, through
    tools/emulate.py's emulated call (the real host path, exact data), at a B200's worker count or
    at the few SM pairs a wrap case names, with race detection if `races`."""
    global _EMULATED_KERNEL
    import emulator

    spec = importlib.util.spec_from_file_location("emulate", EMULATE_TOOL)
    emulate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(emulate)
    emulate.silence_dsl_deprecation()
    module = sys.modules["submission"]
    module.DEVICE = emulate.EmulatedB200(None)

    def emulated_kernel(data, workers: Optional[int] = None):
        if module.DEVICE.workers != workers:
            # a plan holds its schedule over the workers it was built for: a new count builds new plans (the
            # compiled kernels stay cached: compile_sm100's key is the group count and the configuration)
            module.DEVICE = emulate.EmulatedB200(workers)
            module._plans.clear()
        emu = emulator.Emulator(warp_roles=emulate.submission_roles(module), races=races)
        try:
            outputs, _ = emulate.emulated_call(module, data, [], emu)
        except emulator.HangError as hang:  # its per-warp report is many lines: tools/emulate.py prints it
            raise emulator.EmulatorError(hang.kind, f"{hang.message} (the per-warp report: python "
                                         "tools/emulate.py submission --spec SPEC)") from None
        return outputs

    _EMULATED_KERNEL = emulated_kernel


def runs_as(module, sizes, hopper: bool = False) -> str:
    """The configuration the plan of `sizes` (one (M, N, K) per group) under the module's SM100_CONFIG was built
    with: the B200 kernel's per-shape choice (sm100_shape_config), CompiledLaunch.config described; on Hopper its
    pdl and job policy; '' where no plan says (a submission without plans, the cuBLAS rung, no call yet)."""
    signature = tuple((m, n, k, 1) for m, n, k in sizes)
    for key, plan in list(getattr(module, "_plans", {}).items()):
        config = getattr(getattr(plan, "launch", None), "config", None)
        if key[0] != signature or config is None or key[-1] != getattr(module, "SM100_CONFIG", key[-1]):
            continue
        if hopper:
            import sm90_kernel

            return f"pdl={'on' if config.pdl else 'off'},jobs={sm90_kernel.SCHEDULE.jobs}"
        return config.describe() if hasattr(config, "describe") else str(config)
    return ""


def _runs_as(test: TestCase) -> str:
    """In the worker, after the test's call: runs_as for its sizes ('' where the submission does not say)."""
    module = sys.modules.get("submission")
    hopper = (_EMULATED_KERNEL is None and torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9)
    return runs_as(module, zip(*(test.args[name] for name in "mnk")), hopper) if module else ""


class Worker:
    """A spawned process that runs the submission's code, started on first use and again after it
    died. apply() returns what the function returned, Raised if it raised, or Raised('worker died
    (signal 11)') if the process ended first. `emulate`: the submission's B200 kernel runs in the
    emulator there (its driver is the stub, preloaded where this process holds a real one)."""

    def __init__(self, submission: Optional[str] = None, emulate: bool = False, races: bool = True):
        self.submission = submission
        self.emulate = emulate
        self.races = races
        self.context = multiprocessing.get_context("spawn")
        self.process = None
        self.connection = None

    def start(self) -> Any:
        """Start the process; None once it is ready, Raised if the submission cannot be imported."""
        self.connection, child = self.context.Pipe()
        self.process = self.context.Process(target=_worker_main,
                                            args=(child, self.submission, self.emulate, self.races), daemon=True)
        with _stub_environment(self.emulate):
            self.process.start()
        child.close()  # only the worker holds this end: its death closes the pipe
        return self._receive(None)

    def _receive(self, on_progress: Optional[Callable]) -> Any:
        while True:
            try:
                message = self.connection.recv()
            except (EOFError, OSError):
                self.process.join()
                died = Raised(describe_exit(self.process.exitcode), "")
                self.close()
                return died
            if message[0] == "result":
                return message[1]
            if on_progress is not None:
                on_progress(*message[1:])

    def apply(self, function: Callable, *args, on_progress: Optional[Callable] = None) -> Any:
        if self.process is None:
            started = self.start()
            if started is not None:
                return started
        try:
            self.connection.send((function, args, on_progress is not None))
        except (BrokenPipeError, OSError):
            pass  # it died between requests: _receive says how
        return self._receive(on_progress)

    def close(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(BrokenPipeError, OSError):
            self.connection.send(None)
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.connection.close()
        self.process = self.connection = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


@contextlib.contextmanager
def _stub_environment(emulate: bool):
    """While a worker starts: where this process holds a real CUDA driver (a GPU machine), the
    environment that makes the stub the worker's driver (emulator/driver.py)."""
    saved = dict(os.environ)
    if emulate:
        from emulator import driver

        if driver.real_driver_loaded():
            os.environ.update(driver.stub_environment())
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


# ---------------------------------------------------------------------------------------------
# Repeats: the board ranks by their mean, so a few slow ones (a first call that builds a plan,
# say) can cost more than the median shows.


@dataclasses.dataclass
class RepeatSummary:
    stats: Stats
    median: float
    slow: list[tuple[int, float]]  # (repeat number from 1, duration) of repeats over 2x the median


def summarize_repeats(durations: list[float]) -> RepeatSummary:
    median = statistics.median(durations)
    slow = [(number, d) for number, d in enumerate(durations, start=1) if d > SLOW_REPEAT_FACTOR * median]
    return RepeatSummary(calculate_stats(durations), median, slow)


def describe_slow_repeats(summary: RepeatSummary, unit: str = "us", shown: int = 5) -> str:
    """'' if no repeat is slow, else one line naming the slow repeats."""
    if not summary.slow:
        return ""
    listed = ", ".join(f"#{number} {d:.2f} {unit}" for number, d in summary.slow[:shown])
    more = f" and {len(summary.slow) - shown} more" if len(summary.slow) > shown else ""
    return (f"{len(summary.slow)} of {summary.stats.runs} repeats slower than "
            f"{SLOW_REPEAT_FACTOR:g}x the median ({summary.median:.2f} {unit}): {listed}{more}; "
            "the mean counts them, as the board's does")


# ---------------------------------------------------------------------------------------------
# The board's face (POPCORN_FD set). A submission that cannot be imported or raises fails its
# tests and benchmarks with a one-line reason (exit 112); the board's evaluator would stop with a
# traceback instead.


class PopcornOutput:
    def __init__(self, fd: int):
        self.file = os.fdopen(fd, "w")
        os.set_inheritable(fd, False)  # the worker must not hold the board's pipe open

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.file.close()

    def log(self, key, value):
        print(f"{key}: {value}", file=self.file, flush=True)


STAND_IN_REASON = "needs a CUDA GPU (sm_100a kernel)"


def run_testing(logger: PopcornOutput, worker: Worker, tests: list[TestCase], stand_in: bool = False) -> int:
    """`stand_in`: the reference runs in place of a submission that needs a GPU (no CUDA here); the
    channel then says fail for every test, with what the reference showed of the harness, since
    the submission itself did not run."""
    passed = True
    logger.log("test-count", len(tests))
    for idx, test in enumerate(tests):
        logger.log(f"test.{idx}.spec", test.spec)
        result = worker.apply(_run_single_test, test)
        good, message = (False, result.summary) if isinstance(result, Raised) else result
        if stand_in:
            message = (f"{STAND_IN_REASON}; the harness passed with the reference" if good else
                       f"{STAND_IN_REASON}; the harness failed with the reference: {message}")
            good = False
        if good:
            logger.log(f"test.{idx}.status", "pass")
            if message:
                logger.log(f"test.{idx}.message", message)
        else:
            logger.log(f"test.{idx}.status", "fail")
            logger.log(f"test.{idx}.error", message)
            passed = False
    logger.log("check", "pass" if passed else "fail")
    return 0 if passed else 112


def _log_stats(logger: PopcornOutput, idx: int, stats: Stats) -> None:
    for field in dataclasses.fields(Stats):
        logger.log(f"benchmark.{idx}.{field.name}", getattr(stats, field.name))


def _benchmark_in_worker(worker: Worker, test, recheck, max_repeats, max_time_ns) -> Any:
    """Stats, or a one-line message saying why the benchmark failed."""
    result = worker.apply(_run_single_benchmark, test, recheck, max_repeats, max_time_ns, utils.clear_l2_cache_large)
    if isinstance(result, Raised):
        return result.summary
    return calculate_stats(result) if isinstance(result, list) else result


def run_benchmarking(logger: PopcornOutput, worker: Worker, tests: list[TestCase]) -> int:
    _benchmark_in_worker(worker, tests[0], False, 100, 10e7)  # warm-up, result unused
    passed = True
    logger.log("benchmark-count", len(tests))
    for idx, test in enumerate(tests):
        logger.log(f"benchmark.{idx}.spec", test.spec)
        result = _benchmark_in_worker(worker, test, False, 100, 10e9)
        if isinstance(result, Stats):
            _log_stats(logger, idx, result)
        else:
            passed = False
            logger.log(f"benchmark.{idx}.status", "fail")
            logger.log(f"benchmark.{idx}.error", result)
    logger.log("check", "pass" if passed else "fail")
    return 0 if passed else 112


def run_leaderboard(logger: PopcornOutput, worker: Worker, tests: list[TestCase]) -> int:
    for test in tests:  # warm up every shape
        _benchmark_in_worker(worker, test, False, 50, 5e8)
    logger.log("benchmark-count", len(tests))
    passed = True
    for idx, test in enumerate(tests):
        result = _benchmark_in_worker(worker, test, True, 100, 30e9)
        logger.log(f"benchmark.{idx}.spec", test.spec)
        if isinstance(result, Stats):
            _log_stats(logger, idx, result)
        else:
            passed = False
            logger.log(f"benchmark.{idx}.status", "fail")
            logger.log(f"benchmark.{idx}.error", str(result))
            break
    logger.log("check", "pass" if passed else "fail")
    return 0  # as on the board: the verdict is the `check` line, the exit code stays 0


def _profile_one(test: TestCase, under_ncu: bool) -> str:
    """Run custom_kernel once inside an NVTX range; without ncu, return torch.profiler's table."""
    custom_kernel = _custom_kernel()
    with torch.cuda.nvtx.range("generate input"):
        data = _clone_data(reference.generate_input(**test.args))
        torch.cuda.synchronize()
    if under_ncu:  # ncu, running this process, collects the report itself
        with torch.cuda.nvtx.range("custom_kernel"), _errors_are_the_kernels():
            custom_kernel(data)
            torch.cuda.synchronize()
        return ""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
        with torch.cuda.nvtx.range("custom_kernel"), _errors_are_the_kernels():
            custom_kernel(data)
            torch.cuda.synchronize()
    return profiler.key_averages().table(sort_by="self_cuda_time_total", row_limit=20)


def run_profiling(logger: PopcornOutput, worker: Worker, tests: list[TestCase]) -> int:
    # The board sets POPCORN_NCU=1 when it runs this under ncu. (Its evaluator takes the ncu branch
    # for any value, even when unset, since bool("0") is True; we honour "0" and unset.)
    under_ncu = os.getenv("POPCORN_NCU", "0") not in ("", "0")
    logger.log("benchmark-count", len(tests))
    passed = True
    for idx, test in enumerate(tests):
        logger.log(f"benchmark.{idx}.spec", test.spec)
        # Like benchmark and leaderboard: the board profiles on its GPU, a CPU run would say nothing.
        if not torch.cuda.is_available():
            error = "profiling needs a CUDA GPU (torch.cuda.is_available() is False)"
        else:
            report = worker.apply(_profile_one, test, under_ncu)
            error = report.summary if isinstance(report, Raised) else None
        if error is not None:
            passed = False
            logger.log(f"benchmark.{idx}.status", "fail")
            logger.log(f"benchmark.{idx}.error", error)
            continue
        logger.log(f"benchmark.{idx}.report", base64.b64encode(report.encode("utf-8"), b"+*").decode("utf-8"))
    logger.log("check", "pass" if passed else "fail")
    return 0 if passed else 112


POPCORN_MODES = {
    "test": run_testing,
    "benchmark": run_benchmarking,
    "leaderboard": run_leaderboard,
    "profile": run_profiling,
}


def popcorn_main(fd_text: str) -> int:
    if len(sys.argv) < 3:
        print("usage: POPCORN_FD=N python eval.py test|benchmark|leaderboard|profile SPEC_FILE",
              file=sys.stderr)
        return 2
    mode = sys.argv[1]
    seed = os.getenv("POPCORN_SEED")
    os.unsetenv("POPCORN_SEED")  # keep the secret seed from the submission's process
    seed = int(seed) if seed else None
    utils.set_seed(seed or 42)
    tests = get_test_cases(sys.argv[2], seed)
    if mode not in POPCORN_MODES:
        print(f"eval.py: unknown mode '{mode}' (expected one of: {', '.join(POPCORN_MODES)})",
              file=sys.stderr)
        return 2
    try:
        fd = int(fd_text)
    except ValueError:
        print(f"eval.py: POPCORN_FD must be a file descriptor number, got '{fd_text}'", file=sys.stderr)
        return 2
    try:
        os.fstat(fd)
    except OSError:
        # Typed by hand without `N>FILE`: results on stdout rather than a traceback.
        print(f"eval.py: file descriptor {fd} (POPCORN_FD) is not open: result lines go to stdout",
              file=sys.stderr)
        fd = os.dup(sys.stdout.fileno())
    stand_in = mode == "test" and reference_stands_in()
    if stand_in:
        print(f"eval.py: no CUDA GPU: testing the harness with {_shown(REFERENCE_SUBMISSION)} (the reference) "
              f"in place of {_shown(DEFAULT_SUBMISSION)}, whose sm_100a kernel needs a B200; each test is "
              "reported as failed, since the submission did not run", file=sys.stderr)
    with PopcornOutput(fd) as logger, Worker(str(REFERENCE_SUBMISSION) if stand_in else None) as worker:
        if stand_in:
            return run_testing(logger, worker, tests, stand_in=True)
        return POPCORN_MODES[mode](logger, worker, tests)


# ---------------------------------------------------------------------------------------------
# The local face.

_SOL_ROW = re.compile(r"^\s*(\d+)\s+(\[[\d,\s]*\])\s+(\[[\d,\s]*\])\s+(\[[\d,\s]*\])\s+\d+\s+([\d.]+)\s*$")

# The opt-out, in one line (tools/emulate.py and tools/check.py --emulate say the same).
NO_RACES = ("--no-races skips it: faster, but a pass then vouches only for the interleaving that ran, not for every "
            "order a B200 may pick")

HELP_EPILOG = """\
SPEC_FILE, if given, replaces task.yml's tests or benchmarks: one per line, in the board's syntax.
The submission runs in a worker process; if that process dies (sys.exit, a segfault), the row
says so ("worker died (signal 11)") and the next case runs in a fresh worker.

Without a GPU, `test` runs on the CPU (inputs generated there, reference by exact
dequantization). A submission with an sm_100a kernel (it defines compile_sm100: it needs a B200)
then runs that kernel in the sm_100a emulator (tools/emulate.py's call; the first line says so),
with happens-before race detection (--no-races skips it), at a B200's worker count, and in a full
run also on three wrap cases after task.yml's tests, at a few SM pairs, where every pipeline wraps
(each worker runs several tiles: every accumulator and stage is reused). Each row names the
configuration its shape runs as (sm100_shape_config's choice). --reference tests the harness alone
with tests/ref_submission.py, without the sm_100a inspection (the board's face runs the reference in
place of such a submission, but reports each test as failed).
A full `test` run of the submission without a GPU (no --only, SPEC_FILE or --reference) also runs
the sm_100a inspection, `python tools/inspect_sm100.py --submission FILE`, on the file under test;
a file without `compile_sm100` (no sm_100a kernel) is not inspected. --inspect / --no-inspect force
it on or off.

`benchmark` (CUDA only) times like the board: 15 inputs, L2 flushed before each timed repeat,
CUDA events around 15 back-to-back calls. It prints the mean (the board ranks by it) and the
median, and flags every repeat slower than 2x the median.

`--baseline cublas` (a B200 only) times each benchmark again under SM100_CONFIG = "cublas" (each
group through torch._scaled_mm) and prints the ratio of the means.

Exit codes: 0 all passed; 1 a test, benchmark or the inspection failed; 2 bad use (one line on
stderr, before anything runs: an unknown option, a missing or malformed file, a malformed
SM100_CONFIG line); 3 `benchmark` skipped: no CUDA GPU, or `--baseline cublas` without a B200.

The board's face: with POPCORN_FD set in the environment,
  POPCORN_FD=N python eval.py MODE SPEC_FILE
behaves as the board's evaluator. MODE is test, benchmark, leaderboard or profile; SPEC_FILE
has one test per line, e.g. `m: [96, 128]; n: [128, 256]; k: [256, 512]; g: 2; seed: 1111`
(blank lines are skipped; every key is required, k a multiple of 16; a file without a test is
malformed); POPCORN_SEED, if set, is mixed into each seed. Results are written
as `key: value` lines (`test.0.status: pass`, `benchmark.0.mean: ...`, `check: pass`) to file
descriptor N, or to stdout if N is not open. Exit codes there: 0 all passed (leaderboard: always
0, the verdict is the `check` line); 112 a test or benchmark failed, including a submission
that cannot be imported or raises (one-line reason on the descriptor); 113 the spec file is
unreadable or a line is malformed; 2 bad mode or arguments. A worker that dies fails its test
or benchmark ("worker died (signal 11)") and the next one runs in a fresh worker. Without a GPU,
`test` runs the reference in place of a submission with an sm_100a kernel, but reports every
test as failed ("needs a CUDA GPU (sm_100a kernel); the harness passed with the reference").
"""


class UsageError(Exception):
    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details  # a traceback, shown with --verbose


@dataclasses.dataclass
class Case:
    number: int  # 1-based, as printed
    test: TestCase
    sol_us: Optional[float] = None
    workers: Optional[int] = None  # SM pairs of an emulated wrap case (WRAP_CASES); None: the device's own


def load_task(path: Path) -> tuple[list[dict], list[dict], dict]:
    """task.yml -> (tests, benchmarks, speed of light in us by (m, n, k)).

    A small reader for task.yml's own layout (`- {...}` items under `tests:` and `benchmarks:`,
    which are JSON), so that eval.py needs no YAML package; tests/ check it against PyYAML.
    The speed of light comes from the table in `description`: the board's task parser rejects
    unknown keys, so it cannot live in a key of its own.
    """
    sections = {"tests": [], "benchmarks": []}
    sol_us = {}
    section = None
    try:
        for line in path.read_text().splitlines():
            if line[:1].isalpha():
                section = line.split(":")[0]
            elif section in sections and line.strip().startswith("- {"):
                sections[section].append(json.loads(line.strip()[2:]))
            elif row := _SOL_ROW.match(line):
                key = tuple(tuple(json.loads(row[i])) for i in (2, 3, 4))
                sol_us[key] = float(row[5])
    except (OSError, ValueError) as error:
        raise UsageError(f"cannot read {path}: {error}") from None
    if not sections["tests"] or not sections["benchmarks"]:
        raise UsageError(f"{path} has no tests or no benchmarks")
    return sections["tests"], sections["benchmarks"], sol_us


def _spec_line(entry: dict) -> str:
    # How the board writes task.yml entries into the spec file.
    return "; ".join(f"{key}: {value}" for key, value in entry.items())


def _task_tests(entries: list[dict]) -> list[TestCase]:
    return [TestCase(args=parse_spec_line(_spec_line(entry)), spec=_spec_line(entry)) for entry in entries]


def _select_cases(tests: list, only: Optional[int], sol_us: dict, extra: tuple = ()) -> list[Case]:
    """Cases numbered from 1, `--only` applied, each with task.yml's speed of light for its sizes if
    it lists them. `tests`: TestCases, or task.yml entries (dicts); `extra`: Cases numbered after them
    (the wrap cases)."""
    tests = [test if isinstance(test, TestCase) else _task_tests([test])[0] for test in tests]
    count = len(tests) + len(extra)
    if only is not None and not 1 <= only <= count:
        raise UsageError(f"--only {only}: there are {count} (numbered 1 to {count})")
    cases = [Case(number, test, sol_us.get(tuple(tuple(test.args[name]) for name in "mnk")))
             for number, test in enumerate(tests, start=1)] + list(extra)
    return [case for case in cases if only in (None, case.number)]


# The first check's wrap cases (issue 48, item 3). At a B200's 74 SM pairs, task.yml's tests give a worker one
# tile at most: no accumulator is used twice, no stage refilled within a tile, and a kernel that releases an
# accumulator before it has read it passes there (even with race detection: nothing reuses it). These run the
# same kernel on the smallest shapes, at a few SM pairs, where every pipeline wraps, each worker's last tile
# going out through the TMA store (tests/kernel/test_schedule.py checks what each schedule does):
# (spec, SM pairs, what wraps).
WRAP_CASES = (
    ("m: [40]; n: [1024]; k: [2304]; g: 1; seed: 4811", 1,
     "the 64/128 kernel: the pair runs 4 tiles, 9 k-tiles each through 8 stages, each accumulator twice"),
    ("m: [176]; n: [1024]; k: [1792]; g: 1; seed: 4812", 1,
     "the 192-token kernel: the pair runs 4 tiles of 192 tokens, 7 k-tiles each through 6 stages, each "
     "accumulator twice"),
    ("m: [129, 300]; n: [256, 256]; k: [2304, 256]; g: 2; seed: 4813", 6,
     "clusters of two pairs: 9 k-tiles through 8 stages, a cluster running 3 tiles (an accumulator twice)"),
)


def wrap_cases(first_number: int) -> tuple:
    """WRAP_CASES as Cases numbered from `first_number`."""
    return tuple(Case(first_number + i, TestCase(args=parse_spec_line(spec), spec=spec), workers=workers)
                 for i, (spec, workers, _) in enumerate(WRAP_CASES))


def load_submission(file_name: str) -> None:
    """Import FILE as the module `submission` (what the worker code imports)."""
    path = Path(file_name)
    if not path.is_file():
        raise UsageError(f"submission file not found: {file_name}")
    if str(path.resolve().parent) not in sys.path:
        sys.path.append(str(path.resolve().parent))
    spec = importlib.util.spec_from_file_location("submission", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["submission"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as error:  # a SystemExit or KeyboardInterrupt at import is also a bad file
        raise UsageError(f"cannot import {file_name}: {_describe(error)}", traceback.format_exc()) from None
    if not callable(getattr(module, "custom_kernel", None)):
        raise UsageError(f"{file_name} defines no function custom_kernel")


def _shown(path: Path) -> str:
    """A path as a user would type it from here: relative below the current directory."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _device_name() -> str:
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"{torch.cuda.get_device_name()} (sm_{major}{minor})"
    return "CPU (no CUDA GPU: inputs generated on the CPU, reference by exact dequantization)"


def _sizes(test: TestCase) -> str:
    """G, then M, N and K per group; a list whose values are all equal is shown once."""
    lists = (test.args[name] for name in "mnk")
    return f"{test.args['g']:>2}  " + "  ".join(
        str(values[0]) if len(set(values)) == 1 else ",".join(map(str, values)) for values in lists)


def _print_message(message: str) -> None:
    for line in message.split("; "):
        print(f"       {line}")


def _print_traceback(text: str) -> None:
    for line in text.rstrip().splitlines():
        print(f"       | {line}")


_CONFIG_LINE = re.compile(r"^SM100_CONFIG\s*=[^\n]*", re.MULTILINE)


def config_line(path: Path) -> Optional[tuple[int, str, Any]]:
    """(number, text, value) of the file's last `SM100_CONFIG = ...` line (the assignment that
    counts), value being the string it assigns; None if there is none. ValueError in one line,
    naming the line, if it does not assign a string literal."""
    import ast

    matches = list(_CONFIG_LINE.finditer(Path(path).read_text()))
    if not matches:
        return None
    match = matches[-1]
    number, text = match.string.count("\n", 0, match.start()) + 1, match[0].strip()
    right = text.partition("=")[2].split("#")[0].strip()
    try:
        value = ast.literal_eval(right)
    except (ValueError, SyntaxError):
        value = None
    if not isinstance(value, str):
        raise ValueError(f"line {number} of {Path(path).name} (`{text}`): SM100_CONFIG must be a quoted text such "
                         'as "shipped", "safe,pdl=off" or "cublas"')
    return number, text, value


def config_problem(module, path: Path, text: Optional[str] = None) -> str:
    """'' if `text` (a --config) and the file's SM100_CONFIG line name configurations of the submission `module`,
    else one line: which (`--config TEXT`, or `line N of FILE (`SM100_CONFIG = ...`)`), what is wrong, and the
    configuration's fields. Every tool says a bad configuration with it (exit 2: eval.py, tools/check.py,
    tools/emulate.py, tools/inspect_sm100.py). A module without Sm100Config has only its line's form checked."""
    try:
        line = config_line(path)
    except ValueError as error:
        return str(error)
    config_class = getattr(module, "Sm100Config", None)
    if config_class is None:
        return ""
    checks = [(f"--config {text}", text)] if text is not None else []
    if line is not None:
        checks.append((f"line {line[0]} of {Path(path).name} (`{line[1]}`)", line[2]))
    fields = [field.name for field in dataclasses.fields(config_class)]
    for where, value in checks:
        if value.strip() == getattr(module, "CUBLAS", None):
            continue  # the cuBLAS rung: no kernel configuration to parse
        try:
            config_class.parse(value)
        except ValueError as error:
            said = str(error)
            if not all(name in said for name in fields):
                said += f" (fields: {', '.join(fields)})"
            return f"{where}: {said}"
    return ""


def write_config_line(path: Path, number: int, value: str) -> str:
    """Replace line `number` of the file with `SM100_CONFIG = "value"`; returns the new line."""
    lines = Path(path).read_text().splitlines(keepends=True)
    line = f'SM100_CONFIG = "{value}"'
    lines[number - 1] = line + "\n"
    Path(path).write_text("".join(lines))
    return line


def reference_stands_in() -> bool:
    """Whether, without a GPU, the reference is tested in place of submission.py (both faces): its
    sm_100a kernel (compile_sm100) needs a B200, the harness can still be checked, and the sm_100a
    inspection checks the kernel. A submission.py without one is tested itself."""
    return not torch.cuda.is_available() and defines_sm100_kernel(DEFAULT_SUBMISSION)


def defines_sm100_kernel(path: Path) -> bool:
    """Whether the file has an sm_100a kernel to inspect: it defines compile_sm100, the entry
    tools/inspect_sm100.py compiles. Read as text: importing would cost seconds."""
    try:
        return re.search(r"^def compile_sm100\b", path.read_text(), re.MULTILINE) is not None
    except OSError:
        return False


def run_inspection(submission: Path) -> bool:
    """Run the sm_100a inspection (no GPU needed) on `submission`; True if it passed or was skipped. After the
    tests, not beside them: on this project's 2 shared cores the first command took 134 s with the two side by
    side (load 3.2) and 74 s one after the other (load 1.9): its compiles are multithreaded."""
    if not INSPECTION_TOOL.is_file():
        print(f"inspection: {_shown(INSPECTION_TOOL)} not found, skipped")
        return True
    if not defines_sm100_kernel(submission):
        print(f"inspection: skipped, {_shown(submission)} defines no compile_sm100 (no sm_100a kernel)")
        return True
    command = [sys.executable, str(INSPECTION_TOOL), "--submission", str(submission)]
    print(f"inspection: python {_shown(INSPECTION_TOOL)} --submission {_shown(submission)}", flush=True)
    try:
        done = subprocess.run(command, stdin=subprocess.DEVNULL, timeout=INSPECTION_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        print(f"inspection: FAIL (no result after {INSPECTION_TIMEOUT_S} s)")
        return False
    print(f"inspection: {'pass' if done.returncode == 0 else f'FAIL (exit code {done.returncode})'}")
    return done.returncode == 0


def _start_worker(submission: Path, emulate: bool = False, races: bool = True) -> Worker:
    """A worker that has imported `submission` and found its SM100_CONFIG line good; UsageError if not (one
    line, as at import)."""
    worker = Worker(str(submission), emulate, races)
    started = worker.start()
    if isinstance(started, Raised):
        worker.close()
        summary = started.summary
        if summary.startswith("worker died"):
            summary = f"cannot import {submission}: {summary}"
        raise UsageError(summary, started.traceback)
    return worker


EMULATED_DEVICE = "a B200 emulated on this CPU (the sm_100a emulator, a B200's 148 SMs)"


def _pairs(workers: int) -> str:
    return f"{workers} SM pair{'s' if workers != 1 else ''}"


def local_test(cases: list[Case], worker: Worker, submission: Path, inspected: Optional[Path], verbose: bool,
               inspection_note: str = "") -> int:
    """One row per case, with the configuration its shape ran as (runs_as) where the submission's plan says; then
    the inspection of `inspected`, if given."""
    print(f"Tests of {_shown(submission)} on {EMULATED_DEVICE if worker.emulate else _device_name()}")
    print(f"{'#':>3}  result     time   G  M  N  K")
    failed = 0
    for case in cases:
        if case.workers is not None and case is next(c for c in cases if c.workers is not None):
            print("at a few SM pairs, where every pipeline wraps (a B200's count gives each worker one tile here):")
        start = time.perf_counter()
        result = worker.apply(_run_single_test, case.test, case.workers)
        seconds = time.perf_counter() - start
        good, message = (False, result.summary) if isinstance(result, Raised) else result
        ran = worker.apply(_runs_as, case.test) if worker.process is not None else ""
        ran = ran if isinstance(ran, str) else ""
        notes = ([_pairs(case.workers)] if case.workers is not None else []) + ([f"runs as {ran}"] if ran else [])
        print(f"{case.number:>3}  {'pass' if good else 'FAIL':<6} {seconds:6.2f} s  {_sizes(case.test)}"
              + (f"  ({'; '.join(notes)})" if notes else ""))
        if message:
            _print_message(message)
        if verbose and isinstance(result, Raised) and result.traceback:
            _print_traceback(result.traceback)
        failed += not good
    print(f"{len(cases) - failed} of {len(cases)} passed")
    if inspection_note:
        print(inspection_note)
    inspection_passed = inspected is None or run_inspection(inspected)
    return 0 if failed == 0 and inspection_passed else 1


class ProgressLine:
    """On a terminal, one status line rewritten in place while a benchmark runs. Elsewhere it
    writes nothing: there each benchmark's row, printed as it ends, is the progress."""

    def __init__(self, stream):
        self.stream = stream
        self.active = stream.isatty()

    def show(self, text: str) -> None:
        if self.active:
            self.stream.write("\r\033[K" + text)
            self.stream.flush()

    def clear(self) -> None:
        self.show("")


BENCHMARK_COLUMNS = ("mean us", "median us", "best us", "worst us", "runs", ">2x med", "SOL us", "mean/SOL")


def _benchmark_row(number, cells, sizes) -> str:
    widths = (9, 10, 9, 9, 5, 8, 8, 9)
    return f"{number:>3}" + "".join(f"{cell:>{w}}" for cell, w in zip(cells, widths)) + f"  {sizes}"


def _geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


BASELINE_CONFIG = "cublas"  # --baseline: the submission's SM100_CONFIG rung timed beside it


def _with_config(config: str, function: Callable, *args, **kwargs):
    """function(*args) with the submission's SM100_CONFIG set to `config` (runs in the worker; a
    plan is keyed by the configuration, so each has its own)."""
    module = sys.modules["submission"]
    saved = module.SM100_CONFIG
    module.SM100_CONFIG = config
    try:
        return function(*args, **kwargs)
    finally:
        module.SM100_CONFIG = saved


def _summary_cells(summary: RepeatSummary, sol_us: Optional[float]) -> tuple:
    stats = summary.stats
    sol = f"{sol_us:.3f}" if sol_us else "n/a"
    ratio = f"{stats.mean / sol_us:.1f}" if sol_us else "n/a"
    return (f"{stats.mean:.2f}", f"{summary.median:.2f}", f"{stats.best:.2f}", f"{stats.worst:.2f}",
            str(stats.runs), str(len(summary.slow)), sol, ratio)


def local_benchmark(cases: list[Case], worker: Worker, submission: Path, plot_path: Optional[Path], verbose: bool,
                    baseline: Optional[str] = None) -> int:
    """The board's timing of each case; with `baseline`, the submission under SM100_CONFIG =
    baseline is timed right after it in the same worker, and the ratio of the means printed."""
    progress = ProgressLine(sys.stdout)
    print(f"Benchmarks of {_shown(submission)} on {_device_name()}: {NUM_ITERATIONS_PER_BENCHMARK} inputs, "
          "L2 flushed before each timed repeat; the board ranks by the mean")
    if baseline:
        print(f"each benchmark also under SM100_CONFIG = \"{baseline}\" (the row below it), "
              "and the ratio of the means")
    progress.show("warm-up (benchmark 1)")
    # A failure here shows again, and is reported, in the timed run below.
    worker.apply(_run_single_benchmark, cases[0].test, False, 100, 10e7, utils.clear_l2_cache)
    progress.clear()
    print(_benchmark_row("#", BENCHMARK_COLUMNS, " G  M  N  K"))
    summaries, baseline_means, failed = {}, {}, 0
    for case in cases:
        runs = [("", ())] + ([(baseline, (baseline,))] if baseline else [])
        means = {}
        for label, config in runs:
            progress.show(f"benchmark {case.number}{' ' + label if label else ''}: generating inputs, checking outputs")

            def report(repeats: int, seconds: float, number=case.number) -> None:
                progress.show(f"benchmark {number}{' ' + label if label else ''}: {repeats} timed repeats, "
                              f"{seconds:.0f} s (at most 100 repeats or 2 min)")

            arguments = (case.test, False, 100, 10e9, utils.clear_l2_cache)
            result = (worker.apply(_with_config, *config, _run_single_benchmark, *arguments, on_progress=report)
                      if config else worker.apply(_run_single_benchmark, *arguments, on_progress=report))
            progress.clear()
            number = label or case.number
            if not isinstance(result, list):
                failed += 1
                sol = f"{case.sol_us:.3f}" if case.sol_us else "n/a"
                print(_benchmark_row(number, ("FAIL",) + ("-",) * 5 + (sol, "-"), _sizes(case.test)))
                _print_message(result.summary if isinstance(result, Raised) else result)
                if verbose and isinstance(result, Raised) and result.traceback:
                    _print_traceback(result.traceback)
                continue
            summary = summarize_repeats([ns / 1000 for ns in result])
            print(_benchmark_row(number, _summary_cells(summary, case.sol_us), _sizes(case.test)))
            if summary.slow:
                _print_message(describe_slow_repeats(summary))
            means[label] = summary.stats.mean
            if not label:
                summaries[case.number] = summary
        if baseline and len(means) == 2:
            baseline_means[case.number] = means[baseline]
            print(f"       mean / {baseline} mean: {means[''] / means[baseline]:.2f}")
    if failed == 0 and len(cases) > 1:
        means = [s.stats.mean for s in summaries.values()]
        line = (f"geomean: mean {_geomean(means):.2f} us (the board's ranking), "
                f"median {_geomean([s.median for s in summaries.values()]):.2f} us")
        if all(case.sol_us for case in cases):
            sol_geomean = _geomean([case.sol_us for case in cases])
            line += f"; speed of light {sol_geomean:.3f} us, mean/SOL {_geomean(means) / sol_geomean:.1f}"
        if baseline:
            baseline_geomean = _geomean(list(baseline_means.values()))
            line += f"; {baseline} {baseline_geomean:.2f} us, ratio {_geomean(means) / baseline_geomean:.2f}"
        print(line)
    if plot_path is not None and summaries:
        plot = _plot_module()
        plot.draw(plot_path, {n: s.stats.mean for n, s in summaries.items()},
                  {n: s.median for n, s in summaries.items()},
                  {case.number: case.sol_us for case in cases if case.sol_us}, _device_name())
        print(f"plot: {_shown(plot_path)}")
    return 1 if failed else 0


def _plot_module():
    """tools/plot_benchmarks.py, imported; UsageError if it or matplotlib is missing."""
    if not PLOT_TOOL.is_file():
        raise UsageError(f"--plot needs {_shown(PLOT_TOOL)}, which is missing")
    spec = importlib.util.spec_from_file_location("plot_benchmarks", PLOT_TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules["plot_benchmarks"] = module  # its dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    if not module.matplotlib_available():
        raise UsageError("--plot needs matplotlib, which is not installed (pip install matplotlib)")
    return module


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message):  # one line instead of usage + error
        raise UsageError(f"{message} (see python eval.py --help)")


def make_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(
        prog="eval.py", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=HELP_EPILOG,
        description="Check (test) or time (benchmark) a submission on task.yml's tests and benchmarks, "
                    "locally. Under POPCORN_FD it is the board's evaluator instead (see the end).")
    parser.add_argument("mode", choices=["test", "benchmark"])
    parser.add_argument("spec_file", nargs="?", type=Path, metavar="SPEC_FILE",
                        help="tests to run instead of task.yml's, one per line in the board's syntax: "
                             "`m: [96, 128]; n: [128, 256]; k: [256, 512]; g: 2; seed: 1111`")
    parser.add_argument("--submission", metavar="FILE", type=Path,
                        help="file defining custom_kernel (default: submission.py next to eval.py); without "
                             "a GPU, `test` runs a file that defines compile_sm100 (a B200 kernel) in the "
                             "sm_100a emulator")
    parser.add_argument("--reference", action="store_true",
                        help="test the harness alone, with tests/ref_submission.py (the reference) as the "
                             "submission, and no sm_100a inspection: seconds, where the emulated kernel takes minutes")
    parser.add_argument("--only", type=int, metavar="N",
                        help="run only test or benchmark number N (from 1; without a GPU, tests 11 to 13 are the "
                             "emulator's wrap cases)")
    parser.add_argument("--inspect", action=argparse.BooleanOptionalAction, default=None,
                        help="`test`: run the sm_100a inspection (default: only in a full run of the submission "
                             "without a GPU)")
    parser.add_argument("--races", action=argparse.BooleanOptionalAction, default=None,
                        help="`test` in the emulator: happens-before race detection, on by default; " + NO_RACES)
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="show the full traceback when the submission fails to import or raises")
    parser.add_argument("--plot", metavar="FILE.png", type=Path,
                        help="`benchmark`: draw the times against speed of light and the published "
                             "anchors (needs matplotlib)")
    parser.add_argument("--baseline", choices=[BASELINE_CONFIG],
                        help="`benchmark`: also time the submission under SM100_CONFIG = \"cublas\" (each "
                             "group through torch._scaled_mm; a B200 only) and print the ratio of the means")
    return parser


def baseline_problem(baseline: str, submission: Path) -> str:
    """'' if `--baseline` can run here on `submission`, else one line saying why not."""
    if not re.search(r"^SM100_CONFIG\s*=", submission.read_text(), re.MULTILINE):
        return f"--baseline {baseline}: {_shown(submission)} has no SM100_CONFIG line to set"
    if not torch.cuda.is_available():
        return (f"--baseline {baseline} needs a B200 (FP4 torch._scaled_mm, compute capability 10.x): "
                "no CUDA GPU here")
    major, minor = torch.cuda.get_device_capability()
    if major != 10:
        return (f"--baseline {baseline} needs a B200: cuBLAS has no FP4 GEMM on compute capability "
                f"{major}.{minor} ({torch.cuda.get_device_name()})")
    return ""


def local_main(argv: list[str]) -> int:
    sys.stdout.reconfigure(line_buffering=True)  # rows appear as they are made, also in a pipe
    options = None
    try:
        options = make_parser().parse_intermixed_args(argv)  # SPEC_FILE before or after the options
        tests, benchmarks, sol_us = load_task(ROOT / "task.yml")
        if options.spec_file is not None:
            try:
                listed = read_spec_file(options.spec_file)
            except SpecError as error:
                raise UsageError(str(error)) from None
        else:
            listed = _task_tests(tests if options.mode == "test" else benchmarks)
        if options.reference and options.submission:
            raise UsageError("--reference tests tests/ref_submission.py: leave out --submission")
        submission = options.submission or DEFAULT_SUBMISSION
        # the wrap cases follow task.yml's tests where the B200 kernel can be emulated (without a GPU: known below)
        wraps = wrap_cases(len(listed) + 1) if (
            options.mode == "test" and options.spec_file is None and not options.reference
            and EMULATE_TOOL.is_file() and defines_sm100_kernel(submission)) else ()
        cases = _select_cases(listed, options.only, sol_us, wraps)
        if options.mode == "test" and (options.plot or options.baseline):
            raise UsageError(f"{'--plot' if options.plot else '--baseline'} applies to benchmark")
        if options.mode == "benchmark" and options.inspect is not None:
            raise UsageError("--inspect/--no-inspect apply to test")
        if options.mode == "benchmark" and options.races is not None:
            raise UsageError("--races/--no-races apply to test (the emulator's)")
        if options.plot and not options.plot.parent.is_dir():
            raise UsageError(f"--plot: no folder {options.plot.parent} to write {options.plot.name} into")
        if options.plot:
            _plot_module()  # before any benchmark runs: a missing matplotlib is said at once
        if not submission.is_file():
            raise UsageError(f"submission file not found: {options.submission}")
        if options.baseline and (problem := baseline_problem(options.baseline, submission)):
            print(f"eval.py: benchmark skipped: {problem}", file=sys.stderr)
            return 3
        if options.mode == "benchmark" and not torch.cuda.is_available():
            print("eval.py: benchmark skipped: no CUDA GPU here (timing needs CUDA events); "
                  "run it on a GPU machine", file=sys.stderr)
            return 3
        inspect = options.mode == "test" and (options.inspect if options.inspect is not None else (
            options.only is None and options.spec_file is None and not options.reference
            and not torch.cuda.is_available()))
        emulate = (options.mode == "test" and not options.reference and not torch.cuda.is_available()
                   and defines_sm100_kernel(submission))
        races = options.races is not False
        first_line = ""
        if not emulate and wraps:
            cases = [case for case in cases if case.workers is None]
            if not cases:
                raise UsageError(f"--only {options.only}: a wrap case, run where the B200 kernel is emulated "
                                 f"(no CUDA GPU); here there are {len(listed)} (numbered 1 to {len(listed)})")
        if emulate:
            if not (EMULATE_TOOL.is_file() and (ROOT / "emulator").is_dir()):
                raise UsageError(f"{_shown(submission)} has a B200 kernel and there is no GPU here: running it "
                                 "needs the emulator (emulator/, tools/emulate.py); --reference tests the harness alone")
            where = ("at a few SM pairs, where every pipeline wraps" if all(case.workers for case in cases) else
                     "at a B200's worker count and, for every pipeline to wrap, at a few SM pairs"
                     if any(case.workers for case in cases) else "at a B200's worker count")
            first_line = (f"emulated: no CUDA GPU here, so {_shown(submission)}'s B200 (sm_100a) kernel runs in the "
                          f"sm_100a emulator on this CPU {where}, "
                          + ("with race detection" if races else "without race detection (--no-races: a pass "
                             "vouches only for the interleaving that ran)")
                          + " (minutes; --reference checks the harness alone in seconds)")
        if options.reference:
            submission = REFERENCE_SUBMISSION
            inspected_note = f"; {_shown(DEFAULT_SUBMISSION)} is checked by the sm_100a inspection below"
            first_line = (f"--reference: testing the harness with {_shown(REFERENCE_SUBMISSION)} (the reference)"
                          + (inspected_note if inspect and defines_sm100_kernel(DEFAULT_SUBMISSION) else ""))
        # said once the worker has the submission: a file it cannot import, or whose SM100_CONFIG line is
        # malformed, is bad use in one line and nothing else
        worker = _start_worker(submission, emulate, races)
        if first_line:
            print(first_line)
    except UsageError as error:
        if options is not None and options.verbose and error.details:
            print(error.details, file=sys.stderr, end="")
        print(f"eval.py: {error}", file=sys.stderr)
        return 2
    utils.set_seed(42)
    with worker:
        if options.mode == "benchmark":
            return local_benchmark(cases, worker, submission, options.plot, options.verbose, options.baseline)
        inspected = (options.submission or DEFAULT_SUBMISSION) if inspect else None
        # a part of the tests without a GPU skips the inspection by default: say so, not silently (issue 26, item 7)
        note = ("inspection: not run (a SPEC_FILE or --only runs part of the tests; --inspect runs it)"
                if options.inspect is None and not inspect and not torch.cuda.is_available() and not options.reference
                and options.mode == "test" and defines_sm100_kernel(options.submission or DEFAULT_SUBMISSION) else "")
        return local_test(cases, worker, submission, inspected, options.verbose, note)


def main() -> int:
    fd = os.getenv("POPCORN_FD")
    return popcorn_main(fd) if fd else local_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
