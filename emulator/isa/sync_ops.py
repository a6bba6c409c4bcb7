"""Synchronization and warp-level instructions: mbarrier, bar/barrier, barrier.cluster, elect, shfl, vote,
fences, nanosleep, griddepcontrol.

PTX ISA 9.7.13.15 (mbarrier: init 9.7.13.15.9, expect_tx 9.7.13.15.11, arrive 9.7.13.15.13,
test_wait/try_wait 9.7.13.15.16), 9.7.13.1 (bar, barrier), 9.7.13.2 (barrier.cluster), 9.7.13.4 (fence,
membar), 9.7.13.x (elect.sync), 9.7.9.6 (shfl.sync), 9.7.13.x (vote.sync), 9.7.19.2 (nanosleep), 9.7.13.x
(griddepcontrol).

Memory ordering (`.release`/`.acquire`/`.relaxed` scopes and every fence) has no effect on what runs: the
emulator's memory is sequentially consistent. With race detection on, these handlers report the
synchronization they perform to `grid.trace` (happens_before.py), which checks that every conflicting pair
of accesses is ordered. Not modelled: the suspend-time hint of try_wait.
`griddepcontrol` has no effect here: in eager and adversarial modes a stream's grids run one after the
other, so the prerequisite grid has always completed; in the timed mode the clock (clock.py, a layer over
this core) holds a warp before `griddepcontrol.wait` until the launches before its own have completed, and
takes a CTA's first `griddepcontrol.launch_dependents` as its trigger for the next launch.
"""

from __future__ import annotations

import numpy as np

from ..errors import EmulatorError
from ..machine import ClusterBarrierWait, MBarrier, MBarrierWait, NamedBarrier, NamedBarrierWait, Yield
from ..memory import split_shared
from ..warp import LANES, instruction
from .memory_ops import SCOPES, MemoryOrder, address_reader


def mbarrier_at(w, address: int, cluster_scope: bool):
    """The CTA and mbarrier at a shared address (`.shared::cta` must name the executing CTA)."""
    rank, offset = split_shared(address)
    if address % 8:
        raise EmulatorError("misaligned", f"mbarrier at shared 0x{address:x} is not 8-B aligned")
    if not cluster_scope and rank != w.cta.rank:
        raise EmulatorError("shared-bounds", f"mbarrier .shared::cta access at 0x{address:x}, an address of CTA "
                            f"rank {rank}, from CTA rank {w.cta.rank}")
    cta = w.cta.cluster.cta(rank, "")
    cta.shared.check(offset, 8, "mbarrier access")
    return cta, cta.mbarrier(offset, "")


def _barriers(w, cluster_scope: bool):
    """address -> (CTA, mbarrier), for the lanes of one instruction: lanes naming one barrier look it up once
    (arrivals and waits neither initialize nor invalidate barriers)."""
    found = {}

    def at(address: int):
        hit = found.get(address)
        if hit is None:
            hit = found[address] = mbarrier_at(w, address, cluster_scope)
        return hit

    return at


def _lanes(mask) -> list:
    """The active lanes, as ints."""
    return np.flatnonzero(mask).tolist()


@instruction("mbarrier.init")
def _init(instr, program):
    addr = address_reader(program, instr.operands[0])
    count = program.reader(instr.operands[1], "u32")

    def handler(w, mask):
        a, c = addr(w).tolist(), count(w).tolist()
        initialized = {}  # offset -> the barrier its last lane made (what the detector needs: one per barrier)
        for lane in _lanes(mask):
            rank, offset = split_shared(a[lane])
            if rank != w.cta.rank:
                raise EmulatorError("shared-bounds", f"mbarrier.init of another CTA's barrier at 0x{a[lane]:x}")
            w.cta.shared.check(offset, 8, "mbarrier.init")
            if a[lane] % 8:
                raise EmulatorError("misaligned", f"mbarrier.init at 0x{a[lane]:x}")
            if not 1 <= c[lane] < (1 << 20):
                raise EmulatorError("mbarrier", f"mbarrier.init count {c[lane]} out of range [1, 2^20)")
            bar = initialized[offset] = w.cta.mbarriers[offset] = MBarrier(a[lane], c[lane])
            w.cta.grid.progress += 1
        if w.cta.grid.trace is not None:
            for bar in initialized.values():
                w.cta.grid.trace.mbarrier_init(w, bar)

    return handler


