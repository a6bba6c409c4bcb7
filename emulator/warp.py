"""Warp execution: registers as NumPy vectors of 32 lanes, operand accessors, SIMT control flow.

- **Registers.** Each warp holds one `(registers, 32)` uint64 array of raw bits; a 32-bit register keeps its
  value zero-extended, a predicate is 0/1. An instruction's type suffix says how the bits are read (ISA 5.2
  "Types"); `reader`/`writer` build the conversion once per operand, at load time.
- **Control flow.** A converged warp has one program counter. A branch whose predicate differs across the
  active lanes (ISA 9.7.12.2 `bra`) splits it: each lane keeps its own PC and the warp runs, at every step,
  the lanes at the lowest PC (min-PC reconvergence, which reconverges structured code at the branch's
  join point); once all live lanes share a PC it is converged again.
- **Warp-wide instructions.** `.aligned` instructions (ISA 9.7.x "aligned" qualifier) must be executed by
  every live lane of the warp together; doing otherwise is reported.
- **Blocking.** A handler returns a `Wait` when the warp cannot go on (a failed `mbarrier.try_wait`, a
  `bar.sync` not complete...): the scheduler then runs other warps until the wait is ready.
"""

from __future__ import annotations

import numpy as np

from .errors import EmulatorError, UnimplementedInstruction
from .ptx import _registers

# type suffix -> (NumPy dtype of the value, unsigned dtype of the same width)
TYPES = {
    "b8": (np.uint8, np.uint8), "u8": (np.uint8, np.uint8), "s8": (np.int8, np.uint8),
    "b16": (np.uint16, np.uint16), "u16": (np.uint16, np.uint16), "s16": (np.int16, np.uint16),
    "f16": (np.float16, np.uint16),
    "b32": (np.uint32, np.uint32), "u32": (np.uint32, np.uint32), "s32": (np.int32, np.uint32),
    "f32": (np.float32, np.uint32),
    "b64": (np.uint64, np.uint64), "u64": (np.uint64, np.uint64), "s64": (np.int64, np.uint64),
    "f64": (np.float64, np.uint64),
    "pred": (np.bool_, np.uint8),
}
LANES = 32
BOOL = np.dtype(bool)
ALL_LANES = np.ones(LANES, bool)
LANE_IDS = np.arange(LANES, dtype=np.uint32)

# family (first dotted word) or longer prefix -> factory(instr, program) -> handler(warp, mask)
INSTRUCTIONS: dict = {}


def instruction(*prefixes):
    """Register a handler factory for opcodes starting with any of `prefixes` (longest prefix wins)."""

    def register(factory):
        for p in prefixes:
            INSTRUCTIONS[p] = factory
        return factory

    return register


def lookup(opcode: str):
    """The factory of the longest registered prefix; a `word::qualifier` part also matches as `word`
    (`tcgen05.fence::after_thread_sync` -> `tcgen05.fence`)."""
    exact = opcode.split(".")
    stripped = [part.split("::")[0] for part in exact]
    for n in range(len(exact), 0, -1):
        for parts in (exact, stripped):
            factory = INSTRUCTIONS.get(".".join(parts[:n]))
            if factory is not None:
                return factory
    return None


def type_of(instr, position: int = -1) -> str:
    """The type suffix of an opcode: the last (or `position`-th from the end) modifier that is a type."""
    types = [m for m in instr.modifiers if m in TYPES]
    if not types:
        raise EmulatorError("unimplemented", f"no type in {instr.opcode}")
    return types[position]


def to_raw(values, typ: str) -> np.ndarray:
    """Values of type `typ` -> raw register bits (uint64, zero-extended)."""
    dtype, unsigned = TYPES[typ]
    if typ == "pred":
        return np.asarray(values).astype(bool).astype(np.uint64)
    arr = np.asarray(values)
    if arr.dtype != dtype:
        if np.issubdtype(dtype, np.integer) and np.issubdtype(arr.dtype, np.integer):
            arr = arr.astype(np.int64 if arr.dtype.kind == "i" else np.uint64).astype(dtype)
        else:
            arr = arr.astype(dtype)
    return arr.view(unsigned).astype(np.uint64)


def from_raw(raw: np.ndarray, typ: str) -> np.ndarray:
    dtype, unsigned = TYPES[typ]
    if typ == "pred":
        return raw != 0
    return raw.astype(unsigned).view(dtype)


