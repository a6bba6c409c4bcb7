"""Bring-up ladder for a submission on a CUDA GPU, from one tile to the benchmarks, a process per case.

    python tools/check.py [--submission FILE] [--stage NAME] [--timeout S]   # the ladder
    python tools/check.py --list                                             # its cases (no GPU needed)
    python tools/check.py --case NAME                                        # one case, in this process
    python tools/check.py --config TEXT [...]                                # any of these, one configuration
    python tools/check.py --emulate [--no-races] [...]                       # without a GPU: in the emulator

Run it first on a GPU the kernel has never run on. Stages, in order: one_tile (one group, one
tile); partial_tiles (M = 1, 7, 40, 129 alone and mixed, M = 77 and 300, N = K = 256);
all_values (every e2m1 value, e4m3 scales from 1/8 to 3.75); many_groups (G = 16, 32); task_tests
(task.yml's 10 tests); benchmarks (task.yml's 4).

Each case calls only the public entry, `custom_kernel(data)` of the submission, with inputs that
follow the board's contract (reference.generate_input's shapes, dtypes, strides, blocked scale
layout with random padding, and value sets). Each `c` is filled with NaN and lies inside a larger
buffer whose other bytes hold a sentinel: after the call the sentinel must be intact (nothing
written outside `c`), and `c` and the returned tensors must be within 1e-3 + 1e-3 |ref| of a
float64 reference (exact dequantization, float64 products and sums). Verdicts: PASS; FAIL (wrong
values); OUTSIDE (wrote outside c); ERROR (custom_kernel raised); HANG (no result within the
timeout; the process is killed); CRASH (the process died without a result); RACE (--emulate: two
accesses that no synchronization orders, both named by the emulator's race detector). Each row
ends with the configuration the case's shape ran as (sm100_shape_config's choice), where the
submission's plan says.

`--emulate` (no GPU needed) runs the B200 kernel in the sm_100a emulator, with race detection
(--no-races skips it: faster, but a pass then vouches only for the interleaving that ran): the
stages up to task_tests at a B200's worker count, then a wraps stage, eval.py's wrap cases at a
few SM pairs, where every pipeline wraps (each worker runs several tiles, so every accumulator and
stage is reused, and its last tile goes out by TMA store).

The ladder prints one row per case and stops after the first stage with a failure (at once after
a HANG), then says what to run next. Exit status: 0 all passed; 1 a case did not pass; 2 no CUDA
GPU, or bad use.

`--config TEXT` runs under a configuration of the submission's Sm100Config ("safe",
"shipped,multicast=off,cluster_pairs=1", "pdl=off,l2_hints=off"): the case's process sets `submission.SM100_CONFIG`
before its first call. When the ladder fails and the submission has an Sm100Config, it bisects,
each attempt in its own process with the timeout: the failing case under SM100_SAFE; if that
passes, the case with each switch of the failing configuration set to safe's value, and with safe
with each switch set to the failing one's, which names the switches that break; then the whole
ladder under the fastest configurations the findings leave (ranked by tools/b200_model.py's
predict_geomean), safe last. It prints a table (configuration, run, verdict, seconds) and the
line of submission.py to change: "replace line N of submission.py (`SM100_CONFIG = ...`) with ...";
`--write` makes that change. When no tcgen05 configuration passes, it ends at the last rung,
SM100_CONFIG = "cublas" (cuBLAS per group, as the board's reference): on a B200 the whole ladder
under it, then its time on the benchmarks (`--case benchN --time`: mean per call, 10 repeats of 15
calls after an L2 flush); elsewhere one line says why it is not tried. On Hopper only `pdl` is
bisected (the only switch the Hopper path reads). `--config` and the file's SM100_CONFIG line are
checked first, on any machine: a malformed one is one line and exit 2.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import itertools
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import eval as harness  # noqa: E402  (task.yml reader, submission loader, one-line errors; imports no torch)

# torch and the board's reference.py and utils.py (which import it) take seconds: imported on first use, so that a
# command line that is refused is refused at once (issue 48, item 6)
torch = harness._ImportedOnFirstUse("torch", globals())
reference = harness._ImportedOnFirstUse("reference", globals())  # _dequantize, ceil_div, sf_vec_size
utils = harness._ImportedOnFirstUse("utils", globals())  # verbose_allclose

DEFAULT_TIMEOUT_S = 180  # per case, including the first call's compile
# The ladder's stages the emulator runs (--emulate): the benchmarks' N and K (4096-7168) would take
# tens of minutes each at its speed (BENCHMARKS.md, "The B200 kernel in the emulator").
EMULATED_STAGES = ("one_tile", "partial_tiles", "all_values", "many_groups", "task_tests", "wraps")
# A stage of the emulator's only: eval.py's wrap cases (harness.WRAP_CASES), at a few SM pairs where every pipeline
# wraps (a GPU runs at its own worker count: its benchmarks stage wraps them).
WRAP_NAMES = ("wrap_64", "wrap_192", "wrap_2pairs")  # the last: clusters of two SM pairs
RESULT_PREFIX = "check.py result: "  # how a case's process hands its result to the ladder
SENTINEL_BITS = 0x7E5A  # an fp16 NaN with a payload a kernel does not write by accident
GUARD_ROWS = 256  # rows of c's width on each side of c: more than any tile can overhang
SEED = 1111


@dataclasses.dataclass(frozen=True)
class Case:
    stage: str
    name: str
    m: tuple[int, ...]
    n: tuple[int, ...]
    k: tuple[int, ...]
    all_values: bool = False  # every e2m1 value and a wider range of e4m3 scales
    workers: int | None = None  # SM pairs of an emulated wrap case; None: the device's own

    @property
    def groups(self) -> int:
        return len(self.m)


def ladder() -> list[Case]:
    """Every case, stage by stage, from the smallest to the board's benchmarks."""
    cases = [Case("one_tile", "one_tile", (128,), (256,), (256,))]
    cases += [Case("partial_tiles", name, m, n, k) for name, m, n, k in (
        ("m1", (1,), (256,), (256,)),
        ("m7", (7,), (128,), (512,)),
        ("m40", (40,), (256,), (256,)),
        ("m129", (129,), (128,), (768,)),
        ("m7_m129", (7, 129), (256, 128), (256, 512)),
        ("m1_m1", (1, 1), (128, 256), (256, 256)),
        ("one_group", (77,), (256,), (512,)),
        ("m300", (300,), (384,), (512,)),
        ("n256_k256", (33, 200), (256, 256), (256, 256)),
    )]
    cases.append(Case("all_values", "full_values", (72, 260), (256, 128), (512, 768), all_values=True))
    cases.append(Case("many_groups", "g16", tuple(range(8, 8 + 16 * 19, 19)), (128, 256) * 8, (256, 512) * 8))
    cases.append(Case("many_groups", "g32", tuple(1 + 37 * i % 300 for i in range(32)),
                      (128, 256, 384, 512) * 8, (256, 512, 768, 1024) * 8))
    tests, benchmarks, _ = harness.load_task(ROOT / "task.yml")
    for stage, prefix, entries in (("task_tests", "test", tests), ("benchmarks", "bench", benchmarks)):
        cases += [Case(stage, f"{prefix}{number}", tuple(entry["m"]), tuple(entry["n"]), tuple(entry["k"]))
                  for number, entry in enumerate(entries, start=1)]
    return cases


