"""The timed scheduler: a discrete-event clock over the functional core (gem5's *timing* mode beside the
*atomic* eager and adversarial ones). The core still says WHAT happens; this module only decides WHEN.

- **One event queue.** Entries are (time, sequence, kind, payload): a warp ready to issue, an asynchronous
  operation completing (async_ops.AsyncOp), or a time limit running out (a try_wait's, a parked poll's
  next pass). The globally earliest entry always runs next. A warp runs while its local time stays at or
  before the next entry's time (the horizon), so no warp observes barrier state from another warp's future.
- **Issue costs** are per instruction index, looked up once per kernel from the machine description
  (`instruction_costs`): a warp's time advances by its instruction's class cost; handlers compute no
  latency.
- **Blocking.** A handler that returns a wait (mbarrier phase, bar.sync, barrier.cluster, a bulk group)
  parks the warp under what it waits on; the core calls `wake(key)` when that completes (machine.py,
  sync_ops.py, AsyncOp.deliver) and the warp resumes `wake_latency` later. In this mode a failed
  `mbarrier.try_wait` suspends the warp as the hardware does, until the phase completes or the ISA's time
  limit (`try_wait_limit`) passes. `nanosleep.u32 t` advances the warp's time by t ns (the ISA allows [0,
  2t]). A poll at a fixed point (machine.PollWait) goes on at once, under a time limit of zero: when only
  such time limits are left and nothing changes, the run is a hang.
- **Atomics and strong loads.** `atom` issues as a global load and its result is ready at the L2 latency
  (it is performed at L2), `red` as a global store; their bytes stay in L2 (no HBM traffic). A strong load
  (`.relaxed`, `.acquire`, `.volatile`) bypasses L1 (L1_BYPASS) and reads L2.
- **The SM's shared pipes.** A global load, store or atomic holds the SM's load/store unit one cycle per
  128-byte line its lanes touch (`lsu_cycles_per_line`: a scattered store of 32 lanes costs 32 cycles, a
  coalesced one 1), and waits for it; ALU instructions issued while the SM's tensor pipe executes cost
  `alu_cost_factor_tensor_busy` times their cost (Hopper's wgmma reads and writes its accumulator in the
  register file; 1 on the B200, whose tcgen05 accumulates in tensor memory).
- **Asynchronous units.** TMA loads: latency (a miss's grows with HBM's load: `loaded_latency`), then bytes
  over bandwidth: a miss through one HBM server shared by the whole chip and then, as a hit, through the L2
  server (L2's ports to the SMs); a hit (a box read since the call began by any SM, while it stays within the
  L2 capacity) through the L2 server only; a box still on its way from HBM is a hit that waits for it. A miss
  also writes back its dirty victims through HBM: the L2 flush before the timed calls left L2 dirty
  (`DirtyL2`). TMA stores and `st.global` bytes go through the same HBM server; the grid ends when they have
  drained. The tensor pipe is one in-order queue per issuing SM (a `cta_group::2` pair's even SM): an MMA
  starts when issued and the pipe is free, occupies it for its initiation interval and completes a latency
  after its start (per N and cta_group); `tcgen05.cp` likewise, for the shared-memory bytes it reads; a commit
  arrives `commit_latency` after everything issued before it has completed.
- **Placement.** Clusters go to SMs as a launch places them: CTAs per SM from shared memory and threads, a
  cluster on consecutive SMs (a pair on a TPC), dispatched `cta_dispatch_us` apart; a cluster that does not
  fit waits for its SMs to free.

`Clock.run()` returns the kernel's span in microseconds (first CTA start to the last CTA's exit with its
stores drained) and the figures `board_us` needs: see DESIGN.md, "Timed mode", for what one simulated
figure means.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque

import numpy as np

from .errors import EmulatorError, HangError
from .machine import PollWait
from .ptx import _registers

RUN, EVENT, TIMEOUT = 0, 1, 2
UNBOUNDED = 1 << 62


# --------------------------------------------------------------------------------------------------
# issue costs, per instruction index
# --------------------------------------------------------------------------------------------------


def cost_class(instr) -> str:
    """The machine description's cost name for one PTX instruction."""
    op = instr.opcode
    if op.startswith(("ld.", "ld")) and op.split(".")[0] == "ld":
        if ".shared" in op:
            return "cost_shared"
        if ".param" in op or ".const" in op:
            return "cost_param"
        return "cost_global_load"
    if op.split(".")[0] == "st":
        return "cost_shared" if ".shared" in op else "cost_global_store"
    if op.split(".")[0] == "atom":
        # performed at L2 (or in shared memory); its result is a load's: ready at the L2 latency
        return "cost_shared" if ".shared" in op else "cost_global_load"
    if op.split(".")[0] == "red":
        return "cost_shared" if ".shared" in op else "cost_global_store"
    if op.startswith("stmatrix"):
        return "cost_shared"
    if op.startswith(("shfl", "vote", "elect")):
        return "cost_shfl"
    if op.startswith("mbarrier"):
        return "cost_mbarrier"
    if op.startswith(("bar.", "barrier.sync", "barrier.arrive")):
        return "cost_named_barrier"
    if op.startswith("barrier.cluster.arrive"):
        # an arrive only signals (as an mbarrier arrive); the wait carries the measured arrive + wait pair
        return "cost_mbarrier"
    if op.startswith("barrier.cluster"):
        return "cost_cluster_barrier"
    if op.startswith("cp.async.bulk"):
        return "cost_tma_issue"
    if op.startswith(("tcgen05.mma", "wgmma.mma_async")):
        return "cost_mma_issue"
    if op.startswith("tcgen05.cp"):
        return "cost_tcgen05_cp_issue"
    if op.startswith("tcgen05.ld"):
        return "cost_tmem_load"
    if op.startswith(("tcgen05.alloc", "tcgen05.dealloc")):
        return "cost_tmem_alloc"
    if op.startswith(("fence", "membar", "tcgen05.fence")):
        return "cost_fence"
    if op.split(".")[0] in ("mov", "cvta"):
        return "cost_move"
    return "cost_alu"