class Program:
    """A kernel ready to run: its instructions compiled to handlers, its registers numbered."""

    def __init__(self, kernel):
        self.kernel = kernel
        # a warp's register file: one row per register, in the order the instructions first name them (rows an
        # instruction uses lie close together: a warp's run touches few cache lines of its file)
        first_use = {}
        for instr in kernel.instructions:
            for name in _registers(instr.operands):
                first_use.setdefault(name, len(first_use))
        order = sorted(kernel.registers, key=lambda name: (first_use.get(name, len(first_use)), name))
        self.register_index = {name: i for i, name in enumerate(order)}
        for instr in kernel.instructions:
            if instr.guard:
                self.register_index.setdefault(instr.guard[0], len(self.register_index))
        self.steps = []
        for instr in kernel.instructions:
            factory = lookup(instr.opcode)
            if factory is None:
                self.steps.append(_unimplemented(instr))
            else:
                self.steps.append(factory(instr, self))
        self.guards = [(self.register_index[i.guard[0]], i.guard[1]) if i.guard else None
                       for i in kernel.instructions]
        self.aligned = [".aligned" in f".{i.opcode}." or i.opcode.startswith(("bar.sync", "barrier.sync"))
                        for i in kernel.instructions]

    def where(self, index: int) -> str:
        instr = self.kernel.instructions[index]
        return f"PTX line {instr.line}: {instr.text}"

    # ------------------------------------------------------------------ operand accessors
    def reader(self, operand, typ: str):
        """A function warp -> np.ndarray (32 lanes) holding `operand` as type `typ`."""
        kind = operand.kind
        if kind == "reg":
            name = operand.name
            if name.startswith("%") and name.split(".")[0] in SPECIAL_REGISTERS:
                special = SPECIAL_REGISTERS[name.split(".")[0]]
                sub = name.split(".")[1] if "." in name else None
                dtype, unsigned = TYPES[typ]
                return lambda w: np.asarray(special(w, sub)).astype(np.uint64).astype(unsigned).view(dtype)
            index = self.register_index[name]
            dtype, unsigned = np.dtype(TYPES[typ][0]), np.dtype(TYPES[typ][1])  # instances: NumPy's quick path
            if typ == "pred":
                return lambda w: w.regs[index].astype(BOOL)  # != 0, at half the cost
            if unsigned == np.uint64:
                return lambda w: w.regs[index].view(dtype).copy()
            if dtype == unsigned:
                return lambda w: w.regs[index].astype(unsigned)
            return lambda w: w.regs[index].astype(unsigned).view(dtype)
        if kind == "imm":
            value = operand.value
            dtype, unsigned = TYPES[typ]
            if typ == "pred":
                const = np.full(LANES, bool(value))
            elif isinstance(value, float) and np.issubdtype(dtype, np.integer):
                raise EmulatorError("unimplemented", f"float immediate {value} for type {typ}")
            elif isinstance(value, int) and not np.issubdtype(dtype, np.integer):
                const = np.full(LANES, value, dtype)
            elif isinstance(value, int):
                bits = np.dtype(unsigned).itemsize * 8
                const = np.full(LANES, value & ((1 << bits) - 1), unsigned).view(dtype)
            else:
                const = np.full(LANES, value, dtype)
            const.setflags(write=False)
            return lambda w: const
        if kind == "sym":
            name = operand.name
            if name in self.kernel_param_offsets:
                offset = self.kernel_param_offsets[name]
                return lambda w: np.full(LANES, offset, np.uint64).astype(TYPES[typ][0])
            if any(v.name == name for v in self.kernel.shared):
                return lambda w: np.full(LANES, w.cta.shared.symbols[name], np.uint64).astype(TYPES[typ][0])
            raise EmulatorError("unimplemented", f"unknown symbol {name}")
        raise EmulatorError("unimplemented", f"operand {operand} cannot be read as a value")

    def writer(self, operand, typ: str):
        """A function (warp, values, mask) storing values of type `typ` into `operand` in the masked lanes."""
        if operand.kind == "sink":
            return lambda w, values, mask: None
        if operand.kind != "reg":
            raise EmulatorError("unimplemented", f"operand {operand} cannot be written")
        index = self.register_index[operand.name]
        exact, unsigned = np.dtype(TYPES[typ][0]), np.dtype(TYPES[typ][1])
        if typ == "pred":
            exact = unsigned = BOOL  # a bool vector (0/1, as NumPy's comparisons make them) is the register's bits
        integer = exact.kind in "iu"

        def write(w, values, mask):
            # to_raw's bits without its checks, zero-extended by the assignment itself (a safe cast): values of
            # the type (most handlers' results) as they are; integers of another width (shifts, wide products)
            # reduced modulo 2^bits by one cast to the unsigned type, which is what to_raw's two casts leave
            if values.__class__ is np.ndarray and values.dtype is exact:
                raw = values.view(unsigned)
            elif integer and values.__class__ is np.ndarray and values.dtype.kind in "iu":
                raw = values.astype(unsigned)
            else:
                raw = to_raw(values, typ)
            if mask is w._alive and w.full:
                w.regs[index] = raw
            else:
                np.copyto(w.regs[index], raw, where=mask)

        return write

    def high_register(self, operand) -> int:
        """The register holding bits 64-127 of the `.b128` register `operand` (a warp's registers are 64-bit
        vectors: a b128 one is two, its own index for the low half and this companion for the high half). Made
        when a handler factory first asks, which is while the Program is built, before any warp exists."""
        if operand.kind != "reg":
            raise EmulatorError("unimplemented", f"operand {operand} as a .b128 register")
        return self.register_index.setdefault(operand.name + "^hi", len(self.register_index))

    @property
    def kernel_param_offsets(self) -> dict:
        return {p.name: p.offset for p in self.kernel.params}


