"""The timed scheduler: a discrete-event clock over the functional core (gem5's *timing* mode beside the
*atomic* eager and adversarial ones). The core still says WHAT happens; this module only decides WHEN.

- **A stream of launches.** One clock runs one CUDA stream: the grids added with `Clock.add` (several
  calls' launches, in order; a single launch is a stream of one), sharing everything physical: SMs, tensor
  pipes, load/store units, the HBM and L2 servers, L2's contents (each call reads its own inputs: cold the
  first time; what calls share, e.g. the plan's tables, hits). Each grid keeps its own parameters, shared
  memory, L1 (cold at a kernel's start) and figures; per-instruction tables are per program
  (`ProgramTables`). A launch starts `launch_gap_us` after every launch before it completed (every CTA
  exited, every HBM request through); one with the PDL attribute (programmatic stream serialization: the
  DSL's `use_pdl=True`) `launch_gap_pdl_us` after every CTA of the launch before it executed
  `griddepcontrol.launch_dependents` or exited. Its clusters then wait in launch order for SMs.
  `griddepcontrol.wait` holds a warp (before it issues: a gate) until every launch before its own has
  completed. Each call owes its own share of the dirty L2 (`DirtyL2`, shared by the call's launches).
- **One event queue.** Entries are (time, sequence, kind, payload): a warp ready to issue, an asynchronous
  operation completing (async_ops.AsyncOp), a time limit running out (a try_wait's, a parked poll's next
  pass), a launch, a grid's completion. The globally earliest entry always runs next. A warp runs while its
  local time stays at or before the next entry's time (the horizon; a launch its own trigger causes lowers
  it), so no warp observes barrier state from another warp's future.
- **Issue costs** are per instruction index, looked up once per kernel from the machine description
  (`instruction_costs`): a warp's time advances by its instruction's class cost; handlers compute no
  latency.
- **Blocking.** A handler that returns a wait (mbarrier phase, bar.sync, barrier.cluster, a bulk group)
  parks the warp under what it waits on; the core calls `wake(key)` when that completes (machine.py,
  sync_ops.py, AsyncOp.deliver) and the warp resumes `wake_latency` later. In this mode a failed
  `mbarrier.try_wait` suspends the warp as the hardware does, until the phase completes or the ISA's time
  limit (`try_wait_limit`) passes. `nanosleep.u32 t` advances the warp's time by t ns (the ISA allows [0,
  2t]). A poll at a fixed point (machine.PollWait) goes on at once, under a time limit of zero: when only
  such time limits are left and nothing changes, the run is a hang. Gates hold a warp before an
  instruction the functional core would run at once: `griddepcontrol.wait` (above) and `tcgen05.alloc`,
  which blocks while the CTAs on its SM (and, `cta_group::2`, on its peer's) hold too many of the 512
  tensor-memory columns, until a dealloc or an exit frees them (PTX ISA 9.7.16.7.1).
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
  server (L2's ports to the SMs); a hit (a box any SM read or prefetched before, while it stays within the
  L2 capacity; boxes are matched on the global bytes they read, tma.box_key) through the L2 server only; a
  box still on its way from HBM is a hit that waits for it. `cp.async.bulk.prefetch{.tensor}` brings a box
  into L2 as a miss would, with nothing through L2's ports to an SM. A miss also writes back its dirty
  victims through HBM: the L2 flush before the timed calls left L2 dirty (`DirtyL2`). TMA stores and
  `st.global` bytes go through the same HBM server; a grid completes when they have drained. A TMA store
  also passes its SM's store unit, one box after another at `tma_store_bytes_per_cycle`, and completes
  `tma_store_latency` after (both measured on an H100: calibration/hopper_tma_store{,_rate}.cu). The tensor
  pipe is one in-order queue per issuing SM (a `cta_group::2` pair's even SM): an MMA starts when issued and
  the pipe is free, occupies it for its initiation interval and completes a latency after its start (per N
  and cta_group); `tcgen05.cp` likewise, for the shared-memory bytes it reads; a commit arrives
  `commit_latency` after everything issued before it has completed.
- **Placement.** A cluster goes to an aligned group of consecutive SMs (a pair on a TPC) each of which can
  take a CTA (an empty SM always can; another only with the shared memory (the driver's 1 KiB reserve
  included), threads and registers left), the least loaded such group first (fewest resident CTAs, lowest
  SM first), so that a second CTA lands on an SM only once every SM holds one. CTAs of one launch are
  dispatched `cta_dispatch_us` apart; a cluster that fits nowhere waits (and those behind it) for CTAs
  to exit.

`Clock.figures(grid)` gives a launch's span in microseconds (first CTA start to the last CTA's exit with its
stores drained), the figures `board_us` needs, and where it lies in the stream; `Clock.stream_figures()`
each call's completion and the steady-state time per call. See DESIGN.md, "Timed mode", for what one
simulated figure means.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque

import numpy as np

from .errors import EmulatorError, HangError
from .machine import PollWait, Wait
from .ptx import _registers, branch_target
from .tcgen05 import COLUMNS as TMEM_COLUMNS

RUN, EVENT, TIMEOUT, LAUNCH, COMPLETE = 0, 1, 2, 3, 4
UNBOUNDED = 1 << 62
INFINITY = float("inf")


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
    if op.startswith("bar.warp.sync"):
        # a warp's own convergence point, not a CTA barrier: ptxas leaves a NOP or WARPSYNC of a converged warp
        return "cost_warp_sync"
    if op.startswith(("bar.", "barrier.sync", "barrier.arrive")):
        return "cost_named_barrier"
    if op.startswith("barrier.cluster.arrive"):
        # an arrive only signals (as an mbarrier arrive); the wait carries the measured arrive + wait pair
        return "cost_mbarrier"
    if op.startswith("barrier.cluster"):
        return "cost_cluster_barrier"
    if op.startswith(("cp.async.bulk", "clusterlaunchcontrol.try_cancel")):
        return "cost_tma_issue"
    if op.startswith(("tcgen05.mma", "wgmma.mma_async")):
        return "cost_mma_issue"
    if op.startswith("tcgen05.cp"):
        return "cost_tcgen05_cp_issue"
    if op.startswith("tcgen05.ld"):
        return "cost_tmem_load"
    if op.startswith(("tcgen05.alloc", "tcgen05.dealloc")):
        return "cost_tmem_alloc"
    if op.startswith("tensormap.cp_fenceproxy"):
        # a map patched on the device, copied to global memory with a release at the copy's scope: the warp
        # goes on once its 128-byte write is performed at L2
        return "cost_tensormap_release"
    if op.startswith("fence.proxy.tensormap") and ".acquire" in op:
        # the TMA unit drops what it holds of the map and reads it again from L2 before its next copy
        return "cost_tensormap_acquire"
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


# What ptxas issues once per warp whatever lanes are active (SASS: UTCQMMA, UTCCP, UTCBAR, UTMALDG, UTMAPF,
# and the uniform-datapath U* arithmetic that feeds them), and the scalar arithmetic it moves there.
WARP_UNIFORM_OPS = ("tcgen05.mma", "tcgen05.cp", "tcgen05.commit", "tcgen05.shift", "cp.async.bulk.tensor",
                    "cp.async.bulk.prefetch.tensor")
SCALAR_FAMILIES = ("mov", "add", "sub", "mul", "mad", "shl", "shr", "and", "or", "xor", "not", "selp", "setp",
                   "cvt", "cvta")


def folded_elections(program) -> list:
    """Instruction indices that ptxas compiles away: `elect.sync` / `not.pred` / `@p bra` (the DSL's guard of
    an instruction one thread issues) around a block of warp-uniform tensor-core and TMA issues and their
    scalar operands. Those SASS instructions issue once per warp, so no ELECT is needed: in this project's
    kernel (`tools/inspect_sm100.py --keep`) the MMA warp's k-tile is 13 such guards in PTX and none in SASS
    (102 elect.sync in PTX, 22 ELECT in SASS, each left before a per-thread mbarrier arrive)."""
    instructions = program.kernel.instructions
    folded = []
    for i in range(len(instructions) - 2):
        elect, negate, branch = instructions[i:i + 3]
        if not (elect.opcode.startswith("elect.sync") and negate.opcode.startswith("not.pred")
                and branch.opcode.startswith("bra") and branch.guard and branch.operands):
            continue
        elected = _names(elect.operands[0])[-1]  # elect.sync %r|%p: the elected lane's predicate
        skip = _names(negate.operands[0])
        if _names(negate.operands[1]) != [elected] or len(skip) != 1 or branch.guard != (skip[0], False):
            continue
        target = branch_target(program.kernel, branch)
        if target <= i + 2:
            continue
        block = instructions[i + 3:target]
        if block and all(op.opcode.startswith(WARP_UNIFORM_OPS) or op.opcode.split(".")[0] in SCALAR_FAMILIES
                         for op in block):
            folded.extend((i, i + 1, i + 2))
    return folded


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
    the H200 (calibration/h200_dirty_l2.py): a read of S bytes after a writing flush takes
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
# per program and per grid
# --------------------------------------------------------------------------------------------------


class ProgramTables:
    """What the clock looks up per instruction index of one program: issue cost, result latency, the
    registers it waits on and writes, its L1 and load/store-unit address readers, the bytes a global store
    writes, and the hooks run at issue (`issue_hooks`) and before it (`gates`: a gate returns a Wait that
    holds the warp before the instruction, which then issues when the wait is over). Built once per program
    and machine: the calls of a stream that run one kernel share them."""

    def __init__(self, program, clock):
        machine = clock.machine
        instructions = program.kernel.instructions
        self.costs = instruction_costs(program, machine)
        self.latencies = result_latencies(program, machine)
        for index in folded_elections(program):
            self.costs[index] = self.latencies[index] = 0.0
        effects = [register_effects(i, program.register_index) for i in instructions]
        # a register being written is waited for too (write after write: the hardware's scoreboard)
        self.waits_on = [tuple(sorted(set(r) | set(w))) for r, w in effects]
        self.writes = [w for _, w in effects]
        self.l1_addresses = [l1_address_reader(i, program) for i in instructions]
        self.lsu_addresses = [lsu_address_reader(i, program) for i in instructions]
        # ALU instructions issued while the SM's tensor pipe executes cost `alu_cost_factor_tensor_busy` times
        # their cost (Hopper's wgmma reads and writes its accumulator in the register file)
        factor = float(machine.alu_cost_factor_tensor_busy)
        self.busy_costs = [c * factor if cost_class(i) == "cost_alu" else c for c, i in zip(self.costs, instructions)]
        self.store_bytes = [global_store_bytes(i) for i in instructions]
        self.issue_hooks = [clock._issue_hook(i, program) for i in instructions]
        self.gates = [clock._gate(i, program) for i in instructions]


class CtaNeeds:
    """What one CTA of a grid takes from its SM while resident: shared memory (dynamic, static and the 1 KiB
    the driver reserves per CTA), threads, registers (the cubin's per-thread count, allocated per warp)."""

    def __init__(self, grid, reserved_shared: int = 1024):
        self.shared = grid.config.shared_bytes + sum(v.size for v in grid.kernel.shared) + reserved_shared
        self.threads = grid.ctas[0].threads
        self.registers = int(getattr(grid, "registers_per_cta", None) or 0)


class GridState:
    """One launch of the stream, as the clock keeps it: its grid, its place in the stream (`index`, `call`),
    whether it was launched with programmatic stream serialization (`pdl`), its tables, and what happened to
    it (launch, dispatch, each CTA's trigger (`griddepcontrol.launch_dependents`) and exit, completion)."""

    def __init__(self, clock, grid, warps, index: int, call: int, pdl: bool, tables: ProgramTables, dirty):
        self.grid = grid
        self.warps = warps
        self.index = index
        self.call = call
        self.pdl = pdl
        self.tables = tables
        self.dirty = dirty  # DirtyL2: the write-backs this call owes (shared by the launches of one call)
        self.recorded = False  # the timeline draws this launch: its call's first (Clock.add)
        self.needs = CtaNeeds(grid)
        self.l1: dict = {}  # SM -> L1 (lines of global loads that allocate in L1; a kernel starts with L1 cold)
        self.scheduled = False  # its launch is in the queue
        self.launched = None  # when its CTAs began to dispatch
        self.dispatched = 0
        self.released: set = set()  # CTAs that triggered the dependent launch or exited
        self.exited = 0
        self.cancelled = 0  # CTAs of clusters a clusterlaunchcontrol.try_cancel took out of the queue
        self.completed = None  # when every CTA had exited and its memory operations were performed
        self.hbm_done = 0.0  # when the last HBM request of this grid is through
        self.hbm_read = self.hbm_written = self.prefetched = 0
        self.l2_hits = self.l2_misses = 0
        self.pipe_busy: dict = {}  # SM -> cycles its tensor pipe spent on this grid's operations
        self.first_pdl_wait: dict = {}  # cta -> time its first griddepcontrol.wait issued

    def describe(self) -> str:
        return f"launch {self.index} (call {self.call}) of the stream"


class GridDependencyWait(Wait):
    """`griddepcontrol.wait` (PTX ISA 9.7.13.x griddepcontrol): the warp waits until every prerequisite grid
    (the launches before its own in the stream) has completed and its memory operations are visible."""

    def __init__(self, pending: list, state):
        self.keys = pending
        self.state = state

    def ready(self) -> bool:
        return all(s.completed is not None for s in self.keys)

    def describe(self) -> str:
        waiting = ", ".join(s.describe() for s in self.keys if s.completed is None)
        return f"griddepcontrol.wait: {waiting} not complete"


class TensorMemoryWait(Wait):
    """`tcgen05.alloc` (PTX ISA 9.7.16.7.1) "blocks if the requested amount of Tensor Memory is not available
    and unblocks as soon as the requested amount of Tensor Memory becomes available": another CTA on the same
    SM (or, with cta_group::2, on the peer's) holds the columns."""

    def __init__(self, clock, sms: list, columns: int):
        self.clock = clock
        self.sms = sms
        self.columns = columns
        self.keys = [clock.sm_keys[sm] for sm in sms]

    def ready(self) -> bool:
        return all(self.clock.tmem_used(sm) + self.columns <= TMEM_COLUMNS for sm in self.sms)

    def describe(self) -> str:
        held = ", ".join(f"SM {sm}: {self.clock.tmem_used(sm)} of {TMEM_COLUMNS} columns allocated" for sm in self.sms)
        return f"tcgen05.alloc of {self.columns} columns: waiting for tensor memory ({held})"


# --------------------------------------------------------------------------------------------------
# the clock
# --------------------------------------------------------------------------------------------------


class Clock:
    """The timed scheduler of one stream: grids added with `add` (in stream order, each with its call
    number and PDL attribute), run together by `run`; `figures(grid)` per launch, `stream_figures()` for
    the stream. A single launch is a stream of one."""

    def __init__(self, machine, *, step_budget: int, timeline=None, calls_per_flush: int = 15):
        self.machine = machine
        self.step_budget = step_budget
        self.timeline = timeline
        self.calls_per_flush = calls_per_flush
        self.states: list[GridState] = []
        self.state_of: dict = {}  # grid -> GridState
        self.tables: dict = {}  # program -> ProgramTables
        self.contexts: dict = {}  # warp -> its ProgramTables' columns and its SM's TensorPipe: issue_context
        self.dirty: dict = {}  # call -> DirtyL2
        self.memory = None  # the global memory every grid of the stream shares
        # lines a global load brought into L2 (the board flushes L2 and each call reads new inputs: a first
        # read comes from DRAM; what a call shares with the one before, e.g. the plan's tables, hits)
        self.l2_lines: set = set()
        self.queue: list = []
        self.sequence = 0
        self.current = None  # the warp issuing now
        self.horizon = float("inf")  # the issuing warp stops before issuing past this time (the next entry's)
        self.event_time = 0.0  # the time of the event being delivered
        self.waiters: dict = {}  # id(key) -> {warp: None}, the warps parked on key (an ordered set)
        self.blocked: set = set()
        # HBM's load is measured over one unloaded round trip (loaded_latency)
        self.hbm = Server(machine.hbm_bytes_per_us / machine.cycles(1.0), window=machine.tma_hbm_latency)
        self.l2_server = Server(machine.l2_bytes_per_us / machine.cycles(1.0))
        self.l2 = L2(int(machine.l2_bytes))
        self.pipes: dict = {}
        self.store_units: dict = {}  # SM -> its TMA store unit (Server)
        self.lsu_free: dict = {}  # SM -> when its load/store unit takes the next line
        sms = int(machine.sm_count)
        self.free_shared = [int(machine.smem_per_sm)] * sms
        self.free_threads = [int(machine.max_threads_per_sm)] * sms
        self.free_registers = [int(machine.registers_per_sm)] * sms
        self.residents: list = [[] for _ in range(sms)]  # the CTAs on each SM
        self.sm_keys = [object() for _ in range(sms)]  # what a tensor-memory allocation waiting on an SM waits on
        self.waiting: deque = deque()  # (GridState, cluster) launched, not yet on SMs, in launch order
        self.dispatch_free = 0.0  # when the GPU's CTA dispatcher takes the next cluster
        self.sm_of: dict = {}  # cta -> SM index
        self.cta_start: dict = {}
        self.cta_end: dict = {}
        self.idle_activity = None  # the grids' activity when only time limits were left to run (_idle)
        self.idle_woken: set = set()  # the warps whose time limits ran out since then
        # The lanes of one warp that issue the same TMA store together make one copy in time (the SASS
        # TMA instructions run on the uniform datapath, once per warp); the functional core performs each
        # lane's, which writes the same bytes.
        self.last_store = (None, None, None, 0.0)

    def add(self, grid, warps, *, call: int | None = None, pdl: bool = False) -> GridState:
        """Append a launch to the stream: `call` (default: its own) is the board call it belongs to (the
        launches of one call share that call's share of the dirty L2), `pdl` its programmatic stream
        serialization attribute (it may launch once every CTA of the launch before triggered or exited)."""
        index = len(self.states)
        call = index if call is None else call
        if self.states and call < self.states[-1].call:
            raise EmulatorError("setup", f"launch {index} of the stream belongs to call {call}, after call "
                                f"{self.states[-1].call}")
        tables = self.tables.get(grid.program)
        if tables is None:
            tables = self.tables[grid.program] = ProgramTables(grid.program, self)
        dirty = self.dirty.get(call)
        if dirty is None:
            dirty = self.dirty[call] = DirtyL2(self.machine, self.calls_per_flush)
        state = GridState(self, grid, warps, index, call, pdl, tables, dirty)
        state.recorded = (self.timeline is not None and call == self.timeline.call
                          and all(s.call != call for s in self.states))
        self.states.append(state)
        self.state_of[grid] = state
        self.memory = self.memory or grid.global_memory
        for w in warps:
            w.clock_ticket = 0
            w.time = 0.0
        return state

    # ---------------------------------------------------------------- time
    def now(self) -> float:
        return self.current.time if self.current is not None else self.event_time

    def _push(self, time: float, kind: int, payload, ticket: int = 0) -> None:
        self.sequence += 1
        heapq.heappush(self.queue, (time, self.sequence, kind, payload, ticket))
        if kind == LAUNCH and time < self.horizon:
            # a launch the running warp caused (its trigger): the warp stops there, so that the launch takes
            # SMs as they are then, not after CTAs that exit later
            self.horizon = time

    def _ready(self, warp, time: float) -> None:
        warp.clock_ticket += 1
        self._push(time, RUN, warp, warp.clock_ticket)

    def program_tables(self, warp) -> ProgramTables:
        return self.state_of[warp.cta.grid].tables

    def issue_context(self, warp) -> tuple:
        """What `warp.run` looks up on every call (each call is mostly one instruction: the horizon is the
        next warp's time), fixed once the warp is on an SM: its program's tables (costs, busy costs,
        latencies, registers waited on, registers written, L1 and load/store-unit address readers, global
        store bytes, issue hooks, gates) and its SM's tensor pipe."""
        context = self.contexts.get(warp)
        if context is None:
            t = self.program_tables(warp)
            context = self.contexts[warp] = (t.costs, t.busy_costs, t.latencies, t.waits_on, t.writes,
                                             t.l1_addresses, t.lsu_addresses, t.store_bytes, t.issue_hooks,
                                             t.gates, self.tensor_pipe(warp))
        return context

    def _recorded(self, grid) -> bool:
        """The timeline records the first launch of its call of the stream (GridState.recorded)."""
        return self.state_of[grid].recorded

    # ---------------------------------------------------------------- launch, placement, completion
    def _launch(self, state, time: float) -> None:
        """A launch's clusters join the dispatch queue (behind any earlier launch's)."""
        state.launched = time
        self.waiting.extend((state, cluster) for cluster in state.grid.clusters)
        self._dispatch(time)

    def _fits(self, sm: int, needs: CtaNeeds) -> bool:
        """An SM takes a CTA when it is empty (a launch within the GPU's limits fits an empty SM) or has the
        shared memory, threads and registers left."""
        return not self.residents[sm] or (self.free_shared[sm] >= needs.shared and self.free_threads[sm] >= needs.threads
                                          and self.free_registers[sm] >= needs.registers)

    def _place(self, state, size: int):
        """The first SM of the group a cluster of `size` CTAs goes to: aligned groups of `size` consecutive SMs
        (a pair on a TPC), each SM able to take a CTA; of those, the least loaded (fewest resident CTAs), the
        lowest first. None when no group can take it."""
        best = None
        for base in range(0, len(self.residents) - size + 1, size):
            if all(self._fits(base + i, state.needs) for i in range(size)):
                load = sum(len(self.residents[base + i]) for i in range(size))
                if best is None or load < best[0]:
                    best = (load, base)
                    if load == 0:
                        break
        return None if best is None else best[1]

    def _dispatch(self, time: float) -> None:
        """Clusters onto SMs in launch order, one CTA per `cta_dispatch_us` GPU-wide (a cluster's CTAs start
        together); a cluster that fits nowhere waits (and the ones behind it) for CTAs to exit."""
        m = self.machine
        while self.waiting:
            state, cluster = self.waiting[0]
            base = self._place(state, len(cluster.ctas))
            if base is None:
                return
            self.waiting.popleft()
            cluster.started = True
            # one CTA dispatcher for the GPU: `cta_dispatch_us` per CTA, from when it is free
            start = max(time, self.dispatch_free)
            self.dispatch_free = start + m.cycles(m.cta_dispatch_us) * len(cluster.ctas)
            needs = state.needs
            for i, cta in enumerate(cluster.ctas):
                sm = base + i
                self.free_shared[sm] -= needs.shared
                self.free_threads[sm] -= needs.threads
                self.free_registers[sm] -= needs.registers
                self.residents[sm].append(cta)
                self.sm_of[cta] = sm
                self.cta_start[cta] = start
                state.dispatched += 1
                for w in cta.warps:
                    w.time = start
                    self._ready(w, start)

    def _cta_exited(self, cta, time: float) -> None:
        state = self.state_of[cta.grid]
        self.cta_end[cta] = time
        sm = self.sm_of[cta]
        needs = state.needs
        self.free_shared[sm] += needs.shared
        self.free_threads[sm] += needs.threads
        self.free_registers[sm] += needs.registers
        self.residents[sm].remove(cta)
        self.wake(self.sm_keys[sm])  # tensor memory it held (a kernel frees it before it exits)
        state.exited += 1
        state.released.add(cta)
        self._release_dependent(state, time)
        if state.exited == len(state.grid.ctas):
            last = max(self.cta_end[c] for c in state.grid.ctas if c in self.cta_end)
            self._push(max(last, state.hbm_done), COMPLETE, state)
        if self.waiting:
            self._dispatch(time)

    def try_cancel(self, grid):
        """clusterlaunchcontrol.try_cancel (isa/launch_control.py), delivered now: the first cluster of `grid`
        still in the dispatch queue (launched, on no SM yet) is taken out of it and never runs; None when every
        cluster of the grid is already on SMs (or done, or cancelled). A cancelled cluster's CTAs count as
        dispatched, released and exited for the grid's completion and the PDL trigger."""
        for i, (state, cluster) in enumerate(self.waiting):
            if state.grid is grid:
                del self.waiting[i]
                grid.cancel(cluster)
                n = len(cluster.ctas)
                state.dispatched += n
                state.exited += n
                state.cancelled += n
                state.released.update(cluster.ctas)
                now = self.now()
                self._release_dependent(state, now)
                if i == 0 and self.waiting:  # what stood behind it may fit now
                    self._dispatch(now)
                return cluster
        return None

    def _trigger(self, warp) -> None:
        """griddepcontrol.launch_dependents (9.7.13.x): the CTA's first lets the dependent launch go once
        every CTA of the grid has issued it or exited; later ones have no effect."""
        state = self.state_of[warp.cta.grid]
        if warp.cta not in state.released:
            state.released.add(warp.cta)
            self._release_dependent(state, warp.time)

    def _release_dependent(self, state, time: float) -> None:
        """The next launch, if it carries the PDL attribute, launches `launch_gap_pdl_us` after every CTA of
        `state` has triggered or exited."""
        following = self.states[state.index + 1] if state.index + 1 < len(self.states) else None
        if following is None or not following.pdl or following.scheduled:
            return
        if state.dispatched == len(state.grid.ctas) and len(state.released) == len(state.grid.ctas):
            following.scheduled = True
            self._push(time + self.machine.cycles(self.machine.launch_gap_pdl_us), LAUNCH, following)

    def _complete(self, state, time: float) -> None:
        """Every CTA of `state` exited and its memory operations are through: warps waiting in
        griddepcontrol.wait on it may go on; the next launch not yet in the queue, if it has no PDL
        attribute, launches `launch_gap_us` after every launch before it has completed (CUDA stream order;
        one with PDL launches when the launch before it releases it: _release_dependent)."""
        state.completed = time
        self.wake(state)
        following = next((s for s in self.states if not s.scheduled), None)
        if following is not None and not following.pdl and \
                all(s.completed is not None for s in self.states[:following.index]):
            following.scheduled = True
            self._push(time + self.machine.cycles(self.machine.launch_gap_us), LAUNCH, following)

    # ---------------------------------------------------------------- the loop
    def run(self, warps=None) -> None:
        """Run every launch of the stream to completion (`warps`: ignored, each grid's were given to `add`)."""
        if not self.states:
            return
        self.states[0].scheduled = True
        self._push(0.0, LAUNCH, self.states[0])
        queue = self.queue
        again = None  # the entry of the warp that just ran, pushed as the next entry is popped (one heap pass)
        while True:
            if again is not None:
                time, _, kind, payload, ticket = heapq.heappushpop(queue, again)
                again = None
            elif queue:
                time, _, kind, payload, ticket = heapq.heappop(queue)
            else:
                if not self._wake_missed():
                    break
                continue
            if kind == RUN:
                if ticket == payload.clock_ticket and not payload.done:
                    again = self._issue(payload, time)
                continue
            if kind == EVENT:
                self.event_time = time
                payload.deliver(payload.cta.grid)
                continue
            if kind == LAUNCH:
                self.event_time = time
                self._launch(payload, time)
                continue
            if kind == COMPLETE:
                self.event_time = time
                self._complete(payload, time)
                continue
            warp = payload
            if ticket != warp.clock_ticket or warp.done:
                continue
            if kind == TIMEOUT:
                if not any(k != TIMEOUT for _, _, k, _, _ in self.queue):
                    self._idle(warp)
                self._unpark(warp)
            again = self._issue(warp, time)
        if any(not w.done for s in self.states for w in s.warps) or any(s.completed is None for s in self.states):
            self._hang("every live warp is blocked and no asynchronous work is pending")

    def activity(self) -> tuple:
        return tuple(s.grid.activity() for s in self.states if s.launched is not None)

    def _idle(self, warp) -> None:
        """Only time limits are left to run (try_waits', polls'), and `warp`'s ran out. A hang once every
        warp under a limit has run out of it since anything last changed (`Grid.activity`), and this one
        runs out again."""
        activity = self.activity()
        if self.idle_activity != activity:
            self.idle_activity, self.idle_woken = activity, set()
        elif warp in self.idle_woken and all(w in self.idle_woken for _, _, _, w, ticket in self.queue
                                             if ticket == w.clock_ticket and not w.done):
            self._hang("every live warp waits on a try_wait time limit or polls memory nothing writes, and "
                       "nothing else is pending")
        self.idle_woken.add(warp)

    def _issue(self, warp, time: float):
        """Run `warp` from `time` until it stops (the horizon, a wait, its end). Returns its next queue entry
        when it can go on (for Clock.run to push), else None."""
        grid = warp.cta.grid
        recorded = self.timeline is not None and self._recorded(grid)
        if recorded and warp.wait is not None:
            self.timeline.wait(warp, warp.time, max(warp.time, time), warp.wait)
        warp.wait = None
        if time > warp.time:
            warp.time = time
        self.horizon = self.queue[0][0] if self.queue else INFINITY
        self.current = warp
        start = warp.time
        if recorded and self.timeline.traced(warp):
            count = self._run_traced(warp)
        else:
            count = warp.run(UNBOUNDED, clock=self)
        self.current = None
        if recorded:
            self.timeline.issue(warp, start, warp.time)
        grid.instructions += count
        if grid.instructions > self.step_budget:
            self._hang(f"step budget of {self.step_budget} warp instructions ran out", budget=True)
        if warp.done:
            cta = warp.cta
            if all(w.done for w in cta.warps):
                self._cta_exited(cta, max(w.time for w in cta.warps))
            return
        if warp.wait is None:  # _ready's entry, pushed by Clock.run
            warp.clock_ticket += 1
            self.sequence += 1
            return warp.time, self.sequence, RUN, warp, warp.clock_ticket
        self._park(warp)
        return None

    def _run_traced(self, warp) -> int:
        """warp.run, one instruction at a time, each reported to the timeline's trace: the same stops (a
        wait, a gate, the horizon, the warp's end), so the same times. (A "yield" result, which would let the
        unbounded run return where this one goes on, is the untimed modes' only: with a clock, the sync ops
        return a wait.)"""
        count = 0
        while True:
            ran = warp.run(1, clock=self)
            if not ran:
                return count
            count += ran
            self.timeline.instruction(warp, warp.last_index, warp.time)
            if warp.done or warp.wait is not None:
                return count

    # ---------------------------------------------------------------- blocking and waking
    @staticmethod
    def _keys(wait) -> list:
        if isinstance(wait, PollWait):  # woken by its time limit alone
            return []
        keys = getattr(wait, "keys", None)
        if keys is not None:  # a griddepcontrol.wait's grids, a tensor-memory allocation's SMs
            return list(keys)
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
        """`key` (an mbarrier phase, a named or cluster barrier, an asynchronous operation, a grid that
        completed, an SM whose tensor memory was freed) completed now: the warps waiting on it resume after
        the wake latency."""
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

        reports = []
        for state in self.states:
            live = [w for cta in state.grid.ctas for w in cta.warps if not w.done]
            if not live:
                continue
            report = hang_report(state.grid, live)
            if len(self.states) > 1:
                where = "not launched" if state.launched is None else f"launched at {self.machine.us(state.launched):.2f} us"
                report = f"{state.describe()} ({where}):\n" + report
            reports.append(report)
        raise HangError("budget" if budget else "hang", message, "\n".join(reports))

    # ---------------------------------------------------------------- per-instruction hooks (warp.py)
    def stored(self, warp, pc: int, lanes: int) -> None:
        """A global store of `lanes` lanes at `pc`: its bytes take their share of HBM (the warp goes on)."""
        state = self.state_of[warp.cta.grid]
        nbytes = state.tables.store_bytes[pc] * lanes
        state.hbm_done = max(state.hbm_done, self.hbm.serve(warp.time, nbytes))
        state.hbm_written += nbytes

    def lsu_start(self, warp) -> float:
        """The earliest time a global memory request of `warp` enters its SM's load/store unit."""
        return max(warp.time, self.lsu_free.get(self.sm_of[warp.cta], 0.0))

    def lsu_request(self, warp, pc: int, mask) -> None:
        """A global load or store enters the SM's load/store unit now: one line per `lsu_cycles_per_line`
        (a warp's request is split into one transaction per 128-byte line its lanes touch; lanes whose
        generic address is shared memory take none here)."""
        from .memory import GENERIC_SHARED_BASE, WINDOW_MASK

        addresses = self.program_tables(warp).lsu_addresses[pc](warp)[mask]
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
        region = self.memory.region(int(addresses.min()), 1)
        base = np.uint64(region[0] if region is not None else 0)
        return set(((((addresses - base) >> np.uint64(7)) << np.uint64(7)) + base).tolist())

    def load_latency(self, warp, pc: int, mask) -> float:
        """A cached global load issued now: its result's latency. The lines it reads are in the SM's L1
        (least recently used out, `l1_load_bytes`) once a load of that SM and grid brought them; an L1 hit
        costs `latency_l1_hit` (or waits for a line still on its way), a miss the L2's
        `latency_global_load`, or `latency_dram_load` where no load of the stream read the line before."""
        m = self.machine
        state = self.state_of[warp.cta.grid]
        addresses = state.tables.l1_addresses[pc](warp)[mask]
        lines = state.l1.get(self.sm_of[warp.cta])
        if lines is None:
            lines = state.l1[self.sm_of[warp.cta]] = OrderedDict()
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
        if instr.opcode.startswith("griddepcontrol.launch_dependents"):
            return lambda warp, mask: self._trigger(warp)
        if instr.opcode.startswith("tcgen05.dealloc"):
            pair = "cta_group::2" in instr.modifiers
            return lambda warp, mask: self._tmem_freed(warp.cta, pair)
        if instr.family == "nanosleep":
            requested = program.reader(instr.operands[0], "u32")
            return lambda warp, mask: self.sleep(warp, requested(warp)[mask])
        return None

    def _gate(self, instr, program):
        """What may hold a warp before an instruction issues: warp -> a Wait, or None to go on; or None for
        an instruction nothing holds."""
        if instr.opcode.startswith("griddepcontrol.wait"):
            return self._grid_dependency
        if instr.opcode.startswith("tcgen05.alloc"):
            columns = program.reader(instr.operands[1], "u32")
            pair = "cta_group::2" in instr.modifiers
            return lambda warp: self._tmem_available(warp, int(columns(warp)[0]), pair)
        return None

    def _grid_dependency(self, warp):
        state = self.state_of[warp.cta.grid]
        state.first_pdl_wait.setdefault(warp.cta, warp.time)
        pending = [s for s in self.states[:state.index] if s.completed is None]
        return GridDependencyWait(pending, state) if pending else None

    def _pair_sms(self, cta, pair: bool) -> list:
        sms = [self.sm_of[cta]]
        if pair and len(cta.cluster.ctas) > 1:
            peer = cta.cluster.ctas[cta.rank ^ 1] if (cta.rank ^ 1) < len(cta.cluster.ctas) else None
            if peer is not None and peer in self.sm_of:
                sms.append(self.sm_of[peer])
        return sms

    def tmem_used(self, sm: int) -> int:
        """Tensor-memory columns the CTAs on `sm` hold (each CTA's allocations are its own in the functional
        core; on the SM they share its 512 columns)."""
        return sum(sum(cta._tmem.allocations.values()) for cta in self.residents[sm] if cta._tmem is not None)

    def _tmem_available(self, warp, columns: int, pair: bool):
        sms = self._pair_sms(warp.cta, pair)
        if all(self.tmem_used(sm) + columns <= TMEM_COLUMNS for sm in sms):
            return None
        own = sum(warp.cta._tmem.allocations.values()) if warp.cta._tmem is not None else 0
        if own + columns > TMEM_COLUMNS:
            return None  # beyond what its own CTA can ever get: the functional core reports it
        return TensorMemoryWait(self, sms, columns)

    def _tmem_freed(self, cta, pair: bool) -> None:
        for sm in self._pair_sms(cta, pair):
            self.wake(self.sm_keys[sm])

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
        state = self.state_of[op.cta.grid]
        if unit == "tma.load":
            done = self._tma_load(now, op, state)
        elif unit == "tma.store" and self.last_store[:3] == (now, op.key, op.cta):
            done = self.last_store[3]  # another lane of the same warp instruction: one copy (see below)
        elif unit == "tma.store":
            # the SM's store unit passes one box at a time (tma_store_bytes_per_cycle), then the write lands
            # tma_store_latency later; HBM takes the bytes as any write
            through = self.hbm.serve(now, op.bytes)
            passed = self._store_unit(op.cta).serve(now, op.bytes)
            done = max(passed + self.machine.tma_store_latency, through)
            state.hbm_done = max(state.hbm_done, through)
            state.hbm_written += op.bytes
            self.last_store = (now, op.key, op.cta, done)
        elif unit == "tcgen05.commit":
            done = max(now, self._pipe(op.cta).done) + self.machine.commit_latency
        elif unit == "wgmma.commit":
            done = max(now, self._pipe(op.cta).done)
        elif unit == "clc":  # a cluster launch control request: the response (and the decision) comes back later
            done = now + self.machine.clc_response_latency
        else:
            raise EmulatorError("setup", f"the timed mode has no model of the asynchronous unit {unit!r} "
                                f"({op.issuer})")
        if self._recorded(op.cta.grid):
            self.timeline.unit(op, now, done)
        self._push(done, EVENT, op)

    def _miss(self, now: float, key, nbytes: int, state, tiled: bool) -> float:
        """`nbytes` come from HBM into L2 (after the dirty victims they evict are written back): when they
        are in L2. A tensor box's rows (`tiled`: 128-byte rows walked along K in the GEMMs) hold HBM as
        `nbytes / hbm_tiled_efficiency` consecutive bytes would."""
        m = self.machine
        writeback = state.dirty.evict(nbytes)
        latency = loaded_latency(m, self.hbm.load(now))
        through = self.hbm.serve(now, nbytes / (m.hbm_tiled_efficiency if tiled else 1.0) + writeback)
        state.hbm_done = max(state.hbm_done, through)
        state.hbm_read += nbytes
        state.hbm_written += writeback
        return max(now + latency, through)

    def _tma_load(self, now: float, op, state) -> float:
        m = self.machine
        arrival = self.l2.lookup(op.key)
        if arrival is not None:
            state.l2_hits += 1
            through = self.l2_server.serve(now, op.bytes)
            return max(now + m.tma_l2_latency, through, arrival)
        # a miss's bytes come from HBM (after its dirty victims leave) and then, as a hit's do, through L2's
        # ports to the SM
        state.l2_misses += 1
        in_l2 = self._miss(now, op.key, op.bytes, state, op.tiled)
        through = self.l2_server.serve(now, op.bytes)
        done = max(in_l2, through)
        self.l2.insert(op.key, done, op.bytes)
        return done

    def prefetch(self, warp, key, nbytes: int, tiled: bool = False) -> None:
        """cp.async.bulk.prefetch(.tensor) to L2 (bulk_copy.py): a box not in L2 comes in from HBM as a TMA
        load's miss would (no shared memory, no mbarrier, nothing through L2's ports to an SM); a later load of
        it is a hit (one still in flight waits for it). A box already in L2 costs nothing."""
        state = self.state_of[warp.cta.grid]
        if key in self.l2.lines:
            return
        now = self.now()
        arrival = self._miss(now, key, nbytes, state, tiled)
        state.prefetched += nbytes
        self.l2.insert(key, arrival, nbytes)

    def tensor_pipe(self, warp) -> TensorPipe:
        return self._pipe(warp.cta)

    def _store_unit(self, cta) -> Server:
        """The TMA store unit of `cta`'s SM: its boxes pass one after another."""
        sm = self.sm_of[cta]
        unit = self.store_units.get(sm)
        if unit is None:
            unit = self.store_units[sm] = Server(self.machine.tma_store_bytes_per_cycle)
        return unit

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
        state = self.state_of[cta.grid]
        sm = self.sm_of[cta]
        state.pipe_busy[sm] = state.pipe_busy.get(sm, 0.0) + ii
        pipe.done = max(pipe.done, start + latency)
        if self._recorded(cta.grid):
            self.timeline.tensor(cta, unit, start, start + latency)

    # ---------------------------------------------------------------- results
    def figures(self, grid) -> dict:
        """One launch's span and what board_us needs, in microseconds; `start_us` and `end_us` place it in
        the stream (time 0: the stream's first launch)."""
        m = self.machine
        state = self.state_of[grid]
        ctas = [c for c in grid.ctas if c in self.cta_start]  # a cancelled cluster's CTAs never ran
        start = min(self.cta_start[c] for c in ctas)
        ends = sorted(self.cta_end[c] for c in ctas)
        end = max(ends[-1], state.hbm_done)
        prologue = [t - self.cta_start[c] for c, t in state.first_pdl_wait.items()]
        return {
            "kernel_us": m.us(end - start),
            "first_cta_end_us": m.us(ends[0] - start),
            "last_cta_end_us": m.us(ends[-1] - start),
            "prologue_us": m.us(max(prologue)) if prologue else 0.0,
            "pdl": bool(state.first_pdl_wait),
            "hbm_read_mb": state.hbm_read / 1e6,
            "hbm_written_mb": state.hbm_written / 1e6,
            "l2_hits": state.l2_hits,
            "l2_misses": state.l2_misses,
            "tensor_busy": max(state.pipe_busy.values(), default=0.0) / max(end - start, 1.0),
            "start_us": m.us(start),
            **({"cancelled_ctas": state.cancelled} if state.cancelled else {}),
            "end_us": m.us(end),
            **({"prefetched_mb": state.prefetched / 1e6} if state.prefetched else {}),
        }

    def stream_figures(self) -> dict:
        """The stream as a whole: when each call completed (its last launch's completion: every CTA exited
        and its memory operations through), the gaps between consecutive calls' completions, and the
        steady-state time per call, `stream_us`: the mean of the last even number of gaps after the first
        (`steady_gaps`; where none is, every gap; None for a stream of one call). The first gap is a
        transient: the first call starts cold, with no call before it to overlap its start-up, and its cold
        first loads give it a tail under which the second call hides all of its own start-up. The calls after
        it may alternate (a call whose CTAs end together lets the next one hide nothing of its start-up; that
        one's spread ends let the one after it hide more): an even count of gaps takes whole periods."""
        m = self.machine
        ends: dict = {}
        for state in self.states:
            ends[state.call] = max(ends.get(state.call, 0.0), state.completed)
        done = [m.us(ends[c]) for c in sorted(ends)]
        gaps = [b - a for a, b in zip(done, done[1:])]
        steady = gaps[1:][len(gaps[1:]) % 2:] or gaps
        stream = sum(steady) / len(steady) if steady else None
        return {
            "calls": len(done),
            "call_end_us": done,
            "call_gaps_us": gaps,
            "steady_gaps": len(steady),
            "stream_us": stream,
            "board_mean_us": None if stream is None else self.board_mean(done[0], stream),
        }

    def board_mean(self, first_call_us: float, steady_us: float) -> float:
        """The board's figure from a stream's: its start event is recorded behind the flush kernel, so the
        first call's first launch starts a launch gap (no PDL: the flush kernel never triggers) after it and
        runs alone and cold to `first_call_us`; the other `calls_per_flush - 1` calls follow at the steady
        gap; the mean over the flush's calls counts the first one's time once (eval.py: elapsed / 15). Reported
        as `board_mean_us` beside `stream_us` and does not replace `board_us` (the steady gap per call, as the
        ladder's rows): the two differ only where calls overlap (PDL), e.g. ours. `tools/emulate.py
        benchmarks` prints both; README gives both."""
        m, calls = self.machine, self.calls_per_flush
        first = m.launch_gap_us + first_call_us
        return (first + (calls - 1) * steady_us) / calls


def board_us(figures: dict, machine) -> float:
    """One call's share of the board's 15 back-to-back calls by the single-call formula (DESIGN.md, "Timed
    mode"): the launch gap after the previous call's grid, then the kernel; with PDL the gap is the shorter
    one and the prologue (CTA start to the first griddepcontrol.wait) overlaps the previous kernel's tail,
    where SMs were already free (between its first and last CTA exits). A stream of calls
    (Clock.stream_figures) simulates that overlap instead."""
    if figures["pdl"]:
        tail = figures["last_cta_end_us"] - figures["first_cta_end_us"]
        return machine.launch_gap_pdl_us + figures["kernel_us"] - min(figures["prologue_us"], tail)
    return machine.launch_gap_us + figures["kernel_us"]