def instruction_costs(program, machine) -> list:
    return [float(getattr(machine, cost_class(i))) for i in program.kernel.instructions]


# Instructions with no register result: every register they name is read. The others write the registers
# of their first operand (a vector, or `%r|%p`, writes each) and read the rest.
NO_RESULT = ("st", "stmatrix", "red", "bar", "barrier", "cp", "wgmma", "fence", "membar", "griddepcontrol",
             "prefetch", "prefetchu", "bra", "ret", "exit", "trap", "setmaxnreg", "tensormap", "discard",
             "applypriority")
NO_RESULT_OPCODES = ("mbarrier.init", "mbarrier.inval", "mbarrier.expect_tx", "mbarrier.complete_tx")


def _names(operand) -> list:
    return list(_registers([operand]))


def register_effects(instr, register_index) -> tuple:
    """(registers read, registers written) by one instruction, as register numbers: the timed mode's
    scoreboard. Special registers (%tid...) are always ready and not counted. tcgen05 writes registers
    only through tcgen05.ld."""
    family = instr.opcode.split(".")[0]
    writes = bool(instr.operands) and family not in NO_RESULT and not instr.opcode.startswith(NO_RESULT_OPCODES) \
        and (family != "tcgen05" or instr.opcode.startswith("tcgen05.ld"))
    written = _names(instr.operands[0]) if writes and instr.operands[0].kind != "addr" else []
    read = [n for op in instr.operands[1 if written else 0:] for n in _names(op)]
    if instr.guard:
        read.append(instr.guard[0])
    index = register_index
    return (tuple(sorted({index[n] for n in read if n in index})),
            tuple(sorted({index[n] for n in written if n in index})))


# loads that do not allocate in L1 (PTX ISA 9.7.9.8: .cg and .cv cache at L2 and below; a strong load at
# GPU scope or wider, and a volatile one, must observe other SMs' writes)
L1_BYPASS = ("cg", "cv", "volatile", "relaxed", "acquire", "L1::no_allocate", "mmio")


def lsu_address_reader(instr, program):
    """For a load, store or atomic of global memory (or generic, which may be global): warp -> per-lane
    addresses; else None. Such a request takes the SM's load/store unit one cycle per 128-byte line it
    touches."""
    from .isa.memory_ops import address_reader, space_of

    if instr.family not in ("ld", "ldu", "st", "atom", "red") or space_of(instr) not in ("global", "generic"):
        return None
    operand = instr.operands[0 if instr.family in ("st", "red") else 1] if len(instr.operands) >= 2 else None
    if operand is None or operand.kind != "addr":
        return None
    return address_reader(program, operand)


