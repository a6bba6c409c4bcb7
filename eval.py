"""Check and time a submission for the nvfp4_group_gemm leaderboard.

Two faces:
* With POPCORN_FD set (how the board runs it): `python eval.py MODE SPEC_FILE` speaks the protocol
  of the board's evaluator (gpu-mode/reference-kernels, problems/nvidia/
  eval_better_bench_grouped_gemm.py): modes test / benchmark / leaderboard / profile, results as
  `key: value` lines on that file descriptor, work done in a spawned worker process.
* Otherwise, a local command: `python eval.py test|benchmark [--submission FILE] [--only N]`
  runs task.yml's tests or benchmarks and prints a table (see README.md, section "eval.py").
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
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from reference import check_implementation, generate_input
from utils import clear_l2_cache, clear_l2_cache_large, set_seed

try:
    # Errors from CuTe DSL cannot be pickled back from the worker: report them as a failure.
    from cutlass._mlir.ir import MLIRError
    from cutlass.cute.nvgpu.common import OpError

    UNSERIALIZABLE_EXCEPTIONS = (OpError, MLIRError)
except ImportError:  # no CuTe DSL here (e.g. a Hopper machine): nothing to catch
    UNSERIALIZABLE_EXCEPTIONS = ()

ROOT = Path(__file__).resolve().parent
NUM_ITERATIONS_PER_BENCHMARK = 15
INSPECTION_TOOL = Path("tools") / "inspect_sm100.py"
REFERENCE_SUBMISSION = Path("tests") / "ref_submission.py"
INSPECTION_TIMEOUT_S = 900


# ---------------------------------------------------------------------------------------------
# Test specs: `key: value; key: value` lines; values are integers, names, or [..] / (..) lists.

_SPEC_PART = re.compile(r"\s*([a-zA-Z_]+)\s*:\s*(\[[^\]]*\]|\([^)]*\)|[a-zA-Z_]+|[+-]?[0-9]+)\s*")


class SpecError(ValueError):
    pass


class SubmissionError(Exception):
    """The submission file cannot be imported or has no custom_kernel."""


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
    args = {}
    for part in line.split(";"):
        match = _SPEC_PART.fullmatch(part)
        if not match:
            raise SpecError(f"invalid test case: '{line}': '{part}'")
        args[match[1]] = _spec_value(match[2])
    return args


def _combine(a: int, b: int) -> int:
    # The board mixes the public test seed with its secret seed (Cantor pairing, kept large).
    return int(a + (a + b) * (a + b + 1) // 2)


def get_test_cases(file_name: str, seed: Optional[int]) -> list[TestCase]:
    try:
        content = Path(file_name).read_text()
    except Exception as error:
        print(f"Could not open test file`{file_name}`: {error}", file=sys.stderr)
        sys.exit(113)
    tests = []
    for line in content.splitlines():
        try:
            tests.append(TestCase(args=parse_spec_line(line), spec=line))
        except SpecError as error:
            print(error, file=sys.stderr)
            sys.exit(113)
    if seed is not None:
        for test in tests:
            if "seed" in test.args:
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
    """Durations in nanoseconds -> Stats (std with Bessel's correction, err = std / sqrt(runs))."""
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


def _custom_kernel() -> Callable:
    """custom_kernel of the module `submission` (the board's submission.py, or --submission)."""
    try:
        from submission import custom_kernel
    except Exception as error:
        raise SubmissionError(_describe(error)) from None
    return custom_kernel


def _run_single_test(test: TestCase) -> tuple[bool, str]:
    custom_kernel = _custom_kernel()
    data = generate_input(**test.args)
    _synchronize()
    try:
        output = custom_kernel(_clone_data(data))
    except UNSERIALIZABLE_EXCEPTIONS as error:
        print(f"Encountered {error}", file=sys.stderr)
        return False, str(error)
    _synchronize()
    return check_implementation(data, output)


def _run_single_benchmark(
    test: TestCase, recheck: bool, max_repeats: int, max_time_ns: float, flush_l2: Callable
) -> Any:
    """Stats of one benchmark, or a message saying why it failed."""
    if not torch.cuda.is_available():
        return "benchmarking needs a CUDA GPU (torch.cuda.is_available() is False)"
    custom_kernel = _custom_kernel()
    args = dict(test.args)
    data_list = []
    for _ in range(NUM_ITERATIONS_PER_BENCHMARK):
        if "seed" in args:
            args["seed"] += 42
        data_list.append(generate_input(**args))
    check_copy = _clone_data(data_list)

    try:
        outputs = [custom_kernel(_clone_data(data)) for data in data_list]
    except UNSERIALIZABLE_EXCEPTIONS as error:
        return f"Encountered {error}"
    for reference_data, output in zip(check_copy, outputs):
        good, message = check_implementation(reference_data, output)
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
        start_event.record()
        outputs = [custom_kernel(data) for data in data_list]
        end_event.record()
        torch.cuda.synchronize()
        durations.append(start_event.elapsed_time(end_event) / NUM_ITERATIONS_PER_BENCHMARK * 1e6)

        if recheck:
            # Every output is checked (the board's loop only acts on the last one's verdict).
            for reference_data, output in zip(check_copy, outputs):
                good, message = check_implementation(reference_data, output)
                if not good:
                    return message

        elapsed_ns = time.perf_counter_ns() - start_ns
        if repeat > 1 and elapsed_ns > 1e8:
            stats = calculate_stats(durations)
            if (stats.err / stats.mean < 0.001 or stats.mean * stats.runs > max_time_ns
                    or elapsed_ns > 120e9):
                break
    return calculate_stats(durations)


def _describe(error: BaseException) -> str:
    """One line: exception type, message and, except for syntax errors (whose message has it),
    where it was raised."""
    text = f"{type(error).__name__}: {error}"
    frames = traceback.extract_tb(error.__traceback__)
    if frames and not isinstance(error, SyntaxError):
        text += f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})"
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------------
# The board's face (POPCORN_FD set).


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