def wrap_cases() -> list[Case]:
    """The emulator's wraps stage: eval.py's wrap cases (harness.WRAP_CASES), each at its few SM pairs."""
    return [Case("wraps", name, *(tuple(wrap.test.args[key]) for key in "mnk"), workers=wrap.workers)
            for name, wrap in zip(WRAP_NAMES, harness.wrap_cases(1), strict=True)]


def ladder_for(emulate: bool) -> list[Case]:
    """The ladder on a GPU, or under the emulator: its stages that fit (EMULATED_STAGES), then the wraps."""
    return [case for case in ladder() if case.stage in EMULATED_STAGES] + wrap_cases() if emulate else ladder()


# ---------------------------------------------------------------------------------------------
# Inputs: the board's contract, built here so that c can sit inside a guarded buffer.


@dataclasses.dataclass
class GuardedC:
    buffer: torch.Tensor  # fp16: guard band, c's M*N elements, guard band
    guard: int  # elements in each guard band

    def writes_outside(self) -> int:
        """Elements of the guard bands that no longer hold the sentinel."""
        bits = self.buffer.view(torch.int16)
        bands = torch.cat((bits[:self.guard], bits[bits.numel() - self.guard:]))
        return int((bands != SENTINEL_BITS).sum())


def guarded_c(m: int, n: int, device) -> tuple[torch.Tensor, GuardedC]:
    """c [M, N, 1] fp16 with the board's strides (N, 1, M*N), NaN-filled, inside a sentinel buffer."""
    guard = reference.ceil_div(GUARD_ROWS * n, 64) * 64  # keeps c 128-byte aligned
    buffer = torch.empty(2 * guard + m * n, dtype=torch.float16, device=device)
    buffer.view(torch.int16).fill_(SENTINEL_BITS)
    c = torch.as_strided(buffer, (m, n, 1), (n, 1, m * n), storage_offset=guard)
    c.fill_(float("nan"))
    return c, GuardedC(buffer, guard)


