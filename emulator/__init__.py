"""A functional emulator of the sm_100a PTX that CuTe DSL emits, run on a CPU.

The DSL compiles a kernel exactly as for a B200 (`CUTE_DSL_ARCH=sm_100a`); its generated host code packs
the parameters and encodes the TMA descriptors as it would on one, and "launches" through a stub driver
(driver.py) that records the launch instead of running it. The emulator then executes the kernel's PTX
for that launch: every CTA of the grid, every warp, 32 lanes at a time, against the caller's CPU tensors
as global memory.

    from emulator import driver; driver.install()      # before cutlass is imported
    import emulator
    emu = emulator.Emulator(mode="adversarial", seed=1)
    emu.register(a, b, c, ...)                          # CPU tensors the kernel may touch
    stats = emu.call(compiled, *args)                   # compiled(*args), then run its launches

    # timed: N calls as one CUDA stream in one clock (consecutive calls overlap as CUDA lets them)
    calls = []
    for args in inputs:
        compiled(*args); calls.append(emu.take(compiled))
    stream = emu.run_stream(calls)                      # stream.timing["stream_us"]: time per call

The parts, laid out like the machine (STYLE.md section 4):

| module | what it models |
|---|---|
| ptx.py | the PTX text: entries, parameters, `.shared` variables, instructions with their line numbers |
| warp.py | a warp: registers as NumPy vectors of 32 lanes, operand types, SIMT branches (min-PC) |
| isa/ | one handler per instruction family, each citing its PTX ISA section |
| memory.py | global (registered host memory, bounds-checked), shared (per CTA, cluster-addressed), param |
| machine.py | Grid > Cluster > Cta > Warp, mbarriers, named and cluster barriers |
| scheduler.py | the cooperative warp scheduler, hang detection and its report |
| clock.py | the timed scheduler: a discrete-event clock (issue costs, TMA, HBM/L2, tensor pipe, placement) |
| machines/ | GPUs as data: every constant of the timed mode with its source (b200.py, h200.py) |
| async_ops.py | when TMA and tensor-core work completes: eager, adversarial or timed |
| tma.py | tensor maps (the 128-byte descriptor), box loads and stores, swizzles |
| tcgen05.py | tensor memory, matrix and instruction descriptors, block-scaled MMA, tcgen05.cp/ld layouts |
| wgmma.py | sm_90a's warpgroup MMA: matrix descriptors, register fragment layouts, f16 MMA arithmetic |
| driver.py, driver/ | the stub CUDA driver (answering as a B200 or an H200) and the DSL runtime shim (C), built on first use |
| launch.py | a recorded launch + PTX -> a grid run to completion |
| happens_before.py | race detection (`races=True`): vector clocks over warps and asynchronous units, proxies |

What it models, what it does not, and where NVIDIA's kernel settled what the ISA's text leaves open: see
DESIGN.md beside this file.
"""

from __future__ import annotations

from .errors import EmulatorError, HangError, UnimplementedInstruction  # noqa: F401
from .happens_before import RaceError  # noqa: F401
from .launch import DEFAULT_STEP_BUDGET, RunStats, StreamLaunch, StreamStats, execute, execute_stream, filter_ptx
from .memory import GlobalMemory


