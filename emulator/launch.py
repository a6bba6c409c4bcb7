"""Launch glue: a recorded launch (driver.py) + the kernel's PTX -> a grid run to completion.

`execute(launch, ptx, memory, ...)` refuses a launch beyond the GPU's limits (limits.py), builds the grid the
launch describes (grid, block, cluster, dynamic shared memory, parameter buffer exactly as the DSL's host code
packed it), runs it under the scheduler and returns the run's figures. `execute_stream(items, memory, ...)`
runs several launches as one CUDA stream (timed: in one clock, consecutive launches overlapping as CUDA lets
them; clock.py). Programs are cached by PTX text, so repeated launches of one kernel parse once.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import hashlib
import subprocess
import time
from dataclasses import dataclass

from . import isa  # noqa: F401  (registers the instruction handlers)
from .errors import EmulatorError
from .limits import LaunchLimitError, check_launch, registers_per_cta
from .machine import Grid, LaunchConfig
from .ptx import parse_module
from .scheduler import finish, run_grid
from .warp import Program

DEFAULT_STEP_BUDGET = 50_000_000
_programs: dict = {}


MODES = ("eager", "adversarial", "timed")


@dataclass
class RunStats:
    instructions: int
    seconds: float
    ctas: int
    warps: int
    timing: dict | None = None  # timed mode: clock.Clock.figures() and the board time, "board_us"

    @property
    def rate(self) -> float:
        return self.instructions / self.seconds if self.seconds else 0.0


def filter_ptx(ptx: str, command: str | None) -> str:
    """Pipe the PTX text through a shell command (how a planted defect gets in without touching a source)."""
    if not command:
        return ptx
    done = subprocess.run(command, shell=True, input=ptx, capture_output=True, text=True)
    if done.returncode != 0:
        raise EmulatorError("setup", f"--ptx-filter {command!r} exited {done.returncode}: {done.stderr.strip()}")
    if done.stdout == ptx:
        raise EmulatorError("setup", f"--ptx-filter {command!r} changed nothing in the PTX")
    return done.stdout


def program_for(ptx: str, kernel_name: str) -> Program:
    key = (hashlib.sha1(ptx.encode()).hexdigest(), kernel_name)
    program = _programs.get(key)
    if program is None:
        kernels = parse_module(ptx)
        if kernel_name not in kernels:
            raise EmulatorError("setup", f"kernel {kernel_name[:80]}... is not in the PTX "
                                f"(entries: {[k[:60] for k in kernels]})")
        program = _programs[key] = Program(kernels[kernel_name])
    return program


def _build(launch, ptx: str, memory, *, mode: str, seed: int, barrier_names, warp_roles, races: bool):
    """A recorded launch -> (its Grid, its warps), refused if beyond the GPU's limits."""
    from .warp import Warp

    program = program_for(ptx, launch.kernel_name)
    kernel = program.kernel
    launch = with_compiled_cluster(launch, kernel)
    check_launch(launch)  # what the impersonated GPU's driver refuses never runs
    block = tuple(launch.block)
    threads = block[0] * block[1] * block[2]
    if kernel.reqntid and kernel.reqntid[0] * kernel.reqntid[1] * kernel.reqntid[2] != threads:
        raise EmulatorError("setup", f"block {block} does not match .reqntid {kernel.reqntid}")
    if kernel.maxntid and threads > kernel.maxntid[0] * kernel.maxntid[1] * kernel.maxntid[2]:
        raise LaunchLimitError(f"block {block} has {threads} threads, more than the kernel's .maxntid {kernel.maxntid}")
    config = LaunchConfig(tuple(launch.grid), block, tuple(launch.cluster), launch.shared_bytes,
                          dict(launch.attributes))
    grid = Grid(kernel, program, config, tuple(launch.params), memory, mode=mode, seed=seed,
                barrier_names=barrier_names, warp_roles=warp_roles, races=races)
    grid.registers_per_cta = registers_per_cta(launch)
    warps = []
    for cta in grid.ctas:
        cta.warps = [Warp(cta, i, program) for i in range((threads + 31) // 32)]
        warps.extend(cta.warps)
    return grid, warps


CLUSTER_DIMENSION_ATTRIBUTE = 4  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION


def with_compiled_cluster(launch, kernel):
    """The launch with the cluster shape it runs with: a kernel compiled with a cluster shape (PTX
    `.reqnctapercluster`, ISA 11.4.9; CUDA C++ `__cluster_dims__`) runs in clusters of that shape when the
    launch names none (a `<<<grid, block, smem>>>` launch, cuLaunchKernel); a launch naming another
    (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) is refused, as the CUDA Programming Guide has it ("the cluster
    size ... specified at compile time ... cannot be modified at launch time")."""
    compiled = kernel.reqnctapercluster
    if not compiled:
        return launch
    named = CLUSTER_DIMENSION_ATTRIBUTE in launch.attributes
    if named and tuple(launch.cluster) != tuple(compiled):
        raise LaunchLimitError(f"cluster {tuple(launch.cluster)} given at launch; the kernel was compiled for "
                               f"clusters of {tuple(compiled)} (.reqnctapercluster)")
    if tuple(launch.cluster) == tuple(compiled):
        return launch
    if dataclasses.is_dataclass(launch):
        return dataclasses.replace(launch, cluster=tuple(compiled))
    resolved = copy.copy(launch)  # a test's SimpleNamespace
    resolved.cluster = tuple(compiled)
    return resolved


def pdl_of(launch) -> bool:
    """The launch carries CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (the DSL's use_pdl=True)."""
    return bool(launch.attributes.get(6))


@dataclass
class StreamLaunch:
    """One launch of a stream: the recorded launch, its kernel's PTX, and the call it belongs to (the board's
    calls of custom_kernel: one launch each on the B200, two on the Hopper path)."""

    launch: object
    ptx: str
    call: int = 0


@dataclass
class StreamStats:
    """The figures of a stream: one RunStats per launch (timed: each with its `timing`, placed in the stream
    by `start_us` and `end_us`), and, timed, the stream's own (clock.Clock.stream_figures: when each call
    completed, the gaps, `stream_us`)."""

    launches: list
    calls: list  # the call of each launch
    timing: dict | None = None
    clock: object = None  # timed mode: the Clock, for a closer look (tests)

    def call_stats(self, call: int) -> list:
        return [s for s, c in zip(self.launches, self.calls) if c == call]


def execute(launch, ptx: str, memory, *, mode: str = "eager", seed: int = 0,
            step_budget: int = DEFAULT_STEP_BUDGET, barrier_names=None, warp_roles=None, races: bool = False,
            machine=None, timeline=None, timing_only: bool = False, calls_per_flush: int = 15) -> RunStats:
    """Run one recorded launch to completion. `memory` is the GlobalMemory of the registered regions; with
    `races`, every conflicting pair of accesses must be ordered (happens_before.py: a RaceError otherwise).
    Timed mode: `machine` (machines/) sets the costs, `timeline` (timeline.Timeline) records who did what
    when; `calls_per_flush`: how many timed calls share one L2 flush (the board's 15; clock.DirtyL2);
    `timing_only` skips what control flow does not read (TMA data movement, MMA and tcgen05.cp
    arithmetic): the times are the same, the outputs are not computed. Timed, it is a stream of one launch."""
    return execute_stream([StreamLaunch(launch, ptx)], memory, mode=mode, seed=seed, step_budget=step_budget,
                          barrier_names=barrier_names, warp_roles=warp_roles, races=races, machine=machine,
                          timeline=timeline, timing_only=timing_only, calls_per_flush=calls_per_flush).launches[0]


def execute_stream(items: list, memory, *, mode: str = "timed", seed: int = 0,
                   step_budget: int = DEFAULT_STEP_BUDGET, barrier_names=None, warp_roles=None, races: bool = False,
                   machine=None, timeline=None, timing_only: bool = False, calls_per_flush: int = 15) -> StreamStats:
    """Run several recorded launches (StreamLaunch, in stream order) as one CUDA stream. Eager and
    adversarial: one after the other, each to completion. Timed: in one clock (clock.py), with CUDA's stream
    semantics: a launch starts `launch_gap_us` after every launch before it completed, or, with the PDL
    attribute, `launch_gap_pdl_us` after every CTA of the launch before it triggered
    (griddepcontrol.launch_dependents) or exited; its CTAs then take SMs as resources free, and
    `griddepcontrol.wait` holds a warp until the launches before completed. HBM, L2 and its contents, SMs,
    tensor pipes and load/store units are shared; each call is charged its share of the dirty L2
    (`calls_per_flush`). The other arguments are execute's, for every launch."""
    if mode not in MODES:
        raise EmulatorError("setup", f"mode {mode!r}: one of {', '.join(MODES)}")
    if timing_only and mode != "timed":
        raise EmulatorError("setup", "timing_only is the timed mode's fast path")
    with few_collections():
        return _execute_stream(items, memory, mode=mode, seed=seed, step_budget=step_budget,
                               barrier_names=barrier_names, warp_roles=warp_roles, races=races, machine=machine,
                               timeline=timeline, timing_only=timing_only, calls_per_flush=calls_per_flush)


@contextlib.contextmanager
def few_collections():
    """Python's cycle collector, held back for a run: the run allocates containers by the million (queue
    entries, closures, per-lane tuples), nearly all freed by reference counting, and each collection of the
    oldest generation would walk every object the process holds (the DSL's and torch's: some 300 thousand,
    a fifth of a timed run's time). Those are frozen out of collections, and young objects are collected
    less often; both are restored after. What runs is the same: a collection frees only objects nothing
    refers to any more."""
    threshold = gc.get_threshold()
    freeze = gc.get_freeze_count() == 0  # a caller's own frozen objects stay frozen after the run
    if freeze:
        gc.freeze()
    gc.set_threshold(max(threshold[0], 20_000), *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        if freeze:
            gc.unfreeze()


def _execute_stream(items: list, memory, *, mode, seed, step_budget, barrier_names, warp_roles, races, machine,
                    timeline, timing_only, calls_per_flush) -> StreamStats:
    start = time.perf_counter()
    built = [_build(item.launch, item.ptx, memory, mode=mode, seed=seed, barrier_names=barrier_names,
                    warp_roles=warp_roles, races=races) for item in items]
    calls = [item.call for item in items]
    if mode != "timed":
        stats = []
        for grid, warps in built:
            begin = time.perf_counter()
            run_grid(grid, warps, step_budget=step_budget)
            stats.append(RunStats(grid.instructions, time.perf_counter() - begin, len(grid.ctas), len(warps)))
        return StreamStats(stats, calls)
    from .clock import Clock, board_us
    from .machines import load

    machine = load(machine or "b200")
    clock = Clock(machine, step_budget=step_budget, timeline=timeline, calls_per_flush=calls_per_flush)
    for (grid, warps), item in zip(built, items):
        grid.clock = clock
        grid.timing_only = timing_only
        clock.add(grid, warps, call=item.call, pdl=pdl_of(item.launch))
    clock.run()
    for grid, _ in built:
        finish(grid)
    seconds = time.perf_counter() - start
    total = max(1, sum(grid.instructions for grid, _ in built))
    stats = []
    for grid, warps in built:
        timing = clock.figures(grid)
        timing["board_us"] = board_us(timing, machine)
        timing["machine"] = machine.name
        stats.append(RunStats(grid.instructions, seconds * grid.instructions / total, len(grid.ctas), len(warps),
                              timing))
    return StreamStats(stats, calls, clock.stream_figures(), clock)