def _arrive_factory(instr, program, *, expect_tx: bool, drop: bool = False):
    ops = instr.operands
    state = ops[0]
    addr = address_reader(program, ops[1])
    extra = program.reader(ops[2], "u32") if len(ops) > 2 else None
    cluster_scope = "shared::cluster" in instr.modifiers
    write_state = program.writer(state, "b64") if state.kind != "sink" else None

    def handler(w, mask):
        a = addr(w).tolist()
        e = extra(w).tolist() if extra is not None else None
        tokens = np.zeros(LANES, np.uint64)
        barrier_at = _barriers(w, cluster_scope)
        for lane in _lanes(mask):
            _, bar = barrier_at(a[lane])
            if expect_tx:
                bar.expect_tx(w.cta.grid, e[lane])
                count = 1
            else:
                count = e[lane] if e is not None else 1
            if drop:
                bar.expected -= count
            if w.cta.grid.trace is not None:
                w.cta.grid.trace.arrive(w, bar)
            tokens[lane] = bar.arrive(w.cta.grid, count)
        if write_state is not None:
            write_state(w, tokens, mask)

    return handler


@instruction("mbarrier.arrive")
def _arrive(instr, program):
    return _arrive_factory(instr, program, expect_tx="expect_tx" in instr.modifiers)


@instruction("mbarrier.arrive_drop")
def _arrive_drop(instr, program):
    return _arrive_factory(instr, program, expect_tx="expect_tx" in instr.modifiers, drop=True)


@instruction("mbarrier.expect_tx", "mbarrier.complete_tx")
def _tx(instr, program):
    addr = address_reader(program, instr.operands[0])
    nbytes = program.reader(instr.operands[1], "u32")
    complete = instr.modifiers[0] == "complete_tx"
    cluster_scope = "shared::cluster" in instr.modifiers

    def handler(w, mask):
        a, n = addr(w).tolist(), nbytes(w).tolist()
        barrier_at = _barriers(w, cluster_scope)
        for lane in _lanes(mask):
            _, bar = barrier_at(a[lane])
            if complete and w.cta.grid.trace is not None:
                w.cta.grid.trace.arrive(w, bar)
            (bar.complete_tx if complete else bar.expect_tx)(w.cta.grid, n[lane])

    return handler


@instruction("mbarrier.try_wait", "mbarrier.test_wait")
def _wait(instr, program):
    """try_wait/test_wait[.parity] p, [addr], parity|state. A failed try_wait yields to other warps; failing
    again at once (a spin loop) blocks the warp until the phase completes; test_wait never blocks. Before
    answering, the asynchronous units may deliver work that signals this barrier (async_ops.py)."""
    if "parity" not in instr.modifiers:
        raise EmulatorError("unimplemented", f"{instr.opcode} (state-token form)")
    blocking = instr.modifiers[0] == "try_wait"
    dst = instr.operands[0]
    write = program.writer(dst, "pred")
    addr = address_reader(program, instr.operands[1])
    parity = program.reader(instr.operands[2], "u32")
    cluster_scope = "shared::cluster" in instr.modifiers

    def handler(w, mask):
        from ..async_ops import observe

        a, par = addr(w).tolist(), parity(w).tolist()
        out = np.zeros(LANES, bool)
        wait = None
        barrier_at = _barriers(w, cluster_scope)
        # lanes asking one barrier about one parity get one answer, except in adversarial mode, where asking
        # may deliver work that completes the phase (async_ops.observe) between two lanes
        answers = None if w.cta.grid.mode == "adversarial" else {}
        trace = w.cta.grid.trace
        observed = None  # (id of the barrier, grid.progress) last told to the detector: lanes after it add nothing
        for lane in _lanes(mask):
            question = (a[lane], par[lane] & 1)
            answer = answers.get(question) if answers is not None else None
            if answer is None:
                cta, bar = barrier_at(a[lane])
                p = question[1]
                if not bar.phase_complete(p):
                    observe(w.cta.grid, bar)
                answer = (cta, bar, p, bar.phase_complete(p))
                if answers is not None:
                    answers[question] = answer
            cta, bar, p, complete = answer
            out[lane] = complete
            if complete and trace is not None and observed != (id(bar), w.cta.grid.progress):
                trace.observe(w, bar)
                observed = (id(bar), w.cta.grid.progress)
            if not complete and wait is None:
                wait = MBarrierWait(cta, bar, p)
        write(w, out, mask)
        if not blocking or wait is None:
            w.failed_wait = None
            return None
        # A try_wait that fails returns false (the ISA's time limit ran out) and the code after it goes
        # on: a peek followed by other work must not be turned into a wait. The same try_wait failing
        # again with nothing else having happened is a spin loop: the warp blocks until the phase completes.
        # In the timed mode a failed try_wait suspends the warp, as the hardware's does, until the phase
        # completes or the time limit passes (clock.py).
        key = (w.last_index, id(wait.barrier), wait.parity, w.cta.grid.progress)
        if w.failed_wait == key or w.cta.grid.clock is not None:
            return ("wait", wait)
        w.failed_wait = key
        return ("yield",)

    return handler