def _unimplemented(instr):
    def handler(w, mask):
        raise UnimplementedInstruction(instr.opcode)

    return handler


# --------------------------------------------------------------------------------------------------
# Special registers (ISA 10)
# --------------------------------------------------------------------------------------------------


def _dim(t, sub):
    return t[{"x": 0, "y": 1, "z": 2}[sub]]


def _tid(w, sub):
    bx, by, _ = w.cta.grid.config.block
    linear = w.thread_ids
    return {"x": linear % bx, "y": (linear // bx) % by, "z": linear // (bx * by)}[sub]


def _cluster_ctaid(w, sub):
    cx, cy, cz = w.cta.grid.config.cluster
    x, y, z = w.cta.ctaid
    return {"x": x % cx, "y": y % cy, "z": z % cz}[sub]


def _lanemask(op):
    def f(w, sub):
        lane = LANE_IDS.astype(np.uint64)
        bit = np.uint64(1) << lane
        if op == "eq":
            return bit
        if op == "lt":
            return bit - np.uint64(1)
        if op == "le":
            return (bit << np.uint64(1)) - np.uint64(1)
        if op == "gt":
            return (~((bit << np.uint64(1)) - np.uint64(1))) & np.uint64(0xFFFFFFFF)
        return (~(bit - np.uint64(1))) & np.uint64(0xFFFFFFFF)

    return f


def _clock(w, sub):
    """%clock / %clock64 (PTX ISA, "Special Registers": a per-SM cycle counter): in the timed mode the warp's time
    in cycles, so a kernel's own stamps read the simulated clock; in the untimed modes the grid's
    instruction count (monotone, as the ISA promises, and nothing more)."""
    return np.full(LANES, int(w.time) if w.ready is not None else w.cta.grid.instructions)


SPECIAL_REGISTERS = {
    "%tid": _tid,
    "%clock": _clock,
    "%clock64": _clock,
    "%ntid": lambda w, sub: np.full(LANES, _dim(w.cta.grid.config.block, sub)),
    "%ctaid": lambda w, sub: np.full(LANES, _dim(w.cta.ctaid, sub)),
    "%nctaid": lambda w, sub: np.full(LANES, _dim(w.cta.grid.config.grid, sub)),
    "%laneid": lambda w, sub: LANE_IDS,
    "%warpid": lambda w, sub: np.full(LANES, w.warp_id),
    "%nwarpid": lambda w, sub: np.full(LANES, 64),
    "%smid": lambda w, sub: np.full(LANES, w.cta.grid.ctas.index(w.cta) % 148),
    "%cluster_ctarank": lambda w, sub: np.full(LANES, w.cta.rank),
    "%cluster_nctarank": lambda w, sub: np.full(LANES, len(w.cta.cluster.ctas)),
    "%cluster_ctaid": _cluster_ctaid,
    "%cluster_nctaid": lambda w, sub: np.full(LANES, _dim(w.cta.grid.config.cluster, sub)),
    "%clusterid": lambda w, sub: np.full(LANES, _dim(w.cta.cluster.clusterid, sub)),
    "%nclusterid": lambda w, sub: np.full(
        LANES, _dim(w.cta.grid.config.grid, sub) // _dim(w.cta.grid.config.cluster, sub)),
    "%is_explicit_cluster": lambda w, sub: np.full(LANES, 1),
    "%lanemask_eq": _lanemask("eq"), "%lanemask_lt": _lanemask("lt"), "%lanemask_le": _lanemask("le"),
    "%lanemask_gt": _lanemask("gt"), "%lanemask_ge": _lanemask("ge"),
}


# --------------------------------------------------------------------------------------------------
# The warp
# --------------------------------------------------------------------------------------------------


class Warp:
    def __init__(self, cta, warp_id: int, program: Program):
        self.cta = cta
        self.warp_id = warp_id
        self.program = program
        self.regs = np.zeros((len(program.register_index), LANES), np.uint64)
        self.thread_ids = warp_id * LANES + LANE_IDS
        self.alive = self.thread_ids < cta.threads
        self.pc = 0
        self.lane_pc = None  # per-lane PCs while diverged
        self.group = None  # while diverged: the lanes at the lowest PC, kept until the PCs change (_lowest_group)
        self.wait = None  # a Wait while blocked
        self.last_index = 0  # the instruction last executed (for reports)
        self.failed_wait = None  # (pc, barrier, parity, progress) of the last failed try_wait (sync_ops.py)
        self.poll = None  # the warp's state at its last strong load, to tell a poll at a fixed point (memory_ops.py)
        self.cluster_arrival = None  # barrier.cluster generation this warp arrived in, until it waits
        self.bulk_open = {}  # lane -> TMA stores not yet committed to a bulk group (bulk_copy.py)
        self.bulk_groups = {}  # lane -> committed bulk groups, oldest first
        self.time = 0.0  # timed mode: this warp's local time in cycles (clock.py)
        self.clock_ticket = 0  # timed mode: which of this warp's queue entries is current (clock.py)
        self.ready = None  # timed mode: per register, the time its pending result lands (the scoreboard)
        self.label = f"{cta.label} warp {warp_id}"

    @property
    def alive(self) -> np.ndarray:
        """The lanes that have not exited (bool, 32)."""
        return self._alive

    @alive.setter
    def alive(self, lanes: np.ndarray) -> None:
        self._alive = lanes
        self.group = None  # the lanes a diverged warp runs next (_lowest_group) are taken among the live ones
        live = int(np.count_nonzero(lanes))
        self.done = live == 0  # asked before every issue: kept beside the lanes, not recomputed
        self.full = live == LANES  # every lane live: an instruction of the live lanes writes whole registers

    @property
    def role(self) -> str:
        return self.cta.grid.warp_roles.get(self.warp_id, f"warp {self.warp_id}")

    def where(self, index: int | None = None) -> str:
        return f"{self.program.where(self.last_index if index is None else index)}; {self.label} ({self.role})"

    def run(self, budget: int, clock=None) -> int:
        """Execute up to `budget` instructions; stop early when blocked or done. Returns the count.
        Timed mode (`clock`, clock.py): each instruction issues at `self.time`, once the registers it reads
        are ready; the time then advances by the instruction's issue cost and its results are ready a
        latency after issue. The warp stops before issuing past `clock.horizon` (the next event anywhere), and
        before an instruction the clock holds it at (a gate: griddepcontrol.wait on a grid still running,
        tcgen05.alloc on an SM whose tensor memory another CTA holds), which it issues once woken.
        A warp that runs has a live lane, and the lanes at its lowest PC are live: an unguarded instruction
        executes in at least one lane."""
        program = self.program
        steps, guards, aligned = program.steps, program.guards, program.aligned
        regs = self.regs
        timed = clock is not None
        if timed:
            (costs, busy_costs, latencies, waits_on, writes, l1_loads, lsu, store_bytes, issue_hooks, gates,
             tensor_pipe) = clock.issue_context(self)
            if self.ready is None:
                self.ready = [0.0] * len(program.register_index)
            ready = self.ready
        count = 0
        while count < budget:
            if timed and self.time > clock.horizon:
                return count
            if self.lane_pc is None:
                pc = self.pc
                mask = self._alive
            else:
                pc, mask, _ = self.group or self._lowest_group()
            if timed:
                # the scoreboard: an instruction issues when the registers it reads (or overwrites) are ready
                for r in waits_on[pc]:
                    if ready[r] > self.time:
                        self.time = ready[r]
                if lsu[pc] is not None:  # a global load or store waits for the SM's load/store unit
                    self.time = clock.lsu_start(self)
                if self.time > clock.horizon:
                    return count
            if pc >= len(steps):
                raise EmulatorError("control", "execution ran past the end of the kernel", self.where())
            self.last_index = pc
            count += 1
            guard = guards[pc]
            if guard is None:
                exec_mask, active = mask, True
            else:
                exec_mask = mask & (regs[guard[0]] == 0 if guard[1] else regs[guard[0]].astype(BOOL))
                lanes = int(np.count_nonzero(exec_mask))  # any(), at a third of its cost
                active = lanes != 0
                if lanes == LANES:  # every lane: the same lanes as `mask`, the warp's live lanes (all 32)
                    exec_mask = mask
            if timed and gates[pc] is not None and active:
                held = gates[pc](self)  # the clock holds the warp before this instruction (clock.py)
                if held is not None:
                    self.wait = held
                    return count - 1
            if aligned[pc] and exec_mask is not self._alive and not np.array_equal(exec_mask, self._alive):
                raise EmulatorError("aligned", f"`.aligned` instruction executed by lanes "
                                    f"{np.flatnonzero(exec_mask).tolist()} of live lanes "
                                    f"{np.flatnonzero(self._alive).tolist()}", self.where(pc))
            if timed:
                latency = clock.load_latency(self, pc, exec_mask) if l1_loads[pc] and active else latencies[pc]
            try:
                result = steps[pc](self, exec_mask) if active else None
            except EmulatorError as e:
                if not e.where:
                    e.where = self.where(pc)
                    e.args = (f"{e.kind}: {e.message} ({e.where})",)
                raise
            if timed:
                if lsu[pc] is not None and active:
                    clock.lsu_request(self, pc, exec_mask)
                if store_bytes[pc]:
                    clock.stored(self, pc, int(np.count_nonzero(exec_mask)) if active else 0)
                elif issue_hooks[pc] is not None and active:
                    issue_hooks[pc](self, exec_mask)
                if writes[pc]:
                    landed = self.time + latency
                    for r in writes[pc]:
                        ready[r] = landed
                self.time += busy_costs[pc] if tensor_pipe.free > self.time else costs[pc]
            if result is None:
                if self.lane_pc is None:
                    self.pc = pc + 1
                else:
                    self._advance(mask, pc + 1)
                continue
            kind = result[0]
            if kind == "branch":
                taken = exec_mask
                target = result[1]
                if self.lane_pc is None and (taken is mask or bool((taken == mask).all())):
                    self.pc = target
                elif self.lane_pc is None and not active:
                    self.pc = pc + 1
                else:
                    self._diverge()
                    self.lane_pc[mask & taken] = target
                    self.lane_pc[mask & ~taken] = pc + 1
                    self._reconverge()
            elif kind == "exit":
                self._advance(mask, pc + 1)
                self.alive = self._alive & ~exec_mask
                self.cta.grid.progress += 1
                if self.done:
                    trace = self.cta.grid.trace
                    if trace is not None and all(w.done for w in self.cta.warps):
                        trace.cta_exit(self.cta)
                    return count
                self._reconverge()
            elif kind == "wait":
                self._advance(mask, pc + 1)
                self.wait = result[1]
                return count
            elif kind == "yield":
                self._advance(mask, pc + 1)
                return count
        return count

    def _lowest_group(self) -> tuple:
        """A diverged warp's lanes at the lowest PC (those it runs next): (that PC, those lanes (read-only),
        the next higher PC of a live lane or None), kept as `group` until the lanes' PCs change otherwise
        than by that group moving on."""
        live = self.lane_pc[self._alive]
        pc = int(live.min())
        mask = self._alive & (self.lane_pc == pc)
        mask.setflags(write=False)
        higher = live[live != pc]
        self.group = (pc, mask, int(higher.min()) if higher.size else None)
        return self.group

    def _advance(self, mask, next_pc: int) -> None:
        if self.lane_pc is None:
            self.pc = next_pc
            return
        self.lane_pc[mask] = next_pc
        group = self.group
        if group is not None and group[1] is mask and group[2] is not None and next_pc < group[2]:
            # the lowest lanes moved on and are still the lowest, apart from the others: no reconvergence
            self.group = (next_pc, mask, group[2])
            return
        self._reconverge()

    def _diverge(self) -> None:
        if self.lane_pc is None:
            self.lane_pc = np.full(LANES, self.pc, np.int64)
        self.group = None

    def _reconverge(self) -> None:
        self.group = None
        if self.lane_pc is None:
            return
        live = self.lane_pc[self._alive]
        if live.size and (live == live[0]).all():
            self.pc = int(live[0])
            self.lane_pc = None


BRANCH = ("branch",)
EXIT = ("exit",)
