"""Machine state, named after the hardware: Grid > Cluster > Cta > Warp, with the mbarriers, named barriers
and tensor memory each CTA owns, and the asynchronous units (TMA, tensor core) whose work may complete
late. The warps' execution is `warp.py`; the order in which warps run is `scheduler.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .errors import EmulatorError
from .memory import GlobalMemory, ParamMemory, SharedMemory


# --------------------------------------------------------------------------------------------------
# Synchronization objects
# --------------------------------------------------------------------------------------------------


class MBarrier:
    """An mbarrier object (PTX ISA 9.7.13.15.1 "Contents of the mbarrier object"): the current phase, its
    pending arrival count, its expected arrival count and its transaction count. A phase completes when
    both the pending arrivals and the tx-count reach zero (9.7.13.15.3 "Phase completion"); the next phase
    then expects `expected` arrivals again."""

    def __init__(self, address: int, expected: int):
        self.address = address
        self.expected = expected
        self.pending = expected
        self.tx = 0
        self.phase = 0  # number of completed phases

    def _complete_if_done(self, machine) -> None:
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.expected
            machine.progress += 1
            if machine.trace is not None:
                machine.trace.phase_complete(self)
            if machine.clock is not None:
                machine.clock.wake(self)

    def arrive(self, machine, count: int = 1) -> int:
        """Returns the phase the arrival belongs to (the state token of `mbarrier.arrive`)."""
        if count > self.pending:
            raise EmulatorError("mbarrier", f"{count} arrival(s) on mbarrier 0x{self.address:x} whose phase "
                                f"{self.phase} has {self.pending} pending of {self.expected} expected")
        phase = self.phase
        self.pending -= count
        machine.progress += 1
        self._complete_if_done(machine)
        return phase

    def expect_tx(self, machine, nbytes: int) -> None:
        self.tx += nbytes
        machine.progress += 1

    def complete_tx(self, machine, nbytes: int) -> None:
        self.tx -= nbytes
        machine.progress += 1
        self._complete_if_done(machine)

    def phase_complete(self, parity: int) -> bool:
        """`mbarrier.test_wait/try_wait.parity` (9.7.13.15.16): true when the phase of parity `parity`
        has completed, i.e. the current (incomplete) phase has the other parity."""
        return (self.phase & 1) != (parity & 1)

    def state(self) -> str:
        return (f"phase {self.phase} (parity {self.phase & 1}), {self.pending}/{self.expected} arrivals "
                f"pending, tx-count {self.tx}")


class NamedBarrier:
    """`bar.sync`/`barrier.sync` id (9.7.13.1): completes when `count` threads, counted per warp, have
    arrived."""

    def __init__(self, ident: int):
        self.ident = ident
        self.arrived = 0
        self.count = None
        self.generation = 0
        self.waiting: list = []


class ClusterBarrier:
    """`barrier.cluster.arrive` / `.wait` (9.7.13.2): completes when every non-exited warp of the
    cluster has arrived (an exited thread no longer takes part: an assumption; the ISA says all threads
    of the cluster)."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.arrived: set = set()
        self.generation = 0

    def try_complete(self, grid) -> bool:
        live = [w for cta in self.cluster.ctas for w in cta.warps if not w.done]
        if self.arrived and all(w in self.arrived for w in live):
            self.arrived.clear()
            if grid.trace is not None:
                grid.trace.cluster_complete(self, self.generation)
            self.generation += 1
            grid.progress += 1
            if grid.clock is not None:
                grid.clock.wake(self)
            return True
        return False


# --------------------------------------------------------------------------------------------------
# Waits: why a warp is not runnable
# --------------------------------------------------------------------------------------------------


class Wait:
    spurious_ok = False  # may the scheduler wake the warp anyway (a try_wait may time out)?

    def ready(self) -> bool:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


class AsyncOpsWait(Wait):
    """Timed mode: a warp blocked until asynchronous operations complete (`cp.async.bulk.wait_group` on its
    TMA stores, `wgmma.wait_group` on its wgmma-groups); the clock wakes it when the last is delivered."""

    def __init__(self, instruction: str, ops: list, what: str):
        self.instruction = instruction
        self.ops = ops
        self.what = what  # what one operation is, for the hang report

    def ready(self) -> bool:
        return all(op.delivered for op in self.ops)

    def describe(self) -> str:
        return f"{self.instruction}: {sum(not op.delivered for op in self.ops)} {self.what} in flight"