@instruction("mbarrier.inval")
def _inval(instr, program):
    addr = address_reader(program, instr.operands[0])

    def handler(w, mask):
        for lane in _lanes(mask):
            rank, offset = split_shared(int(addr(w)[lane]))
            w.cta.mbarriers.pop(offset, None)

    return handler


# --------------------------------------------------------------------------------------------------
# CTA and cluster barriers
# --------------------------------------------------------------------------------------------------


def _named_barrier(instr, program, *, wait: bool):
    ident = program.reader(instr.operands[0], "u32") if instr.operands else None
    count = program.reader(instr.operands[1], "u32") if len(instr.operands) > 1 else None

    def handler(w, mask):
        bid = int(ident(w)[0]) if ident is not None else 0
        threads = int(count(w)[0]) if count is not None else w.cta.threads
        bar = w.cta.named_barriers.get(bid)
        if bar is None:
            bar = w.cta.named_barriers[bid] = NamedBarrier(bid)
        if bar.count is not None and bar.arrived and bar.count != threads:
            raise EmulatorError("barrier", f"bar {bid}: this warp expects {threads} threads, others {bar.count}")
        bar.count = threads
        generation = bar.generation
        bar.arrived += LANES
        w.cta.grid.progress += 1
        trace = w.cta.grid.trace
        if trace is not None:
            trace.bar_arrive(w, bar, wait)
        if bar.arrived >= threads:
            if bar.arrived > threads:
                raise EmulatorError("barrier", f"bar {bid}: {bar.arrived} threads arrived, {threads} expected")
            bar.arrived = 0
            bar.generation += 1
            if trace is not None:
                trace.bar_complete(bar)
            if w.cta.grid.clock is not None:
                w.cta.grid.clock.wake(bar)
            return None
        return ("wait", NamedBarrierWait(bar, generation)) if wait else None

    return handler


@instruction("bar.sync", "barrier.sync", "bar.red", "barrier.red")
def _bar_sync(instr, program):
    if instr.opcode.startswith(("bar.red", "barrier.red")):
        raise EmulatorError("unimplemented", instr.opcode)
    return _named_barrier(instr, program, wait=True)


@instruction("bar.arrive", "barrier.arrive")
def _bar_arrive(instr, program):
    return _named_barrier(instr, program, wait=False)


@instruction("bar.warp.sync")
def _bar_warp(instr, program):
    return lambda w, mask: None


@instruction("barrier.cluster.arrive")
def _cluster_arrive(instr, program):
    def handler(w, mask):
        bar = w.cta.cluster.barrier
        bar.arrived.add(w)
        w.cluster_arrival = bar.generation
        w.cta.grid.progress += 1
        if w.cta.grid.trace is not None:
            w.cta.grid.trace.cluster_arrive(w, bar, bar.generation)

    return handler