def run_testing(logger: PopcornOutput, pool, tests: list[TestCase]) -> int:
    passed = True
    logger.log("test-count", len(tests))
    for idx, test in enumerate(tests):
        logger.log(f"test.{idx}.spec", test.spec)
        good, message = pool.apply(_run_single_test, (test,))
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


def _benchmark_in_worker(pool, test, recheck, max_repeats, max_time_ns):
    return pool.apply(
        _run_single_benchmark, (test, recheck, max_repeats, max_time_ns, clear_l2_cache_large)
    )


def run_benchmarking(logger: PopcornOutput, pool, tests: list[TestCase]) -> int:
    _benchmark_in_worker(pool, tests[0], False, 100, 10e7)  # warm-up, result unused
    passed = True
    logger.log("benchmark-count", len(tests))
    for idx, test in enumerate(tests):
        logger.log(f"benchmark.{idx}.spec", test.spec)
        result = _benchmark_in_worker(pool, test, False, 100, 10e9)
        if isinstance(result, Stats):
            _log_stats(logger, idx, result)
        else:
            passed = False
            logger.log(f"benchmark.{idx}.status", "fail")
            logger.log(f"benchmark.{idx}.error", result)
    logger.log("check", "pass" if passed else "fail")
    return 0 if passed else 112


def run_leaderboard(logger: PopcornOutput, pool, tests: list[TestCase]) -> int:
    for test in tests:  # warm up every shape
        _benchmark_in_worker(pool, test, False, 50, 5e8)
    logger.log("benchmark-count", len(tests))
    passed = True
    for idx, test in enumerate(tests):
        result = _benchmark_in_worker(pool, test, True, 100, 30e9)
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


def _nvtx_range(name: str):
    # NVTX is part of CUDA builds of torch only.
    return torch.cuda.nvtx.range(name) if torch.cuda.is_available() else contextlib.nullcontext()


def _profile_one(test: TestCase, under_ncu: bool) -> str:
    """Run custom_kernel once inside an NVTX range; without ncu, return torch.profiler's table."""
    custom_kernel = _custom_kernel()
    with _nvtx_range("generate input"):
        data = _clone_data(generate_input(**test.args))
        _synchronize()
    if under_ncu:  # ncu, running this process, collects the report itself
        with _nvtx_range("custom_kernel"):
            custom_kernel(data)
            _synchronize()
        return ""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as profiler:
        with _nvtx_range("custom_kernel"):
            custom_kernel(data)
            _synchronize()
    sort_by = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    return profiler.key_averages().table(sort_by=sort_by, row_limit=20)


def run_profiling(logger: PopcornOutput, pool, tests: list[TestCase]) -> int:
    # The board sets POPCORN_NCU=1 when it runs this under ncu. (Its evaluator takes the ncu branch
    # for any value, even when unset, since bool("0") is True; we honour "0" and unset.)
    under_ncu = os.getenv("POPCORN_NCU", "0") not in ("", "0")
    logger.log("benchmark-count", len(tests))
    for idx, test in enumerate(tests):
        logger.log(f"benchmark.{idx}.spec", test.spec)
        report = pool.apply(_profile_one, (test, under_ncu))
        logger.log(f"benchmark.{idx}.report", base64.b64encode(report.encode("utf-8"), b"+*").decode("utf-8"))
    logger.log("check", "pass")
    return 0