class Emulator:
    """Runs the launches a DSL call makes. `mode`: 'eager', 'adversarial' or 'timed'; `seed` fixes the
    adversarial order; `ptx_filter` is a shell command the PTX text is piped through first (planted defects);
    `warp_roles` ({warp index: name}) and `barrier_names` ({shared offset: name}) label hang reports;
    `races` turns on happens-before race detection (happens_before.py): an unordered pair of conflicting
    accesses raises a RaceError (an EmulatorError of kind "race") naming both PTX lines.
    Timed mode: `machine` ('b200', 'h200') names the description, `timeline` records the run (timeline.py);
    each launch's RunStats then carries `timing` (simulated figures, "board_us" the board's time);
    `timing_only` skips TMA data and MMA arithmetic (same times, outputs not computed); `calls_per_flush`:
    how many timed calls share one L2 flush (the board's 15; FlashInfer's benchmark flushes before each: 1)."""

    def __init__(self, *, mode: str = "eager", seed: int = 0, ptx_filter: str | None = None,
                 step_budget: int = DEFAULT_STEP_BUDGET, warp_roles=None, barrier_names=None, races: bool = False,
                 machine: str | None = None, timeline=None, timing_only: bool = False, calls_per_flush: int = 15):
        self.mode = mode
        self.races = races
        self.timing_only = timing_only
        self.calls_per_flush = calls_per_flush
        self.machine = machine
        self.timeline = timeline
        self.seed = seed
        self.ptx_filter = ptx_filter
        self.step_budget = step_budget
        self.warp_roles = warp_roles
        self.barrier_names = barrier_names
        self.memory = GlobalMemory()
        self._registered = set()

    def register(self, *tensors, name: str = "") -> None:
        """CPU tensors (or any object with data_ptr() and nbytes) the kernel may access as global memory."""
        for t in tensors:
            address = t.data_ptr()
            nbytes = t.untyped_storage().nbytes() if hasattr(t, "untyped_storage") else t.nbytes
            start = t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") else address
            if start not in self._registered:
                self._registered.add(start)
                self.memory.register(start, nbytes, name or f"tensor {tuple(getattr(t, 'shape', ()))}")

    def take(self, compiled) -> list:
        """The launches recorded since the last take (or run), each with its kernel's PTX (from `compiled`,
        through `ptx_filter`): one call's, to run later (`run_stream`). The stub driver's allocations are
        registered as global memory."""
        from . import driver

        for address, size in driver.allocations():
            if address not in self._registered:
                self._registered.add(address)
                self.memory.register(address, size, "driver allocation")
        return [(launch, filter_ptx(driver.kernel_ptx(compiled, launch.kernel_name), self.ptx_filter))
                for launch in driver.take_launches()]

    def _options(self) -> dict:
        return dict(mode=self.mode, seed=self.seed, step_budget=self.step_budget, barrier_names=self.barrier_names,
                    warp_roles=self.warp_roles, races=self.races, machine=self.machine, timeline=self.timeline,
                    timing_only=self.timing_only, calls_per_flush=self.calls_per_flush)

    def run_pending(self, compiled) -> list:
        """Execute every launch recorded since the last call, each on its own (timed: each its own clock,
        timed as one call by the single-call formula); their PTX is `compiled`'s."""
        return [execute(launch, ptx, self.memory, **self._options()) for launch, ptx in self.take(compiled)]

    def run_stream(self, calls: list) -> StreamStats:
        """Execute several calls' launches (`calls`: one list of (launch, PTX) per call, from `take`) as one
        CUDA stream, in order (launch.execute_stream): timed, in one clock, consecutive launches overlapping as
        CUDA lets them (PDL); `StreamStats.timing` has each call's completion and the steady-state time per
        call, `stream_us`."""
        items = [StreamLaunch(launch, ptx, call) for call, launches in enumerate(calls) for launch, ptx in launches]
        return execute_stream(items, self.memory, **self._options())

    def call(self, compiled, *args) -> list:
        """`compiled(*args)` through the stub driver, then run the launches it made."""
        from . import driver

        driver.take_launches()  # drop launches nobody ran
        compiled(*args)
        return self.run_pending(compiled)


def combine(stats: list) -> RunStats:
    """One RunStats for several launches (timed: launches run back to back, their board times add)."""
    timing = None
    if stats and all(s.timing for s in stats):
        timing = dict(stats[-1].timing, board_us=sum(s.timing["board_us"] for s in stats),
                      kernel_us=sum(s.timing["kernel_us"] for s in stats),
                      launches_kernel_us=[t for s in stats for t in s.timing.get("launches_kernel_us",
                                                                                  [s.timing["kernel_us"]])])
    return RunStats(sum(s.instructions for s in stats), sum(s.seconds for s in stats),
                    sum(s.ctas for s in stats), sum(s.warps for s in stats), timing)


def summarize(stream: StreamStats) -> RunStats:
    """One RunStats for a stream of calls: the counts of every launch; timed, the stream's figures
    (Clock.stream_figures) over the first call's (combine), with `board_us` the stream's time per call
    (`stream_us`; for a stream of one call, the single-call formula's) and `formula_us` the single-call formula
    applied to the first call: the single-call figure where a call is one launch (nothing before the first
    call, and the calls after it touch neither its SMs nor HBM before it ends unless they prefetch); None
    where a call has several launches (the Hopper path's GEMM starts under its own pre-pass in a stream:
    `--calls 1` gives that figure)."""
    calls = sorted(set(stream.calls))
    first = combine(stream.call_stats(calls[0]))
    timing = None
    if stream.timing is not None and first.timing is not None:
        one_launch = all(len(stream.call_stats(c)) == 1 for c in calls)
        formula = first.timing["board_us"] if one_launch else None
        timing = dict(first.timing, **stream.timing, formula_us=formula)
        timing["board_us"] = stream.timing["stream_us"] if len(calls) > 1 else first.timing["board_us"]
    launches = stream.launches
    return RunStats(sum(s.instructions for s in launches), sum(s.seconds for s in launches),
                    sum(s.ctas for s in launches), sum(s.warps for s in launches), timing)