@instruction("barrier.cluster.wait")
def _cluster_wait(instr, program):
    def handler(w, mask):
        bar = w.cta.cluster.barrier
        if w.cluster_arrival is None:
            raise EmulatorError("barrier", "barrier.cluster.wait without a barrier.cluster.arrive")
        wait = ClusterBarrierWait(bar, w.cluster_arrival)
        if w.cta.grid.trace is not None:
            w.cta.grid.trace.cluster_wait(w, bar, w.cluster_arrival)
        w.cluster_arrival = None
        return None if wait.ready() else ("wait", wait)

    return handler


# --------------------------------------------------------------------------------------------------
# warp-level
# --------------------------------------------------------------------------------------------------


# per leader lane: elect.sync's results (read-only), the leader's id in every lane and the leader's predicate
_LEADER_IDS = [np.full(LANES, lane, np.uint32) for lane in range(LANES)]
_IS_LEADER = [np.arange(LANES) == lane for lane in range(LANES)]
for _array in _LEADER_IDS + _IS_LEADER:
    _array.setflags(write=False)


@instruction("elect.sync")
def _elect(instr, program):
    """elect.sync d|p, membermask (9.7.13.x): one leader among the active lanes of membermask: the
    lowest-numbered (the ISA names no other choice; the emulator keeps it deterministic)."""
    dst = instr.operands[0]
    member = program.reader(instr.operands[1], "u32")
    if dst.kind == "pair":
        wd, wp = program.writer(dst.items[0], "u32"), program.writer(dst.items[1], "pred")
    else:
        wd, wp = program.writer(dst, "u32"), None

    def handler(w, mask):
        m = int(member(w)[0])
        leader = next((lane for lane in _lanes(mask) if m >> lane & 1), None)
        if leader is None:
            raise EmulatorError("warp", "elect.sync with no active lane in membermask")
        wd(w, _LEADER_IDS[leader], mask)
        if wp is not None:
            wp(w, _IS_LEADER[leader], mask)

    return handler


@instruction("shfl.sync")
def _shfl(instr, program):
    """shfl.sync.mode.b32 d[|p], a, b, c, membermask (9.7.9.6)."""
    mode = instr.modifiers[1]
    dst, a, b, c = instr.operands[:4]
    ra, rb, rc = program.reader(a, "b32"), program.reader(b, "u32"), program.reader(c, "u32")
    if dst.kind == "pair":
        wd, wp = program.writer(dst.items[0], "b32"), program.writer(dst.items[1], "pred")
    else:
        wd, wp = program.writer(dst, "b32"), None
    lane = np.arange(LANES)

    def sources(w):
        """(source lane of each lane, whether it is within the segment)"""
        bv, cv = rb(w).astype(np.int64) & 31, rc(w).astype(np.int64)
        clamp, segmask = cv & 31, (cv >> 8) & 31
        max_lane = (lane & segmask) | (clamp & ~segmask)
        min_lane = lane & segmask
        if mode == "idx":
            j = min_lane | (bv & ~segmask)
            ok = j <= max_lane
        elif mode == "up":
            j = lane - bv
            ok = j >= max_lane
        elif mode == "down":
            j = lane + bv
            ok = j <= max_lane
        elif mode == "bfly":
            j = lane ^ bv
            ok = j <= max_lane
        else:
            raise EmulatorError("unimplemented", instr.opcode)
        return np.where(ok, j, lane), ok

    if b.kind == "imm" and c.kind == "imm" and mode in ("idx", "up", "down", "bfly"):  # a reduction step: fixed lanes
        constant = sources(None)
        for array in constant:
            array.setflags(write=False)
        sources = lambda w: constant  # noqa: E731

    def handler(w, mask):
        av = ra(w)
        j, ok = sources(w)
        if not mask[j[mask]].all():
            raise EmulatorError("warp", f"shfl.sync reads lanes {sorted(set(j[mask][~mask[j[mask]]].tolist()))} "
                                "that do not take part")
        wd(w, av[j], mask)
        if wp is not None:
            wp(w, ok, mask)

    return handler