POPCORN_MODES = {
    "test": run_testing,
    "benchmark": run_benchmarking,
    "leaderboard": run_leaderboard,
    "profile": run_profiling,
}


def popcorn_main(fd: str) -> int:
    if len(sys.argv) < 3:
        print("usage: POPCORN_FD=N python eval.py test|benchmark|leaderboard|profile SPEC_FILE",
              file=sys.stderr)
        return 2
    mode = sys.argv[1]
    seed = os.getenv("POPCORN_SEED")
    os.unsetenv("POPCORN_SEED")  # keep the secret seed from the submission's process
    seed = int(seed) if seed else None
    set_seed(seed or 42)
    tests = get_test_cases(sys.argv[2], seed)
    if mode not in POPCORN_MODES:
        print(f"eval.py: unknown mode '{mode}' (expected one of: {', '.join(POPCORN_MODES)})",
              file=sys.stderr)
        return 2
    try:
        fd = int(fd)
    except ValueError:
        print(f"eval.py: POPCORN_FD must be a file descriptor number, got '{fd}'", file=sys.stderr)
        return 2
    with PopcornOutput(fd) as logger:
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            try:
                return POPCORN_MODES[mode](logger, pool, tests)
            except SubmissionError as error:  # exit code 1, as an uncaught error on the board
                print(f"eval.py: cannot load submission.py: {error}", file=sys.stderr)
                return 1


# ---------------------------------------------------------------------------------------------
# The local face.

_SOL_ROW = re.compile(r"^\s*(\d+)\s+(\[[\d,\s]*\])\s+(\[[\d,\s]*\])\s+(\[[\d,\s]*\])\s+\d+\s+([\d.]+)\s*$")


class UsageError(Exception):
    pass


@dataclasses.dataclass
class Case:
    number: int  # 1-based, as printed
    test: TestCase
    sol_us: Optional[float] = None


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


def _select_cases(entries: list[dict], only: Optional[int], sol_us: dict) -> list[Case]:
    if only is not None and not 1 <= only <= len(entries):
        raise UsageError(f"--only {only}: there are {len(entries)} (numbered 1 to {len(entries)})")
    cases = []
    for number, entry in enumerate(entries, start=1):
        if only in (None, number):
            spec = _spec_line(entry)
            key = tuple(tuple(entry[name]) for name in "mnk")
            cases.append(Case(number, TestCase(args=parse_spec_line(spec), spec=spec), sol_us.get(key)))
    return cases


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
        raise UsageError(f"cannot import {file_name}: {_describe(error)}") from None
    if not callable(getattr(module, "custom_kernel", None)):
        raise UsageError(f"{file_name} defines no function custom_kernel")


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