def l1_address_reader(instr, program):
    """For a load that may hit L1 (global or generic, cached): warp -> per-lane addresses; else None."""
    if instr.family not in ("ld", "ldu") or any(m in L1_BYPASS for m in instr.modifiers):
        return None
    return lsu_address_reader(instr, program)


def result_latencies(program, machine) -> list:
    """Per instruction index: the cycles from its issue until its result registers may be read (the
    class's `latency_*`; an instruction with no result class reads as its issue cost)."""
    out = []
    for instr in program.kernel.instructions:
        name = cost_class(instr).replace("cost_", "latency_", 1)
        out.append(float(machine.constants[name].value) if name in machine.constants
                   else float(getattr(machine, cost_class(instr))))
    return out


def global_store_bytes(instr) -> int:
    """Bytes one lane of a global `st` writes (0 for any other instruction)."""
    op = instr.opcode
    if op.split(".")[0] != "st" or ".shared" in op or ".param" in op:
        return 0
    from .warp import TYPES

    width = next((int(m[1:]) for m in instr.modifiers if m in ("v2", "v4", "v8")), 1)
    typ = next((m for m in reversed(instr.modifiers) if m in TYPES), "b32")
    return width * (8 if typ.endswith("64") else 4 if typ.endswith("32") else 2 if typ.endswith("16") else 1)


# --------------------------------------------------------------------------------------------------
# shared resources
# --------------------------------------------------------------------------------------------------


class Server:
    """A bandwidth shared by every requester (HBM, L2): requests are served in arrival order at `rate`
    bytes per cycle. Returns the time a request's last byte is through. With a `window`, `load(now)`: the
    share of the rate the requests of the last `window` cycles asked for (at most 1); without one, nothing
    is kept for it."""

    def __init__(self, rate: float, window: float | None = None):
        self.rate = rate
        self.free = 0.0
        self.bytes = 0
        self.window = window
        self.recent: deque = deque()  # (time, bytes) of the requests of the last window
        self.recent_bytes = 0

    def serve(self, now: float, nbytes: int) -> float:
        self.free = max(self.free, now) + nbytes / self.rate
        self.bytes += nbytes
        if self.window is not None:
            self.recent.append((now, nbytes))
            self.recent_bytes += nbytes
        return self.free

    def load(self, now: float) -> float:
        while self.recent and self.recent[0][0] < now - self.window:
            self.recent_bytes -= self.recent.popleft()[1]
        return min(1.0, self.recent_bytes / (self.rate * self.window))


def loaded_latency(machine, load: float) -> float:
    """A TMA miss's latency while HBM serves `load` of its rate: `tma_hbm_latency` x (1 + factor x load^2).
    A fixed latency and a first-come server deliver up to 30% more than both machines' measured streams
    between 8 and 32 KiB in flight per SM (BENCHMARKS.md, "HBM latency under load"): the latency grows
    before the bandwidth saturates."""
    return machine.tma_hbm_latency * (1.0 + machine.hbm_latency_load_factor * load * load)