@instruction("vote.sync")
def _vote(instr, program):
    mode = instr.modifiers[1]
    dst, a = instr.operands[:2]
    ra = program.reader(a, "pred")
    write = program.writer(dst, "b32" if mode == "ballot" else "pred")

    def handler(w, mask):
        p = ra(w) & mask
        if mode == "ballot":
            write(w, np.full(LANES, int(sum(1 << int(k) for k in np.flatnonzero(p))), np.uint32), mask)
        elif mode == "any":
            write(w, np.full(LANES, bool(p.any())), mask)
        elif mode == "all":
            write(w, np.full(LANES, bool(p[mask].all())), mask)
        else:
            write(w, np.full(LANES, bool(p[mask].all() or not p[mask].any())), mask)

    return handler


@instruction("activemask")
def _activemask(instr, program):
    write = program.writer(instr.operands[0], "b32")
    return lambda w, mask: write(w, np.full(LANES, int(sum(1 << int(k) for k in np.flatnonzero(mask))),
                                            np.uint32), mask)


@instruction("griddepcontrol", "setmaxnreg", "pmevent")
def _no_effect(instr, program):
    """Hints, and launch control with no effect on what a grid computes (the timed mode's clock times
    griddepcontrol: module docstring)."""
    return lambda w, mask: None


@instruction("fence", "membar")
def _fence(instr, program):
    """fence{.sem}.scope, membar.level, fence.proxy.*, fence.mbarrier_init.release.cluster (9.7.13.4). No
    effect on values (the emulator's memory is sequentially consistent); with race detection on, the fences
    the detector models are reported: a thread fence (`.sc`, `.acq_rel` (the default), `.acquire`,
    `.release`; membar.{cta,gl,sys} is fence.sc.{cta,gpu,sys}) forms release and acquire patterns with the
    warp's strong accesses (ISA 8.8, happens_before.py), `fence.proxy.async*` orders the warp's generic
    writes before async-proxy accesses, `fence.mbarrier_init` its mbarrier inits before remote signals. Not
    seen: the other proxy fences (alias, tensormap), the `.sync_restrict` fences (they order shared memory
    only, where mbarrier waits already acquire), and fence.sc's total order (taken as fence.acq_rel)."""
    mods = instr.modifiers
    opcode = instr.opcode
    if opcode.startswith("fence.proxy.async"):
        kind = "proxy.async"
    elif opcode.startswith("fence.mbarrier_init"):
        kind = "mbarrier_init"
    elif "proxy" in mods or any(m.startswith("sync_restrict") for m in mods):
        return lambda w, mask: None
    else:
        kind = None
        levels = {"cta": "cta", "gl": "gpu", "sys": "sys"}
        if instr.family == "membar":
            sem, scope = "sc", levels.get(mods[0] if mods else "", None)
        else:
            sem = next((m for m in mods if m in ("sc", "acq_rel", "acquire", "release")), "acq_rel")
            scope = next((m for m in mods if m in SCOPES), None)
        if scope is None:
            raise EmulatorError("unimplemented", f"{opcode}: a fence names its scope (ISA 9.7.13.4)")
        order = MemoryOrder(sem, SCOPES[scope], 0, False, False, False)

    def handler(w, mask):
        trace = w.cta.grid.trace
        if trace is None:
            return
        if kind is None:
            trace.memory_fence(w, order)
        else:
            trace.fence(w, kind)

    return handler


SLEEPING = ("wait", Yield("sleeping (nanosleep)"))


@instruction("nanosleep")
def _nanosleep(instr, program):
    """nanosleep.u32 t (9.7.19.2): suspends the thread for about t ns. The sleep is time, which only the
    timed mode has (clock.py advances the warp's time by it); here the warp ends its time slice and lets the
    others run first (machine.Yield), so that a warp polling memory does not hold up the warps it waits for."""
    return lambda w, mask: SLEEPING