def run_inspection() -> bool:
    """Run the team's sm_100a inspection tool (no GPU needed) if the repository has it."""
    if not (ROOT / INSPECTION_TOOL).is_file():
        print(f"inspection: {INSPECTION_TOOL} not found, skipped")
        return True
    print(f"inspection: python {INSPECTION_TOOL}", flush=True)
    try:
        done = subprocess.run([sys.executable, str(INSPECTION_TOOL)], cwd=ROOT,
                              stdin=subprocess.DEVNULL, timeout=INSPECTION_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        print(f"inspection: FAIL (no result after {INSPECTION_TIMEOUT_S} s)")
        return False
    print(f"inspection: {'pass' if done.returncode == 0 else f'FAIL (exit code {done.returncode})'}")
    return done.returncode == 0


def local_test(cases: list[Case], submission: str) -> int:
    print(f"Tests of {submission} on {_device_name()}")
    print(f"{'#':>3}  result     time   G  M  N  K")
    failed = 0
    for case in cases:
        start = time.perf_counter()
        try:
            good, message = _run_single_test(case.test)
        except Exception as error:
            good, message = False, f"custom_kernel or the check raised {_describe(error)}"
        seconds = time.perf_counter() - start
        print(f"{case.number:>3}  {'pass' if good else 'FAIL':<6} {seconds:6.2f} s  {_sizes(case.test)}")
        if message:
            _print_message(message)
        failed += not good
    print(f"{len(cases) - failed} of {len(cases)} passed")
    inspected = torch.cuda.is_available() or run_inspection()
    return 0 if failed == 0 and inspected else 1


def _benchmark_row(number, cells, sizes) -> str:
    widths = (9, 9, 9, 5, 8, 7)
    return f"{number:>3}" + "".join(f"{cell:>{w}}" for cell, w in zip(cells, widths)) + f"  {sizes}"


def local_benchmark(cases: list[Case], submission: str) -> int:
    print(f"Benchmarks of {submission} on {_device_name()}: {NUM_ITERATIONS_PER_BENCHMARK} inputs, "
          "L2 flushed before each timed repeat")
    try:
        _run_single_benchmark(cases[0].test, False, 100, 10e7, clear_l2_cache)  # warm-up
    except Exception:
        pass  # the timed run below reports the same failure
    print(_benchmark_row("#", ("mean us", "best us", "worst us", "runs", "SOL us", "x SOL"),
                         " G  M  N  K"))
    means, sols, failed = [], [], 0
    for case in cases:
        try:
            result = _run_single_benchmark(case.test, False, 100, 10e9, clear_l2_cache)
        except Exception as error:
            result = f"custom_kernel or the check raised {_describe(error)}"
        sol = f"{case.sol_us:.3f}" if case.sol_us else "n/a"
        if not isinstance(result, Stats):
            failed += 1
            print(_benchmark_row(case.number, ("FAIL", "-", "-", "-", sol, "-"), _sizes(case.test)))
            _print_message(result)
            continue
        mean, best, worst = (value / 1000 for value in (result.mean, result.best, result.worst))
        ratio = f"{mean / case.sol_us:.1f}" if case.sol_us else "n/a"
        cells = (f"{mean:.2f}", f"{best:.2f}", f"{worst:.2f}", str(result.runs), sol, ratio)
        print(_benchmark_row(case.number, cells, _sizes(case.test)))
        means.append(mean)
        sols.append(case.sol_us)
    if failed == 0 and len(cases) > 1:
        geomean = math.exp(sum(map(math.log, means)) / len(means))
        line = f"geomean {geomean:.2f} us"
        if all(sols):
            sol_geomean = math.exp(sum(map(math.log, sols)) / len(sols))
            line += f", speed of light {sol_geomean:.3f} us, x SOL {geomean / sol_geomean:.1f}"
        print(line)
    return 1 if failed else 0


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message):  # one line instead of usage + error
        raise UsageError(f"{message} (see python eval.py --help)")


def local_main(argv: list[str]) -> int:
    parser = _ArgumentParser(
        prog="eval.py",
        description="Check (test) or time (benchmark) a submission on task.yml's cases. "
                    "Exit codes: 0 all passed, 1 a failure, 2 bad use, 3 benchmark without a GPU.")
    parser.add_argument("mode", choices=["test", "benchmark"])
    parser.add_argument("--submission", metavar="FILE",
                        help="file defining custom_kernel (default: ./submission.py; without a GPU, "
                             f"{REFERENCE_SUBMISSION} for the tests, and submission.py is inspected)")
    parser.add_argument("--only", type=int, metavar="N", help="run only test or benchmark number N")
    try:
        options = parser.parse_args(argv)
        tests, benchmarks, sol_us = load_task(ROOT / "task.yml")
        cases = _select_cases(tests if options.mode == "test" else benchmarks, options.only, sol_us)
        if options.mode == "benchmark" and not torch.cuda.is_available():
            print("eval.py: benchmark skipped: no CUDA GPU here (timing needs CUDA events); "
                  "run it on a GPU machine", file=sys.stderr)
            return 3
        if options.submission is None:
            options.submission = "submission.py"
            if not torch.cuda.is_available() and options.mode == "test":
                # submission.py's kernels need a GPU; the reference path still checks the harness,
                # and the sm_100a inspection (run after the tests) checks submission.py's kernel.
                options.submission = str(REFERENCE_SUBMISSION)
                print(f"no CUDA GPU: testing the harness with {REFERENCE_SUBMISSION} (the reference); "
                      "submission.py is checked by the sm_100a inspection below")
        load_submission(options.submission)
    except UsageError as error:
        print(f"eval.py: {error}", file=sys.stderr)
        return 2
    set_seed(42)
    if options.mode == "test":
        return local_test(cases, options.submission)
    return local_benchmark(cases, options.submission)


def main() -> int:
    fd = os.getenv("POPCORN_FD")
    return popcorn_main(fd) if fd else local_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