def _fp4_codes_and_scales(rows: int, k: int, generator, all_values: bool):
    """[rows, K/2] FP4 byte pairs and [rows, K/16] e4m3 scales, on the CPU."""
    codes = torch.randint(0, 256, (rows, k // 2), generator=generator, dtype=torch.uint8)
    if all_values:
        # e4m3 exponent fields 4..8 with any mantissa: 2^-3 .. 3.75
        scale_bits = torch.randint(4 << 3, 9 << 3, (rows, k // reference.sf_vec_size), generator=generator,
                                   dtype=torch.uint8)
        return codes, scale_bits.view(torch.float8_e4m3fn)
    codes &= 0b1011_1011  # as the board: values 0, +-0.5, +-1, +-1.5
    scales = torch.randint(1, 3, (rows, k // reference.sf_vec_size), generator=generator, dtype=torch.int8)
    return codes, scales.to(torch.float8_e4m3fn)


def blocked_scales(scales: torch.Tensor, rows: int, k: int, generator, device) -> torch.Tensor:
    """Scales [rows, K/16] in the board's reordered layout: a (32, 4, ceil(rows/128), 4,
    ceil(K/64), 1) permuted view of a contiguous (1, ceil(rows/128), ceil(K/64), 32, 4, 4) buffer,
    element [r % 32, (r % 128) // 32, r // 128, j % 4, j // 4, 0] the scale of row r, column j;
    padding rows and columns hold random 1s and 2s, as on the board."""
    row_blocks, col_blocks = reference.ceil_div(rows, 128), reference.ceil_div(k // reference.sf_vec_size, 4)
    buffer = torch.randint(1, 3, (1, row_blocks, col_blocks, 32, 4, 4), generator=generator, dtype=torch.int8)
    buffer = buffer.to(torch.float8_e4m3fn)
    r = torch.arange(rows).view(-1, 1)
    j = torch.arange(k // reference.sf_vec_size).view(1, -1)
    buffer.view(torch.uint8)[0, r // 128, j // 4, r % 32, (r % 128) // 32, j % 4] = scales.view(torch.uint8)
    return buffer.to(device).permute(3, 4, 1, 5, 2, 0)


def make_input(case: Case, device, seed: int = SEED):
    """(data, guards): data as custom_kernel takes it, (abc, sfasfb, sfasfb_reordered,
    problem_sizes), with a/b [rows, K/2, 1] float4_e2m1fn_x2 K-major views of (1, rows, K/2)
    buffers, sfasfb on the CPU, the rest on `device`; one GuardedC per group."""
    generator = torch.Generator().manual_seed(seed)
    abc, sfasfb, reordered, sizes, guards = [], [], [], [], []
    for m, n, k in zip(case.m, case.n, case.k):
        a_codes, sfa = _fp4_codes_and_scales(m, k, generator, case.all_values)
        b_codes, sfb = _fp4_codes_and_scales(n, k, generator, case.all_values)
        a = a_codes.view(1, m, k // 2).to(device).permute(1, 2, 0).view(torch.float4_e2m1fn_x2)
        b = b_codes.view(1, n, k // 2).to(device).permute(1, 2, 0).view(torch.float4_e2m1fn_x2)
        c, guard = guarded_c(m, n, device)
        abc.append((a, b, c))
        sfasfb.append((sfa.unsqueeze(0).permute(1, 2, 0), sfb.unsqueeze(0).permute(1, 2, 0)))
        reordered.append((blocked_scales(sfa, m, k, generator, device),
                          blocked_scales(sfb, n, k, generator, device)))
        sizes.append((m, n, k, 1))
        guards.append(guard)
    return (abc, sfasfb, reordered, sizes), guards


def reference_outputs(data) -> list[torch.Tensor]:
    """Per group, a @ b^T of the dequantized values in float64 (exact products, sums exact to
    float64), rounded once to fp16: [M, N] on a's device."""
    abc, sfasfb, _, _ = data
    outputs = []
    for (a, b, _), (sfa, sfb) in zip(abc, sfasfb):
        a_values = reference._dequantize(a[:, :, 0], sfa[:, :, 0], torch.float64)
        b_values = reference._dequantize(b[:, :, 0], sfb[:, :, 0], torch.float64)
        outputs.append((a_values @ b_values.T).to(torch.float16))
    return outputs


def error_over_tolerance(output: torch.Tensor, expected: torch.Tensor) -> float:
    """max |output - expected| / (1e-3 + 1e-3 |expected|), in float64; NaN counts as infinite.
    At most 1 passes the board's check."""
    output, expected = output.double(), expected.double()
    ratio = (output - expected).abs() / (1e-3 + 1e-3 * expected.abs())
    ratio = torch.where(torch.isnan(ratio), math.inf, ratio)
    return float(ratio.max()) if ratio.numel() else 0.0


# ---------------------------------------------------------------------------------------------
# One case, in this process.


@dataclasses.dataclass
class Result:
    verdict: str  # PASS, FAIL, OUTSIDE, ERROR, HANG, RACE, CRASH
    error_over_tol: float | None
    seconds: float
    message: str = ""
    mean_us: float | None = None  # --time: the mean time of one call
    runs_as: str = ""  # the configuration the case's shape ran with (harness.runs_as), where the plan says


def judge(data, outputs, expected: list[torch.Tensor], guards: list[GuardedC], seconds: float) -> Result:
    """The verdict on one call's outputs; `data` holds the c tensors the call was given."""
    outside = [guard.writes_outside() for guard in guards]
    if any(outside):
        groups = ", ".join(f"group {g}: {count}" for g, count in enumerate(outside) if count)
        return Result("OUTSIDE", None, seconds, f"elements written outside c ({groups})")
    if not isinstance(outputs, (list, tuple)) or len(outputs) != len(expected):
        length = len(outputs) if hasattr(outputs, "__len__") else "?"
        return Result("FAIL", None, seconds, f"returned {type(outputs).__name__} of length {length}, "
                      f"expected a list of {len(expected)} c")
    worst, message = 0.0, ""
    for group, ((_, _, c), output, want) in enumerate(zip(data[0], outputs, expected)):
        for name, got in (("c", c), ("returned", output)):
            if not isinstance(got, torch.Tensor) or tuple(got.shape) != (*want.shape, 1):
                return Result("FAIL", None, seconds, f"group {group}: {name} tensor has shape "
                              f"{tuple(getattr(got, 'shape', ()))}, expected {(*want.shape, 1)}")
            ratio = error_over_tolerance(got[:, :, 0], want)
            if ratio > 1 and not message:
                details = utils.verbose_allclose(got[:, :, 0], want, rtol=1e-3, atol=1e-3, max_print=3)
                message = f"group {group} ({name}): " + "; ".join(details)
            worst = max(worst, ratio)
    return Result("PASS" if worst <= 1 else "FAIL", worst, seconds, message)


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def run_case_here(case: Case, submission: Path, device: str = "cuda", config: str | None = None,
                  emulate: bool = False, races: bool = True) -> Result:
    """Load the submission, run custom_kernel once on the case's inputs, judge the outputs.
    (device "cpu" checks this tool itself, with a submission that runs there.) `config`: the
    submission's SM100_CONFIG for this run; it is read when the first call builds its plan.
    `emulate`: the B200 kernel runs in the emulator on the CPU (tools/emulate.py), at a B200's
    worker count (a wrap case's: its few SM pairs), with race detection if `races`; a hang, a race
    or a defect the emulator reports is the case's HANG, RACE or ERROR. The result names the
    configuration the shape ran as (harness.runs_as)."""
    result = _run_case_here(case, submission, device, config, emulate, races)
    module = sys.modules.get("submission")
    hopper = not emulate and device == "cuda" and torch.cuda.get_device_capability()[0] == 9
    with contextlib.suppress(Exception):  # a submission whose plans say nothing leaves it empty
        result.runs_as = harness.runs_as(module, zip(case.m, case.n, case.k), hopper) if module else ""
    return result


def _run_case_here(case: Case, submission: Path, device: str, config: str | None, emulate: bool,
                   races: bool) -> Result:
    harness.load_submission(str(submission))
    module = sys.modules["submission"]
    if config is not None:
        module.SM100_CONFIG = config
    device = "cpu" if emulate else device
    data, guards = make_input(case, device)
    expected = reference_outputs(data)
    _synchronize(device)
    start = time.perf_counter()
    try:
        if emulate:
            outputs = _emulated_call(module, data, guards, case.workers, races)
        else:
            outputs = module.custom_kernel(data)
            _synchronize(device)
    except EmulatorHang as hang:
        return Result("HANG", None, time.perf_counter() - start, str(hang))
    except EmulatorRace as race:
        return Result("RACE", None, time.perf_counter() - start, str(race))
    except Exception as error:
        return Result("ERROR", None, time.perf_counter() - start,
                      f"custom_kernel raised {harness._describe(error)}")
    return judge(data, outputs, expected, guards, time.perf_counter() - start)


TIMED_REPEATS = 10  # --time: repeats of 15 back-to-back calls, each after an L2 flush


def time_case_here(case: Case, submission: Path, config: str | None = None) -> Result:
    """The case's mean time per call in eval.py's way, shortened: one input (not 15), 15 calls back
    to back between CUDA events after an L2 flush, TIMED_REPEATS repeats after a first call; FAIL or
    ERROR if that first call's outputs do not pass."""
    from utils import clear_l2_cache

    checked = run_case_here(case, submission, config=config)
    if checked.verdict != "PASS":
        return checked
    custom_kernel = sys.modules["submission"].custom_kernel
    data, _ = make_input(case, "cuda")
    custom_kernel(data)
    durations = []
    for _ in range(TIMED_REPEATS):
        torch.cuda.synchronize()
        clear_l2_cache()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(15):
            custom_kernel(data)
        end.record()
        torch.cuda.synchronize()
        durations.append(start.elapsed_time(end) * 1000 / 15)
    return dataclasses.replace(checked, mean_us=sum(durations) / len(durations))


class EmulatorHang(Exception):
    pass


class EmulatorRace(Exception):
    pass


def _emulated_call(module, data, guards, workers: int | None = None, races: bool = True):
    """custom_kernel(data) with the emulator as a B200 of `workers` SM pairs (None: a B200's 74), `races`: with
    happens-before race detection."""
    import emulate  # tools/emulate.py
    import emulator

    module.DEVICE = emulate.EmulatedB200(workers)
    emu = emulator.Emulator(warp_roles=emulate.submission_roles(module), races=races)
    try:
        outputs, _ = emulate.emulated_call(module, data, [guard.buffer for guard in guards], emu)
    except emulator.HangError as hang:
        raise EmulatorHang(f"{hang.message}\n{hang.report}") from None
    except emulator.RaceError as race:
        raise EmulatorRace(f"RACE {race}") from None
    return outputs


# ---------------------------------------------------------------------------------------------
# The ladder: each case in a process of its own.


def run_in_subprocess(command: list[str], timeout: float) -> Result:
    """Run a case's process; its result is its last line starting with RESULT_PREFIX."""
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Result("HANG", None, timeout, f"no result after {timeout:g} s: killed")
    seconds = time.perf_counter() - start
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if not lines:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Result("CRASH", None, seconds,
                      f"exit code {done.returncode}, no result; last stderr line: {last}")
    return Result(**json.loads(lines[-1][len(RESULT_PREFIX):]))


def _values(values: tuple[int, ...]) -> str:
    if len(set(values)) == 1:
        return str(values[0])
    if len(values) <= 4:
        return ",".join(map(str, values))
    return f"{min(values)}..{max(values)}"


ROW = "{:<14} {:<11} {:>3} {:>15} {:>15} {:>15}  {:<8} {:>9} {:>8}"  # M, N, K: up to 4 values of 3 digits


def format_row(case: Case, result: Result | None) -> str:
    """The case's row; after it, in parentheses, a wrap case's SM pairs and the configuration it ran as."""
    shapes = (case.groups, _values(case.m), _values(case.n), _values(case.k))
    notes = [harness._pairs(case.workers)] if case.workers is not None else []
    if result is None:
        row = ROW.format(case.stage, case.name, *shapes, "", "", "")
    else:
        ratio = "-" if result.error_over_tol is None else f"{result.error_over_tol:.3g}"
        row = ROW.format(case.stage, case.name, *shapes, result.verdict, ratio, f"{result.seconds:.1f}")
        notes += [f"runs as {result.runs_as}"] if result.runs_as else []
    return row + (f"  ({'; '.join(notes)})" if notes else "")


def case_spec(case: Case) -> str:
    """The case's shapes as an eval.py / emulate.py spec (the board's inputs for them, not the ladder's)."""
    return (f"m: {list(case.m)}; n: {list(case.n)}; k: {list(case.k)}; g: {case.groups}; seed: 1")


def next_steps(case: Case, result: Result, config: str | None = None, flags: str = "",
               emulate: bool = False) -> list[str]:
    """What to run after the first failure (under `config`), as command lines with a reason each;
    `flags` (` --submission FILE`) go on every check.py line. Under the emulator, the emulator's tools
    (compute-sanitizer needs a GPU)."""
    case_args = f"--case {case.name}" + (f" --config {config}" if config else "") + flags
    if emulate:
        workers = f" --workers {case.workers}" if case.workers is not None else ""
        return [f"python tools/check.py --emulate {case_args}    # the emulator's full report",
                f"python tools/emulate.py submission{flags} --config {config or 'shipped'} --mode adversarial "
                f"--seed 1{workers} --spec \"{case_spec(case)}\"    # these shapes, asynchronous work completing late"]
    sanitizer = "compute-sanitizer --tool {} python tools/check.py " + case_args
    steps = [f"python tools/check.py {case_args}    # the same case in one process, its full message"]
    if result.verdict == "HANG":
        steps = [f"timeout 600 {sanitizer.format('memcheck')}    # an illegal access can stall a pipeline",
                 f"timeout 600 {sanitizer.format('synccheck')}    # barrier misuse",
                 "# a hang is usually an mbarrier waiting for arrivals or TMA bytes that never come: "
                 "arrival counts, transaction byte counts, the 2-CTA pairing"]
    elif result.verdict in ("OUTSIDE", "CRASH", "ERROR"):
        steps.append(f"{sanitizer.format('memcheck')}    # names the first out-of-bounds access")
    else:
        steps += [f"{sanitizer.format('racecheck')}    # shared-memory races",
                  f"{sanitizer.format('memcheck')}    # out-of-bounds accesses"]
    return steps


def run_ladder(cases: list[Case], run_one, out=print, config: str | None = None,
               emulate: bool = False, flags: str = "") -> tuple[Case, Result] | None:
    """Run the cases stage by stage with run_one(case) -> Result; stop after the first stage with
    a failure (at once after a HANG). Returns the first failure, None if all passed."""
    out(ROW.format("stage", "case", "G", "M", "N", "K", "result", "err/tol", "seconds"))
    first_failure = None
    for _, stage_cases in itertools.groupby(cases, key=lambda case: case.stage):
        for case in stage_cases:
            result = run_one(case)
            out(format_row(case, result))
            if result.verdict != "PASS":
                out(f"    {result.message}")
                first_failure = first_failure or (case, result)
                if result.verdict == "HANG":
                    break
        if first_failure:
            break
    if first_failure is None:
        out(f"all {len(cases)} cases passed. Next: " + ("on a B200, python tools/check.py (the benchmarks, and "
            "what only hardware shows)" if emulate else "python eval.py test, then python eval.py benchmark"))
        return None
    case, result = first_failure
    out(f"stopped after stage {case.stage}: first failure {case.name} ({result.verdict}). Next:")
    steps = next_steps(case, result, config, flags, emulate)
    for step in steps:
        out(f"  {step}")
    return first_failure


# ---------------------------------------------------------------------------------------------
# Bisection over the submission's Sm100Config after a failure. Pure logic on a stand-in-able
# run_case(case, config) -> Result; main() runs each attempt in a process of its own.

HOPPER_SWITCHES = ("pdl",)  # the only field of the configuration that sm90_kernel reads
LADDER_TRIES = 3  # candidate configurations run through the whole ladder before SM100_SAFE
BISECT_ROW = "{:<40} {:<16} {:<8} {:>8}"


@dataclasses.dataclass
class Findings:
    """What the failing case did under the configurations the bisection tried."""

    safe_passes: bool
    alone: list[str]  # "field=value" of the failing config that make safe fail, each alone
    fixers: list[str]  # "field=value" of the failing config whose safe value alone makes it pass


def consistent(base, changes: dict):
    """`base` with `changes`: with what they need, where the submission's configuration says
    (Sm100Config.with_needs: cta_group=1 turns multicast off); the row names every change."""
    with_needs = getattr(base, "with_needs", None)
    return with_needs(**changes) if with_needs else dataclasses.replace(base, **changes)


class Bisection:
    """Bisects a case's failure under `failing` between it and `safe` over `switches` (field
    names), with run_case(case, config) -> Result. A switch flips with what it needs (consistent):
    cta_group=1 turns multicast and the clusters off too. Every run is memoized by (configuration,
    case), so a configuration met twice runs once; `out` gets a table row per run, and per ladder."""

    def __init__(self, run_case, failing, safe, switches, out=print):
        self.run_case, self.failing, self.safe, self.out = run_case, failing, safe, out
        self.fields = [f for f in switches if getattr(failing, f) != getattr(safe, f)]
        # "field=value" of the failing configuration, as the report names a switch
        self.switch = {change.partition("=")[0]: change for change in failing.changes_from(safe)}
        self.results: dict = {}

    def run(self, config, case: Case, row: bool = True) -> Result:
        key = (config, case.name)
        if key not in self.results:
            self.results[key] = self.run_case(case, config)
            if row:
                self.row(config, case.name, self.results[key])
        return self.results[key]

    def row(self, config, ran: str, result: Result) -> None:
        self.out(BISECT_ROW.format(config.describe(), ran, result.verdict, f"{result.seconds:.1f}"))

    def bisect_case(self, case: Case) -> Findings:
        """Safe first; then each switch of `fields` flipped alone, both ways."""
        if self.run(self.safe, case).verdict != "PASS":
            return Findings(False, [], [])
        fixers = [self.switch[f] for f in self.fields
                  if self.run(consistent(self.failing, {f: getattr(self.safe, f)}), case).verdict == "PASS"]
        alone = [self.switch[f] for f in self.fields
                 if self.run(consistent(self.safe, {f: getattr(self.failing, f)}), case).verdict != "PASS"]
        return Findings(True, alone, fixers)

    def candidates(self, findings: Findings) -> list:
        """Every mix of the failing and safe values over `fields` but those the findings show
        broken: the failing configuration, any mix that keeps a switch that breaks safe alone,
        and any that keeps all the switches whose undoing alone passes."""
        mixes = {}
        for undo in itertools.product((False, True), repeat=len(self.fields)):
            config = consistent(self.failing, {f: getattr(self.safe, f) for f, flip in zip(self.fields, undo) if flip})
            kept = set(config.changes_from(self.safe))
            if kept & set(findings.alone) or (findings.fixers and kept >= set(findings.fixers)):
                continue
            mixes.setdefault(config, None)
        mixes.pop(self.failing, None)
        return list(mixes)

    def passes_ladder(self, config, cases: list[Case], first: Case) -> bool:
        """The whole ladder under `config`, the failing case first; stops at the first non-PASS."""
        seconds = 0.0
        for case in [first] + [case for case in cases if case != first]:
            result = self.run(config, case, row=False)
            seconds += result.seconds
            if result.verdict != "PASS":
                self.row(config, f"ladder: {case.name}", Result(result.verdict, None, seconds))
                return False
        self.row(config, f"ladder ({len(cases)})", Result("PASS", None, seconds))
        return True


def configuration_ranking(shipped):
    """(sort key of a configuration, what it ranks by), fastest first: tools/b200_model.py's
    predicted geomean of the benchmarks, then the fewest switches changed. A model without predict_geomean (one that evaluates only
    the shipped design), or one that cannot be loaded, must not stop a bring-up, so the key falls
    back to the number of switches changed from the shipped configuration."""
    try:
        spec = importlib.util.spec_from_file_location("b200_model", ROOT / "tools" / "b200_model.py")
        model = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(model)
        # Configurations the model cannot tell apart keep the one with fewer switches changed.
        return (lambda config: (model.predict_geomean(config), len(config.changes_from(shipped))),
                "the B200 model's predicted geomean")
    except Exception:
        return (lambda config: len(config.changes_from(shipped))), "fewest switches changed from shipped"


@dataclasses.dataclass(frozen=True)
class CublasRung:
    """SM100_CONFIG = "cublas", the last rung: no tcgen05 kernel, cuBLAS per group (the submission's
    CublasPlan). Stands where the bisection takes a configuration."""

    def describe(self) -> str:
        return "cublas"


CUBLAS_RUNG = CublasRung()


@dataclasses.dataclass
class LastRung:
    """How the bisection may end at the cuBLAS rung: `unavailable` is '' on a B200, else the one
    line that says why it is not tried; time_case(case) -> Result with mean_us, under the rung;
    model_us: the B200 model's predicted geomean of the shipped kernel, to compare (None if none)."""

    unavailable: str
    time_case: Callable[[Case], Result] | None = None
    model_us: float | None = None


def describe_advice(found, line: tuple | None, submission_name: str, command: str = "python tools/check.py") -> list[str]:
    """What to change in the submission to run `found`: its SM100_CONFIG line, named by number."""
    new = f'SM100_CONFIG = "{found.describe()}"'
    if line is None:
        return [f"add this line to {submission_name} (it has no SM100_CONFIG line):", f"    {new}"]
    number, text = line[:2]
    return [f"replace line {number} of {submission_name} (`{text}`) with:", f"    {new}",
            f"({command} --write makes this change after the bisection)"]


def cublas_cost(cases: list[Case], last: LastRung, out) -> None:
    """Time the task's benchmarks under the cuBLAS rung and say what it costs."""
    benchmarks = [case for case in cases if case.stage == "benchmarks"]
    means = {}
    for case in benchmarks:
        result = last.time_case(case)
        if result.mean_us is None:
            out(f"cublas cost: {case.name} not timed ({result.verdict}: {result.message})")
            return
        means[case.name] = result.mean_us
    if not means:
        return
    geomean = math.exp(sum(map(math.log, means.values())) / len(means))
    against = (f", {geomean / last.model_us:.1f}x the B200 model's {last.model_us:.2f} us for the shipped kernel"
               if last.model_us else "")
    out("cublas cost (mean us per call, 10 repeats of 15 calls after an L2 flush): "
        + ", ".join(f"{name} {mean:.2f}" for name, mean in means.items()) + f"; geomean {geomean:.2f} us{against}")


def bisect_failure(case: Case, result: Result, cases: list[Case], run_case, failing, safe, switches,
                   ranking, out=print, last: LastRung | None = None, line: tuple | None = None,
                   submission_name: str = "submission.py", flags: str = "", emulate: bool = False) -> object | None:
    """After `case` failed with `result` under `failing`: find the switches that break it and the
    fastest configuration that passes the whole ladder; print the findings and how to change the
    SM100_CONFIG line (`line`: its number and text). `ranking` is configuration_ranking's pair. When
    no tcgen05 configuration passes, the bisection ends at `last`, the cuBLAS rung: tried on a B200
    (and timed), named as unavailable elsewhere. Returns the configuration found, None if none."""
    command = "python tools/check.py" + (" --emulate" if emulate else "")  # as the user ran it, with `flags`
    out(f"bisecting {case.name} ({result.verdict} under {failing.describe()}), each run in its own process:")
    out(BISECT_ROW.format("configuration", "run", "verdict", "seconds"))
    bisection = Bisection(run_case, failing, safe, switches, out)
    findings = bisection.bisect_case(case)
    if not findings.safe_passes:
        safe_result = bisection.results[(safe, case.name)]
        out(f"SM100_SAFE fails {case.name} too ({safe_result.verdict}): no switch is to blame; the fault is "
            "in what every configuration shares. Next:")
        for step in next_steps(case, safe_result, "safe", flags, emulate):
            out(f"  {step}")
        return _last_rung(bisection, cases, case, out, last, line, submission_name)
    if findings.alone:
        out(f"breaks {case.name} alone (each makes SM100_SAFE fail): {', '.join(findings.alone)}")
    elif len(findings.fixers) > 1:
        out(f"break {case.name} together: {' with '.join(findings.fixers)} (undoing any one passes; "
            "none makes SM100_SAFE fail alone)")
    elif findings.fixers:
        out(f"breaks {case.name}: {findings.fixers[0]} (undoing it passes)")
    else:
        out(f"no single switch: {case.name} passes only with several switches of "
            f"{failing.describe()} undone at once")
    key, ranked_by = ranking
    ordered = sorted(bisection.candidates(findings), key=key)[:LADDER_TRIES]
    for config in ordered + ([safe] if safe not in ordered else []):
        if bisection.passes_ladder(config, cases, case):
            out(f"fastest configuration that passes the whole ladder (by {ranked_by}): {config.describe()}")
            for advice in describe_advice(config, line, submission_name, command + flags):
                out(advice)
            return config
    out("no configuration tried passes the whole ladder, SM100_SAFE included; its first failure is the "
        f"next to bisect: {command} --config safe{flags}")
    return _last_rung(bisection, cases, case, out, last, line, submission_name)


def _last_rung(bisection: Bisection, cases: list[Case], case: Case, out, last: LastRung | None, line,
               submission_name: str):
    """The cuBLAS rung through the whole ladder, once no tcgen05 configuration passes; its cost."""
    if last is None:
        return None
    if last.unavailable:
        out(f"the last rung, SM100_CONFIG = \"cublas\", is not tried: {last.unavailable}")
        return None
    if not bisection.passes_ladder(CUBLAS_RUNG, cases, case):
        out("the last rung, SM100_CONFIG = \"cublas\", fails too: the fault is outside the kernel "
            "(the inputs, the harness, the GPU)")
        return None
    out("no tcgen05 configuration passes; the last rung does: cuBLAS per group (torch._scaled_mm, as the "
        "board's reference), not this file's kernel")
    if last.time_case is not None:
        cublas_cost(cases, last, out)
    for advice in describe_advice(CUBLAS_RUNG, line, submission_name):
        out(advice)
    return CUBLAS_RUNG


def parse_rung(module, text: str):
    """The configuration `text` names in the submission: CUBLAS_RUNG for its "cublas" rung, else
    its Sm100Config.parse(text) (ValueError, one line, if neither)."""
    if text.strip() == getattr(module, "CUBLAS", None):
        return CUBLAS_RUNG
    return module.Sm100Config.parse(text)


def config_problem(module, submission: Path, text: str | None) -> str:
    """'' if `text` (--config) and the file's SM100_CONFIG line are configurations of the
    submission, else one line saying which is not, why, and the configuration's fields (as every
    tool says it: harness.config_problem)."""
    return harness.config_problem(module, submission, text)


def configurable(submission: Path):
    """The submission's module if it defines Sm100Config, else None. Imported in this process only
    to parse and bisect configurations: its kernels run in the cases' processes."""
    harness.load_submission(str(submission))
    module = sys.modules["submission"]
    return module if hasattr(module, "Sm100Config") else None


def last_rung(submission, major: int, minor: int, options, in_subprocess) -> LastRung:
    """The cuBLAS rung as this machine offers it: tried and timed on a B200; on other GPUs and under
    the emulator, one line saying why not."""
    if not hasattr(submission, "CUBLAS"):
        return LastRung(f"{options.submission.name} has no cuBLAS rung")
    if options.emulate:
        return LastRung("the emulator runs the sm_100a kernel only; cuBLAS needs a B200")
    if major != 10:
        return LastRung(f"it needs a B200: cuBLAS has no FP4 GEMM on compute capability {major}.{minor}")
    model_us = None
    with contextlib.suppress(Exception):  # a model that cannot be loaded leaves the cost unranked
        spec = importlib.util.spec_from_file_location("b200_model", ROOT / "tools" / "b200_model.py")
        model = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(model)
        model_us = model.predict_geomean(submission.SM100_SHIPPED)

    def time_case(case: Case) -> Result:
        command = [sys.executable, str(Path(__file__).resolve()), "--case", case.name, "--submission",
                   str(options.submission), "--json", "--time", "--config", "cublas"]
        return run_in_subprocess(command, options.timeout)

    return LastRung("", time_case, model_us)


def _needs_cuda() -> bool:
    if torch.cuda.is_available():
        return False
    print("check.py needs a CUDA GPU (torch.cuda.is_available() is False); without one, python tools/check.py "
          "--emulate runs the ladder's stages that fit the sm_100a emulator", file=sys.stderr)
    return True


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="check.py", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[7:]))
    parser.add_argument("--submission", type=Path, default=ROOT / "submission.py", metavar="FILE",
                        help="file defining custom_kernel (default: the repository's submission.py)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--case", metavar="NAME", help="run one case in this process")
    parser.add_argument("--stage", metavar="NAME", help="run only this stage of the ladder")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
                        help="seconds a case may take, first call's compile included "
                             f"(default {DEFAULT_TIMEOUT_S})")
    parser.add_argument("--json", action="store_true", help="with --case: print the result as one JSON line")
    parser.add_argument("--config", metavar="TEXT",
                        help="the submission's SM100_CONFIG for these runs: 'safe', 'shipped,pdl=off', "
                             "'pdl=off,l2_hints=off' (default: the file's line)")
    parser.add_argument("--write", action="store_true",
                        help="after a bisection, write the configuration it found into the SM100_CONFIG line")
    parser.add_argument("--time", action="store_true",
                        help="with --case: also time it (mean per call; how the cuBLAS rung's cost is measured)")
    parser.add_argument("--emulate", action="store_true",
                        help="on a CPU: the B200 kernel in the emulator (tools/emulate.py), the cases that fit it, "
                             "and the wraps stage (a few SM pairs, where every pipeline wraps)")
    parser.add_argument("--races", action=argparse.BooleanOptionalAction, default=None,
                        help="with --emulate: happens-before race detection, on by default; " + harness.NO_RACES)
    options = parser.parse_args(argv)
    # Everything the command line alone can refuse is refused here, before torch, CuTe DSL or the emulator load.
    cases = ladder_for(options.emulate)
    if options.list:
        print(ROW.format("stage", "case", "G", "M", "N", "K", "", "", "").rstrip())
        for case in cases:
            print(format_row(case, None).rstrip())
        return 0
    by_name = {case.name: case for case in cases}
    stages = list(dict.fromkeys(case.stage for case in cases))
    if options.case and options.case not in by_name:
        print(f"check.py: unknown case {options.case!r} (see --list)", file=sys.stderr)
        return 2
    if options.stage and options.stage not in stages:
        print(f"check.py: unknown stage {options.stage!r} (stages: {', '.join(stages)})", file=sys.stderr)
        return 2
    if options.races is not None and not options.emulate:
        print("check.py: --races/--no-races go with --emulate (race detection is the emulator's)", file=sys.stderr)
        return 2
    if not options.submission.is_file():
        print(f"check.py: submission file not found: {options.submission}", file=sys.stderr)
        return 2
    if options.emulate and not harness.defines_sm100_kernel(options.submission):
        print(f"check.py --emulate: {options.submission} defines no compile_sm100: the emulator runs a B200 (sm_100a) "
              f"kernel; python eval.py test --submission {options.submission} tests any other", file=sys.stderr)
        return 2
    races = options.races is not False
    if options.emulate:
        from emulator import driver  # the stub driver must be in place before cutlass is imported

        try:
            status = driver.rerun_with_stub(__file__, argv)  # a GPU machine: torch holds the real driver here
            if status is not None:
                return status
            driver.install()
        except Exception as error:  # noqa: BLE001 - one line says why
            print(f"check.py --emulate: {error}", file=sys.stderr)
            return 2
    if not options.json:  # a case process gets its text from the ladder, checked
        # Before the GPU check: a malformed configuration is said in one line on any machine.
        try:
            line = harness.config_line(options.submission)
            submission = configurable(options.submission)  # a file that cannot be imported is bad use, here
        except (harness.UsageError, ValueError) as error:
            print(f"check.py: {error}", file=sys.stderr)
            return 2
        if options.config and submission is None:
            print(f"check.py: --config {options.config}: {options.submission} defines no Sm100Config", file=sys.stderr)
            return 2
        problem = config_problem(submission, options.submission, options.config) if submission else ""
        if problem:
            print(f"check.py: {problem}", file=sys.stderr)
            return 2
    if not options.emulate and _needs_cuda():
        return 2

    if options.case:
        try:
            if options.time:
                result = time_case_here(by_name[options.case], options.submission, config=options.config)
            else:
                result = run_case_here(by_name[options.case], options.submission, config=options.config,
                                       emulate=options.emulate, races=races)
        except harness.UsageError as error:  # the submission cannot be imported
            result = Result("ERROR", None, 0.0, str(error))
        if options.json:
            print(RESULT_PREFIX + json.dumps(dataclasses.asdict(result)))
        else:
            print(format_row(by_name[options.case], result).rstrip())
            if result.message:
                print(f"    {result.message}")
            if result.mean_us is not None:
                print(f"    mean {result.mean_us:.2f} us per call ({TIMED_REPEATS} repeats of 15 calls after an L2 flush)")
        return 0 if result.verdict == "PASS" else 1

    if options.emulate:
        major, minor = 10, 0
        print(f"{options.submission} in the emulator (a B200's 148 SMs, on this CPU; the wraps stage at a few SM "
              f"pairs, where every pipeline wraps), " + ("with race detection" if races else "without race detection "
              "(--no-races: a pass vouches only for the interleaving that ran)")
              + f"; each case in its own process, at most {options.timeout:g} s; stages "
              f"{', '.join(EMULATED_STAGES)}", flush=True)
    else:
        major, minor = torch.cuda.get_device_capability()
        print(f"{options.submission} on {torch.cuda.get_device_name()} (compute capability {major}.{minor}); "
              f"each case in its own process, at most {options.timeout:g} s", flush=True)
    selected = [case for case in cases if options.stage in (None, case.stage)]

    def in_subprocess(case: Case, config: str | None = options.config) -> Result:
        command = [sys.executable, str(Path(__file__).resolve()), "--case", case.name,
                   "--submission", str(options.submission), "--json"] + (
                      ["--emulate"] + ([] if races else ["--no-races"]) if options.emulate else [])
        return run_in_subprocess(command + (["--config", config] if config else []), options.timeout)

    def say(line: str) -> None:
        print(line, flush=True)

    # the printed next steps name the file under test unless it is the default (issue 26: a dropped
    # --submission re-tested the repository's file and printed PASS)
    flags = "" if options.submission.resolve() == (ROOT / "submission.py").resolve() else \
        f" --submission {harness._shown(options.submission)}"
    failure = run_ladder(selected, in_subprocess, out=say, config=options.config, emulate=options.emulate,
                         flags=flags)
    if failure is None:
        return 0
    try:
        submission = configurable(options.submission)
    except harness.UsageError as error:
        say(f"no bisection: {error}")
        return 1
    if submission is not None:
        failing = parse_rung(submission, options.config or getattr(submission, "SM100_CONFIG", "shipped"))
        if failing == CUBLAS_RUNG:
            say('the cuBLAS rung (SM100_CONFIG = "cublas") failed: there is no rung below it to bisect to')
            return 1
        switches = HOPPER_SWITCHES if major == 9 else [field.name for field in dataclasses.fields(failing)]
        say("")
        line = harness.config_line(options.submission)
        found = bisect_failure(*failure, cases, lambda case, config: in_subprocess(case, config.describe()), failing,
                               submission.SM100_SAFE, switches, configuration_ranking(submission.SM100_SHIPPED),
                               out=say, last=last_rung(submission, major, minor, options, in_subprocess),
                               line=line, submission_name=options.submission.name, flags=flags,
                               emulate=options.emulate)
        if found is not None and options.write and line is not None:
            written = harness.write_config_line(options.submission, line[0], found.describe())
            say(f"written: line {line[0]} of {options.submission.name} now reads {written}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