class Yield(Wait):
    """A warp that lets the others run first and can go on at any time: a `nanosleep`, or a poll that found
    nothing new since its previous pass (isa/memory_ops.py). The eager and adversarial schedulers take it up
    again once no other warp can run, so that warps blocked on barriers completed meanwhile run first; the
    timed scheduler at its own time (the sleep is time there, clock.py)."""

    def __init__(self, what: str):
        self.what = what

    def ready(self) -> bool:
        return True

    def describe(self) -> str:
        return self.what


class PollWait(Wait):
    """A warp polling memory that another agent writes, found at a fixed point: back at the same strong load
    with the same registers and lanes, and nothing written to memory and no synchronization event anywhere
    (`Grid.activity`) since its previous pass, it can only repeat that pass (isa/memory_ops.py). The eager
    and adversarial schedulers park it until something changes. The timed one lets it go on at once (its
    spin is time: nothing shifts), under a time limit of zero, so that a grid left with nothing but such
    limits, where nothing changes, is a hang."""

    spurious_ok = True

    def __init__(self, grid: "Grid", activity: tuple, what: str):
        self.grid = grid
        self.activity = activity
        self.what = what

    def ready(self) -> bool:
        return self.grid.activity() != self.activity

    def describe(self) -> str:
        return f"polling memory ({self.what}): nothing written and no synchronization since its previous pass"


@dataclass
class MBarrierWait(Wait):
    cta: "Cta"
    barrier: MBarrier
    parity: int
    spurious_ok = True

    def ready(self) -> bool:
        return self.barrier.phase_complete(self.parity)

    def describe(self) -> str:
        name = self.cta.grid.barrier_names.get(self.barrier.address & 0xFFFFFF)
        label = f" ({name})" if name else ""
        return (f"mbarrier.try_wait parity {self.parity} on mbarrier at shared 0x{self.barrier.address:x}"
                f"{label}: {self.barrier.state()}")


@dataclass
class NamedBarrierWait(Wait):
    barrier: NamedBarrier
    generation: int

    def ready(self) -> bool:
        return self.barrier.generation != self.generation

    def describe(self) -> str:
        return (f"bar.sync {self.barrier.ident}: {self.barrier.arrived} of {self.barrier.count} threads "
                f"arrived")


@dataclass
class ClusterBarrierWait(Wait):
    barrier: ClusterBarrier
    generation: int

    def ready(self) -> bool:
        if self.barrier.generation == self.generation:
            self.barrier.try_complete(self.barrier.cluster.ctas[0].grid)
        return self.barrier.generation != self.generation

    def describe(self) -> str:
        live = sum(not w.done for cta in self.barrier.cluster.ctas for w in cta.warps)
        return f"barrier.cluster.wait: {len(self.barrier.arrived)} of {live} live warps of the cluster arrived"


# adversarial mode: how often a clusterlaunchcontrol.try_cancel fails although a cluster could be cancelled
CLC_SPURIOUS_FAILURE = 0.25

# --------------------------------------------------------------------------------------------------
# Grid, cluster, CTA
# --------------------------------------------------------------------------------------------------


@dataclass
class LaunchConfig:
    grid: tuple
    block: tuple
    cluster: tuple
    shared_bytes: int
    attributes: dict = field(default_factory=dict)


class Cta:
    def __init__(self, grid: "Grid", cluster: "Cluster", ctaid: tuple, rank: int):
        self.grid = grid
        self.cluster = cluster
        self.ctaid = ctaid
        self.rank = rank  # %cluster_ctarank
        self.shared = SharedMemory(rank, grid.kernel.shared, grid.config.shared_bytes)
        self.mbarriers: dict[int, MBarrier] = {}  # by offset in the shared window
        self.named_barriers: dict[int, NamedBarrier] = {}
        self._tmem = None
        self.warps: list = []
        self.clc_failed = None  # the PTX line where a warp of this CTA observed a try_cancel failure (launch_control)
        self.threads = int(np.prod(grid.config.block))

    @property
    def tmem(self):
        """This CTA's tensor memory (tcgen05.py), made on first use."""
        if self._tmem is None:
            from .tcgen05 import TensorMemory

            self._tmem = TensorMemory()
            self._tmem.trace = self.grid.trace
        return self._tmem

    @property
    def label(self) -> str:
        return f"CTA {self.ctaid} (rank {self.rank})"

    def mbarrier(self, offset: int, where: str) -> MBarrier:
        bar = self.mbarriers.get(offset)
        if bar is None:
            raise EmulatorError("mbarrier", f"mbarrier at shared 0x{(self.rank << 24) | offset:x} of {self.label} "
                                "used before mbarrier.init", where)
        return bar