class L2:
    """Which boxes are in L2: least recently used first out, by bytes. Cold at the start of a call (the
    board flushes L2 before its timed calls and each call reads new inputs). A box maps to the time its
    bytes arrive (a miss still on its way is waited for, not fetched again)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.lines: OrderedDict = OrderedDict()  # key -> (arrival time, bytes)
        self.held = 0
        self.hits = self.misses = 0

    def lookup(self, key):
        entry = self.lines.get(key)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        self.lines.move_to_end(key)
        return entry[0]

    def insert(self, key, arrival: float, nbytes: int) -> None:
        self.lines[key] = (arrival, nbytes)
        self.held += nbytes
        while self.held > self.capacity:
            _, (_, size) = self.lines.popitem(last=False)
            self.held -= size


class DirtyL2:
    """The write-backs a dirty L2 still owes. The flush before timed calls writes a large buffer (the board's
    `torch.randn`, FlashInfer's benchmark's `zero_()`), so L2 starts full of dirty lines; a miss allocating
    lines evicts victims, a dirty share of them, and each dirty victim is written to HBM first. Measured on
    the H200 (tools/h200_dirty_l2.py): a read of S bytes after a writing flush takes
    `l2_dirty_writeback_fraction` x L2's bytes / HBM's rate x (1 - exp(-S / L2's bytes)) longer than after a
    reading flush: a victim is dirty in proportion to the dirty bytes left (not least recently used), and a
    store adds nothing (its own line's write-back replaces its victim's). `calls_per_flush` calls share one
    flush (the board times 15 after one; FlashInfer's benchmark flushes before each): each call is charged
    their average, a share of the owed bytes evicted that many times as fast."""

    def __init__(self, machine, calls_per_flush: int):
        self.capacity = float(machine.l2_bytes)
        self.calls = calls_per_flush
        self.owed = float(machine.l2_dirty_writeback_fraction) * self.capacity / calls_per_flush

    def evict(self, nbytes: int) -> float:
        """A miss allocated `nbytes`: the bytes its dirty victims write back."""
        written = self.owed * min(1.0, nbytes * self.calls / self.capacity)
        self.owed -= written
        return written


class TensorPipe:
    """One SM's (or SM pair's) tensor pipe: in order; `free` when the next operation may start, `done`
    when everything issued so far has completed."""

    def __init__(self):
        self.free = 0.0
        self.done = 0.0
        self.busy = 0.0


# --------------------------------------------------------------------------------------------------
# the clock
# --------------------------------------------------------------------------------------------------


class Clock:
    def __init__(self, grid, machine, *, step_budget: int, timeline=None, calls_per_flush: int = 15):
        self.grid = grid
        self.machine = machine
        self.step_budget = step_budget
        self.timeline = timeline
        program = grid.program
        self.costs = instruction_costs(program, machine)
        self.latencies = result_latencies(program, machine)
        effects = [register_effects(i, program.register_index) for i in program.kernel.instructions]
        # a register being written is waited for too (write after write: the hardware's scoreboard)
        self.waits_on = [tuple(sorted(set(r) | set(w))) for r, w in effects]
        self.writes = [w for _, w in effects]
        self.l1_addresses = [l1_address_reader(i, program) for i in program.kernel.instructions]
        self.l1: dict = {}  # SM -> L1 (lines of global loads that allocate in L1)
        self.lsu_addresses = [lsu_address_reader(i, program) for i in program.kernel.instructions]
        # ALU instructions issued while the SM's tensor pipe executes cost `alu_cost_factor_tensor_busy` times
        # their cost (Hopper's wgmma reads and writes its accumulator in the register file)
        factor = float(machine.alu_cost_factor_tensor_busy)
        self.busy_costs = [c * factor if cost_class(i) == "cost_alu" else c
                           for c, i in zip(self.costs, program.kernel.instructions)]
        self.lsu_free: dict = {}  # SM -> when its load/store unit takes the next line
        # lines a global load brought into L2 in this call (the board flushes L2 and each call reads new
        # inputs: a first read comes from DRAM)
        self.l2_lines: set = set()
        self.store_bytes = [global_store_bytes(i) for i in program.kernel.instructions]
        self.issue_hooks = [self._issue_hook(i, program) for i in program.kernel.instructions]
        self.queue: list = []
        self.sequence = 0
        self.current = None  # the warp issuing now
        self.event_time = 0.0  # the time of the event being delivered
        self.waiters: dict = {}  # id(key) -> {warp: None}, the warps parked on key (an ordered set)
        self.blocked: set = set()
        # HBM's load is measured over one unloaded round trip (loaded_latency)
        self.hbm = Server(machine.hbm_bytes_per_us / machine.cycles(1.0), window=machine.tma_hbm_latency)
        self.l2_server = Server(machine.l2_bytes_per_us / machine.cycles(1.0))
        self.l2 = L2(int(machine.l2_bytes))
        self.dirty = DirtyL2(machine, calls_per_flush)
        self.pipes: dict = {}
        self.sm_of: dict = {}  # cta -> SM index
        self.cta_start: dict = {}
        self.cta_end: dict = {}
        self.first_pdl_wait: dict = {}  # cta -> time its first griddepcontrol.wait issued
        self.idle_activity = None  # grid.activity() when only time limits were left to run (_idle)
        self.idle_woken: set = set()  # the warps whose time limits ran out since then
        # The lanes of one warp that issue the same TMA store together make one copy in time (the SASS
        # TMA instructions run on the uniform datapath, once per warp); the functional core performs each
        # lane's, which writes the same bytes.
        self.last_store = (None, None, 0.0)
        self.hbm_read = self.hbm_written = 0

    # ---------------------------------------------------------------- time
    def now(self) -> float:
        return self.current.time if self.current is not None else self.event_time

    def _push(self, time: float, kind: int, payload, ticket: int = 0) -> None:
        self.sequence += 1
        heapq.heappush(self.queue, (time, self.sequence, kind, payload, ticket))

    def _ready(self, warp, time: float) -> None:
        warp.clock_ticket += 1
        self._push(time, RUN, warp, warp.clock_ticket)

    # ---------------------------------------------------------------- placement
    def place(self) -> None:
        """Clusters onto SMs in launch order; warps start when their CTA is dispatched."""
        m, grid = self.machine, self.grid
        shared = grid.config.shared_bytes + sum(v.size for v in grid.kernel.shared) + 1024
        per_sm = max(1, min(int(m.smem_per_sm) // max(shared, 1), int(m.max_threads_per_sm) // grid.ctas[0].threads))
        self.slots = [per_sm] * int(m.sm_count)  # free CTA slots per SM
        self.waiting = list(grid.clusters)
        self.dispatched = 0
        self._dispatch(0.0)

    def _dispatch(self, time: float) -> None:
        m = self.machine
        size = len(self.waiting[0].ctas) if self.waiting else 1
        while self.waiting:
            base = next((s for s in range(0, len(self.slots) - size + 1, size)
                         if all(self.slots[s + i] for i in range(size))), None)
            if base is None:
                return
            cluster = self.waiting.pop(0)
            start = time + m.cycles(m.cta_dispatch_us) * self.dispatched
            for i, cta in enumerate(cluster.ctas):
                self.slots[base + i] -= 1
                self.sm_of[cta] = base + i
                self.cta_start[cta] = start
                self.dispatched += 1
                for w in cta.warps:
                    w.time = start
                    self._ready(w, start)

    def _cta_exited(self, cta, time: float) -> None:
        self.cta_end[cta] = time
        self.slots[self.sm_of[cta]] += 1
        if self.waiting:
            self._dispatch(time)

    # ---------------------------------------------------------------- the loop
    def run(self, warps) -> None:
        for w in warps:
            w.clock_ticket = 0
            w.time = 0.0
        self.place()
        grid = self.grid
        while True:
            if not self.queue:
                if not self._wake_missed():
                    break
                continue
            time, _, kind, payload, ticket = heapq.heappop(self.queue)
            if kind == EVENT:
                self.event_time = time
                payload.deliver(grid)
                continue
            warp = payload
            if ticket != warp.clock_ticket or warp.done:
                continue
            if kind == TIMEOUT:
                if not any(k != TIMEOUT for _, _, k, _, _ in self.queue):
                    self._idle(warp)
                self._unpark(warp)
            self._issue(warp, time)
        if any(not w.done for w in warps):
            self._hang("every live warp is blocked and no asynchronous work is pending")

    def _idle(self, warp) -> None:
        """Only time limits are left to run (try_waits', polls'), and `warp`'s ran out. A hang once every
        warp under a limit has run out of it since anything last changed (`Grid.activity`), and this one
        runs out again."""
        activity = self.grid.activity()
        if self.idle_activity != activity:
            self.idle_activity, self.idle_woken = activity, set()
        elif warp in self.idle_woken and all(w in self.idle_woken for _, _, _, w, ticket in self.queue
                                             if ticket == w.clock_ticket and not w.done):
            self._hang("every live warp waits on a try_wait time limit or polls memory nothing writes, and "
                       "nothing else is pending")
        self.idle_woken.add(warp)

    def _issue(self, warp, time: float) -> None:
        grid = self.grid
        if self.timeline is not None and warp.wait is not None:
            self.timeline.wait(warp, warp.time, max(warp.time, time), warp.wait)
        warp.wait = None
        warp.time = max(warp.time, time)
        horizon = self.queue[0][0] if self.queue else float("inf")
        self.current = warp
        start = warp.time
        count = warp.run(UNBOUNDED, clock=self, horizon=horizon)
        self.current = None
        if self.timeline is not None:
            self.timeline.issue(warp, start, warp.time)
        grid.instructions += count
        if grid.instructions > self.step_budget:
            self._hang(f"step budget of {self.step_budget} warp instructions ran out", budget=True)
        if warp.done:
            cta = warp.cta
            if all(w.done for w in cta.warps):
                self._cta_exited(cta, max(w.time for w in cta.warps))
            return
        if warp.wait is None:
            self._ready(warp, warp.time)
            return
        self._park(warp)

    # ---------------------------------------------------------------- blocking and waking
    @staticmethod
    def _keys(wait) -> list:
        if isinstance(wait, PollWait):  # woken by its time limit alone
            return []
        ops = getattr(wait, "ops", None)
        if ops is not None:
            return [op for op in ops if not op.delivered]
        # a barrier, or (tensor_core.PairWait) the cta_group::2 request the peer CTA's warp completes
        return [wait.request] if hasattr(wait, "request") else [wait.barrier]

    def _park(self, warp) -> None:
        wait = warp.wait
        if wait.ready():  # completed by its own instruction's effects (e.g. the last arrival)
            self._ready(warp, warp.time)
            return
        for key in self._keys(wait):
            self.waiters.setdefault(id(key), {})[warp] = None
        self.blocked.add(warp)
        warp.clock_ticket += 1
        if wait.spurious_ok:  # a try_wait's time limit; a poll at a fixed point goes on at once (PollWait)
            limit = 0.0 if isinstance(wait, PollWait) else self.machine.try_wait_limit
            self._push(warp.time + limit, TIMEOUT, warp, warp.clock_ticket)

    def _unpark(self, warp) -> None:
        self.blocked.discard(warp)

    def wake(self, key) -> None:
        """`key` (an mbarrier phase, a named or cluster barrier, an asynchronous operation) completed now:
        the warps waiting on it resume after the wake latency."""
        warps = self.waiters.pop(id(key), None)
        if not warps:
            return
        at = self.now() + self.machine.wake_latency
        for warp in warps:
            if warp not in self.blocked or warp.wait is None:
                continue
            if warp.wait.ready():
                self._unpark(warp)
                self._ready(warp, max(warp.time, at))
            elif getattr(warp.wait, "ops", None) is None:  # a barrier's other phase: wait for the next one
                self.waiters.setdefault(id(key), {})[warp] = None

    def _wake_missed(self) -> bool:
        """The queue ran dry with warps blocked: wake any whose wait is ready (a completion no site
        announced, e.g. a cluster barrier completed by a warp's exit). False if none is."""
        woken = False
        for warp in list(self.blocked):
            if warp.wait is not None and warp.wait.ready():
                self._unpark(warp)
                self._ready(warp, warp.time + self.machine.wake_latency)
                woken = True
        return woken

    def _hang(self, message: str, budget: bool = False) -> None:
        from .scheduler import hang_report

        live = [w for cta in self.grid.ctas for w in cta.warps if not w.done]
        raise HangError("budget" if budget else "hang", message, hang_report(self.grid, live))

    # ---------------------------------------------------------------- per-instruction hooks (warp.py)
    def stored(self, warp, pc: int, lanes: int) -> None:
        """A global store of `lanes` lanes at `pc`: its bytes take their share of HBM (the warp goes on)."""
        nbytes = self.store_bytes[pc] * lanes
        self.hbm.serve(warp.time, nbytes)
        self.hbm_written += nbytes

    def lsu_start(self, warp) -> float:
        """The earliest time a global memory request of `warp` enters its SM's load/store unit."""
        return max(warp.time, self.lsu_free.get(self.sm_of[warp.cta], 0.0))

    def lsu_request(self, warp, pc: int, mask) -> None:
        """A global load or store enters the SM's load/store unit now: one line per `lsu_cycles_per_line`
        (a warp's request is split into one transaction per 128-byte line its lanes touch; lanes whose
        generic address is shared memory take none here)."""
        from .memory import GENERIC_SHARED_BASE, WINDOW_MASK

        addresses = self.lsu_addresses[pc](warp)[mask]
        addresses = addresses[(addresses & np.uint64(WINDOW_MASK)) != np.uint64(GENERIC_SHARED_BASE)]
        lines = len(self.lines(addresses))
        self.lsu_free[self.sm_of[warp.cta]] = warp.time + lines * self.machine.lsu_cycles_per_line

    def lines(self, addresses) -> set:
        """The 128-byte lines `addresses` touch, each named by its first address, as on the device: an
        allocation starts on a line there (CUDA aligns to at least 256 bytes), so lines are counted from the
        start of the registered region holding the lowest address (host allocations are only 64-byte
        aligned: their own lines would vary from run to run)."""
        if addresses.size == 0:
            return set()
        region = self.grid.global_memory.region(int(addresses.min()), 1)
        base = np.uint64(region[0] if region is not None else 0)
        return set(((((addresses - base) >> np.uint64(7)) << np.uint64(7)) + base).tolist())

    def load_latency(self, warp, pc: int, mask) -> float:
        """A cached global load issued now: its result's latency. The lines it reads are in the SM's L1
        (least recently used out, `l1_load_bytes`) once a load of that SM brought them; an L1 hit costs
        `latency_l1_hit` (or waits for a line still on its way), a miss the L2's `latency_global_load`,
        or `latency_dram_load` where no load of this call read the line before."""
        m = self.machine
        addresses = self.l1_addresses[pc](warp)[mask]
        lines = self.l1.get(self.sm_of[warp.cta])
        if lines is None:
            lines = self.l1[self.sm_of[warp.cta]] = OrderedDict()
        now, latency = warp.time, m.latency_l1_hit
        for line in self.lines(addresses):
            arrival = lines.get(line)
            if arrival is None:
                arrival = lines[line] = now + (m.latency_global_load if line in self.l2_lines
                                               else m.latency_dram_load)
                self.l2_lines.add(line)
                if len(lines) * 128 > m.l1_load_bytes:
                    lines.popitem(last=False)
            else:
                lines.move_to_end(line)
            latency = max(latency, arrival - now)
        return latency

    def _issue_hook(self, instr, program):
        """What an instruction does to time when it issues, besides its cost: (warp, lanes) -> None, or
        None."""
        if instr.opcode.startswith("griddepcontrol.wait"):
            return lambda warp, mask: self.first_pdl_wait.setdefault(warp.cta, warp.time)
        if instr.family == "nanosleep":
            requested = program.reader(instr.operands[0], "u32")
            return lambda warp, mask: self.sleep(warp, requested(warp)[mask])
        return None

    def sleep(self, warp, requested_ns) -> None:
        """nanosleep (PTX ISA 9.7.19.2): the warp sleeps about t ns, at most 1 ms; the ISA allows [0, 2t] and
        lets the warp's sleeping lanes wake together: the warp sleeps its lanes' shortest t, in cycles at
        the machine's clock."""
        nanoseconds = min(int(requested_ns.min()), 1_000_000)
        warp.time += self.machine.cycles(nanoseconds / 1000.0)

    # ---------------------------------------------------------------- asynchronous units
    def schedule(self, op) -> None:
        """An asynchronous operation was issued (async_ops.issue): deliver it when its unit completes it."""
        now = self.now()
        unit = op.unit
        if unit == "tma.load":
            done = self._tma_load(now, op)
        elif unit == "tma.store" and self.last_store[:2] == (now, op.key):
            done = self.last_store[2]  # another lane of the same warp instruction: one copy (see below)
        elif unit == "tma.store":
            done = max(now + self.machine.tma_store_latency, self.hbm.serve(now, op.bytes))
            self.hbm_written += op.bytes
            self.last_store = (now, op.key, done)
        elif unit == "tcgen05.commit":
            done = max(now, self._pipe(op.cta).done) + self.machine.commit_latency
        elif unit == "wgmma.commit":
            done = max(now, self._pipe(op.cta).done)
        else:
            raise EmulatorError("setup", f"the timed mode has no model of the asynchronous unit {unit!r} "
                                f"({op.issuer})")
        if self.timeline is not None:
            self.timeline.unit(op, now, done)
        self._push(done, EVENT, op)

    def _tma_load(self, now: float, op) -> float:
        m = self.machine
        arrival = self.l2.lookup(op.key)
        if arrival is not None:
            through = self.l2_server.serve(now, op.bytes)
            return max(now + m.tma_l2_latency, through, arrival)
        # a miss's bytes come from HBM (after its dirty victims leave) and then, as a hit's do, through L2's
        # ports to the SM
        writeback = self.dirty.evict(op.bytes)
        latency = loaded_latency(m, self.hbm.load(now))
        through = max(self.hbm.serve(now, op.bytes + writeback), self.l2_server.serve(now, op.bytes))
        self.hbm_read += op.bytes
        self.hbm_written += writeback
        done = max(now + latency, through)
        self.l2.insert(op.key, done, op.bytes)
        return done

    def tensor_pipe(self, warp) -> TensorPipe:
        return self._pipe(warp.cta)

    def _pipe(self, cta) -> TensorPipe:
        sm = self.sm_of[cta]
        pipe = self.pipes.get(sm)
        if pipe is None:
            pipe = self.pipes[sm] = TensorPipe()
        return pipe

    def tensor_op(self, cta, meta: dict) -> None:
        """A tcgen05.mma / tcgen05.cp (or wgmma) entered `cta`'s tensor pipe now (tensor_core.py)."""
        m = self.machine
        unit = meta["unit"]
        if unit == "tcgen05.mma":
            n, pair = meta["n"], meta["cta_group"] == 2
            ii = max(n / 2, m.mma_ii_fixed_ss_2cta + n / 8 if pair else m.mma_ii_fixed_ss_1cta + n / 4)
            latency = n / 2 + (m.mma_latency_fixed_2cta if pair else m.mma_latency_fixed_1cta)
        elif unit == "tcgen05.cp":
            ii, latency = meta["bytes"] / m.tcgen05_cp_bytes_per_cycle, m.tcgen05_cp_latency
        elif unit == "wgmma":
            n = meta["n"]
            ii, latency = m.wgmma_ii_per_n * n, m.wgmma_latency_fixed + n / 2
        else:
            raise EmulatorError("setup", f"the timed mode has no model of the tensor operation {unit!r}")
        pipe = self._pipe(cta)
        start = max(self.now(), pipe.free)
        pipe.free = start + ii
        pipe.busy += ii
        pipe.done = max(pipe.done, start + latency)
        if self.timeline is not None:
            self.timeline.tensor(cta, unit, start, start + latency)

    # ---------------------------------------------------------------- results
    def figures(self) -> dict:
        """The kernel's span and what board_us needs, in microseconds."""
        m = self.machine
        start = min(self.cta_start.values())
        ends = sorted(self.cta_end.values())
        end = max(ends[-1], self.hbm.free)
        prologue = [t - self.cta_start[c] for c, t in self.first_pdl_wait.items()]
        return {
            "kernel_us": m.us(end - start),
            "first_cta_end_us": m.us(ends[0] - start),
            "last_cta_end_us": m.us(ends[-1] - start),
            "prologue_us": m.us(max(prologue)) if prologue else 0.0,
            "pdl": bool(self.first_pdl_wait),
            "hbm_read_mb": self.hbm_read / 1e6,
            "hbm_written_mb": self.hbm_written / 1e6,
            "l2_hits": self.l2.hits,
            "l2_misses": self.l2.misses,
            "tensor_busy": max((p.busy for p in self.pipes.values()), default=0.0) / max(end - start, 1.0),
        }


def board_us(figures: dict, machine) -> float:
    """One call's share of the board's 15 back-to-back calls (DESIGN.md, "Timed mode"): the launch gap
    after the previous call's grid, then the kernel; with PDL the gap is the shorter one and the prologue
    (CTA start to the first griddepcontrol.wait) overlaps the previous kernel's tail, where SMs were
    already free (between its first and last CTA exits)."""
    if figures["pdl"]:
        tail = figures["last_cta_end_us"] - figures["first_cta_end_us"]
        return machine.launch_gap_pdl_us + figures["kernel_us"] - min(figures["prologue_us"], tail)
    return machine.launch_gap_us + figures["kernel_us"]
