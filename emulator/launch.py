"""Launch glue: a recorded launch (driver.py) + the kernel's PTX -> a grid run to completion.

`execute(launch, ptx, memory, ...)` refuses a launch beyond the GPU's limits (limits.py), builds the grid the launch describes (grid, block, cluster, dynamic
shared memory, parameter buffer exactly as the DSL's host code packed it), runs it under the scheduler and
returns the run's figures. Programs are cached by PTX text, so repeated launches of one kernel parse once.
"""

from __future__ import annotations

import hashlib
import subprocess
import time
from dataclasses import dataclass

from . import isa  # noqa: F401  (registers the instruction handlers)
from .errors import EmulatorError
from .limits import check_launch
from .machine import Grid, LaunchConfig
from .ptx import parse_module
from .scheduler import run_grid
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


def execute(launch, ptx: str, memory, *, mode: str = "eager", seed: int = 0,
            step_budget: int = DEFAULT_STEP_BUDGET, barrier_names=None, warp_roles=None, races: bool = False,
            machine=None, timeline=None, timing_only: bool = False, calls_per_flush: int = 15) -> RunStats:
    """Run one recorded launch to completion. `memory` is the GlobalMemory of the registered regions; with
    `races`, every conflicting pair of accesses must be ordered (happens_before.py: a RaceError otherwise).
    Timed mode: `machine` (machines/) sets the costs, `timeline` (timeline.Timeline) records who did what
    when; `calls_per_flush`: how many timed calls share one L2 flush (the board's 15; clock.DirtyL2);
    `timing_only` skips what control flow does not read (TMA data movement, MMA and tcgen05.cp
    arithmetic): the times are the same, the outputs are not computed."""
    from .warp import Warp

    if mode not in MODES:
        raise EmulatorError("setup", f"mode {mode!r}: one of {', '.join(MODES)}")
    check_launch(launch)  # what the impersonated GPU's driver refuses never runs
    program = program_for(ptx, launch.kernel_name)
    kernel = program.kernel
    block = tuple(launch.block)
    threads = block[0] * block[1] * block[2]
    if kernel.reqntid and kernel.reqntid[0] * kernel.reqntid[1] * kernel.reqntid[2] != threads:
        raise EmulatorError("setup", f"block {block} does not match .reqntid {kernel.reqntid}")
    config = LaunchConfig(tuple(launch.grid), block, tuple(launch.cluster), launch.shared_bytes,
                          dict(launch.attributes))
    start = time.perf_counter()
    grid = Grid(kernel, program, config, tuple(launch.params), memory, mode=mode, seed=seed,
                barrier_names=barrier_names, warp_roles=warp_roles, races=races)
    warps = []
    for cta in grid.ctas:
        cta.warps = [Warp(cta, i, program) for i in range((threads + 31) // 32)]
        warps.extend(cta.warps)
    if mode == "timed":
        from .clock import Clock, board_us
        from .machines import load

        machine = load(machine or "b200")
        grid.clock = Clock(grid, machine, step_budget=step_budget, timeline=timeline,
                           calls_per_flush=calls_per_flush)
        grid.timing_only = timing_only
    elif timing_only:
        raise EmulatorError("setup", "timing_only is the timed mode's fast path")
    run_grid(grid, warps, step_budget=step_budget)
    timing = None
    if grid.clock is not None:
        timing = grid.clock.figures()
        timing["board_us"] = board_us(timing, grid.clock.machine)
        timing["machine"] = grid.clock.machine.name
    return RunStats(grid.instructions, time.perf_counter() - start, len(grid.ctas), len(warps), timing)