class Cluster:
    """A cluster of the grid. `started`: one of its warps has run (eager, adversarial) or it is on SMs (timed);
    `cancelled`: a `clusterlaunchcontrol.try_cancel` took it before it started, so it never runs
    (isa/launch_control.py)."""

    def __init__(self, clusterid: tuple):
        self.clusterid = clusterid
        self.ctas: list[Cta] = []
        self.barrier = ClusterBarrier(self)
        self.started = False
        self.cancelled = False

    def cta(self, rank: int, where: str) -> Cta:
        if not 0 <= rank < len(self.ctas):
            raise EmulatorError("shared-bounds", f"shared::cluster address names CTA rank {rank}; the cluster "
                                f"has {len(self.ctas)}", where)
        return self.ctas[rank]


class Grid:
    """The launched grid and everything shared across it: global memory, parameters, the asynchronous
    work not yet delivered, the options of this run, and `trace`, the race detector or None."""

    def __init__(self, kernel, program, config: LaunchConfig, params: tuple, global_memory: GlobalMemory,
                 *, mode: str, seed: int, barrier_names=None, warp_roles=None, races: bool = False):
        self.kernel = kernel
        self.program = program
        self.config = config
        self.params = ParamMemory(kernel, params)
        self.global_memory = global_memory
        self.mode = mode
        self.rng = np.random.default_rng(seed)
        self.barrier_names = dict(barrier_names or {})
        self.warp_roles = dict(warp_roles or {})
        self.progress = 0  # bumped by every synchronization event: lets the scheduler tell a hang
        self.instructions = 0
        self.pending = []  # asynchronous operations not yet delivered (see async_ops.py)
        # the race detector (happens_before.py) the core reports events to, None when detection is off
        self.trace = None
        if races:
            from .happens_before import HappensBefore

            self.trace = HappensBefore(self)
        self.clock = None  # the timed mode's scheduler (clock.py), set by the launch
        self.timing_only = False  # timed mode's fast path: TMA bytes and MMA arithmetic skipped (launch.py)
        self.clusters: list[Cluster] = []
        self.ctas: list[Cta] = []
        gx, gy, gz = config.grid
        cx, cy, cz = config.cluster
        if gx % cx or gy % cy or gz % cz:
            raise EmulatorError("setup", f"grid {config.grid} is not a multiple of the cluster {config.cluster}")
        clusters = {}
        for z in range(gz):
            for y in range(gy):
                for x in range(gx):
                    cid = (x // cx, y // cy, z // cz)
                    cluster = clusters.get(cid)
                    if cluster is None:
                        cluster = clusters[cid] = Cluster(cid)
                        self.clusters.append(cluster)
                    rank = (x % cx) + cx * ((y % cy) + cy * (z % cz))
                    cta = Cta(self, cluster, (x, y, z), rank)
                    cluster.ctas.append(cta)
                    self.ctas.append(cta)
        for cluster in self.clusters:
            cluster.ctas.sort(key=lambda c: c.rank)

    def try_cancel(self):
        """Cluster launch control (isa/launch_control.py): the cluster a `try_cancel` delivered now cancels, or
        None when it fails. Timed: the clock's dispatch queue decides (a cluster already on SMs cannot be
        cancelled). Eager: the first cluster, in launch order, none of whose warps has run. Adversarial: one
        such cluster at random, and with probability CLC_SPURIOUS_FAILURE none even when one is left (the
        ISA promises no success)."""
        if self.clock is not None:
            return self.clock.try_cancel(self)
        candidates = [c for c in self.clusters if not c.started and not c.cancelled]
        if not candidates:
            return None
        if self.mode == "adversarial":
            if self.rng.random() < CLC_SPURIOUS_FAILURE:
                return None
            cluster = candidates[int(self.rng.integers(len(candidates)))]
        else:
            cluster = candidates[0]
        self.cancel(cluster)
        return cluster

    def cancel(self, cluster) -> None:
        """`cluster` will never run: its warps are done before their first instruction."""
        cluster.cancelled = True
        for cta in cluster.ctas:
            for w in cta.warps:
                w.alive = np.zeros_like(w.alive)
        self.progress += 1

    def activity(self) -> tuple:
        """What a poll loop can observe changing: synchronization events and writes to memory."""
        return self.progress, self.global_memory.writes + sum(cta.shared.writes for cta in self.ctas)
