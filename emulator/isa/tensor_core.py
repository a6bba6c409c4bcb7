"""Tensor-core instructions: tcgen05.{alloc,dealloc,relinquish_alloc_permit,cp,mma,commit,ld,wait,fence}
and the warp-level matrix stores that feed epilogues (stmatrix).

PTX ISA 9.7.16 (tcgen05): 9.7.16.7.1 alloc/dealloc/relinquish_alloc_permit, 9.7.16.8.4 tcgen05.cp,
9.7.16.9 tcgen05.mma (block scaling 9.7.16.10.7), 9.7.16.11.1 tcgen05.commit, 9.7.16.8.3 tcgen05.ld,
9.7.16.8.5 tcgen05.wait, 9.7.16.6.4 tcgen05.fence; 9.7.9.x stmatrix.

The layouts and the arithmetic are tcgen05.py's; this module decides who executes what and when:
- **The tensor pipe.** `tcgen05.cp` and `tcgen05.mma` are asynchronous and execute in issue order
  (ISA 9.7.16.6 "pipelined tcgen05 instructions"). Each issuing CTA keeps a queue; `tcgen05.commit`
  becomes an asynchronous operation that, when delivered (async_ops.py), first executes every queued
  operation issued before it, then arrives once on its mbarrier (in each CTA of `ctaMask` with
  `.multicast::cluster`). Eager mode executes each operation at issue.
- **cta_group::2.** The MMA is issued by one CTA of the pair and uses both: tcgen05.py says which
  operand rows and accumulator cells live in which CTA.
- **tcgen05.ld** reads tensor memory when issued and its registers hold the values at once, in both modes.
  The ISA's text has the load complete only at `tcgen05.wait::ld`; NVIDIA's epilogue (1-CTA and 2-CTA) uses
  the registers with no `tcgen05.wait::ld` at all and runs on B200s, so the hardware makes them valid at
  use: the ground truth decided, and registers are never garbage here (DESIGN.md).
- `tcgen05.fence::*` orders tcgen05 operations around thread synchronization: with sequentially
  consistent memory it has no effect here.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from .. import tcgen05
from ..async_ops import AsyncOp, issue
from ..errors import EmulatorError
from ..machine import Wait
from ..memory import split_shared
from ..warp import LANES, instruction
from .memory_ops import address_reader
from .sync_ops import mbarrier_at


def _cta_group(instr) -> int:
    return 2 if "cta_group::2" in instr.modifiers else 1


def _pair(w, cta_group: int) -> list:
    """The CTAs an instruction of `cta_group` acts on: this one, or this one and its peer (rank ^ 1)."""
    if cta_group == 1:
        return [w.cta]
    cluster = w.cta.cluster
    if len(cluster.ctas) < 2:
        raise EmulatorError("tmem", ".cta_group::2 in a cluster of one CTA")
    return sorted([w.cta, cluster.cta(w.cta.rank ^ 1, "")], key=lambda c: c.rank)


def _queue(cta) -> deque:
    if not hasattr(cta, "tensor_pipe"):
        cta.tensor_pipe = deque()  # (sequence number, operation)
        cta.tensor_issued = 0
    return cta.tensor_pipe


def _enqueue(w, operation, meta: dict) -> None:
    """An asynchronous tensor-core operation of this CTA's pipe: now (eager) or at its commit. `meta`
    describes it for the timed mode (unit, shape, cta_group)."""
    queue = _queue(w.cta)
    w.cta.tensor_issued += 1
    trace = w.cta.grid.trace
    if trace is not None:
        operation = _traced(trace, trace.issue(w, ("tensor pipe", w.cta), f"tensor pipe of {w.cta.label}"),
                            operation)
    if w.cta.grid.mode == "eager":
        operation()
    else:
        if not w.cta.grid.timing_only:  # the clock's fast path times the operation without its arithmetic
            queue.append((w.cta.tensor_issued, operation))
        if w.cta.grid.clock is not None:
            w.cta.grid.clock.tensor_op(w.cta, meta)


def _traced(trace, access, operation):
    """`operation` run as the race detector's `access` (its memory accesses are the tensor pipe's)."""

    def run():
        trace.begin(access)
        operation()
        trace.end()

    return run


def _execute_through(cta, sequence: int) -> None:
    queue = _queue(cta)
    while queue and queue[0][0] <= sequence:
        queue.popleft()[1]()


def _single_lanes(mask):
    return np.flatnonzero(mask)


def _smem_reader(cta):
    def read(address: int, nbytes: int) -> np.ndarray:
        rank, offset = split_shared(address)
        if cta.grid.trace is not None:
            cta.grid.trace.shared_range(cta.shared, offset, nbytes, False)
        return cta.shared.read(offset, nbytes)

    return read


# --------------------------------------------------------------------------------------------------
# allocation
# --------------------------------------------------------------------------------------------------


class PairWait(Wait):
    """A warp whose cta_group::2 allocation operation waits for the peer CTA's warp (9.7.16.5)."""

    def __init__(self, request, peer_rank: int):
        self.request = request
        self.peer_rank = peer_rank

    def ready(self) -> bool:
        return self.request.done

    def describe(self) -> str:
        return (f"{self.request.describe()}: waiting for a warp of the peer CTA (rank {self.peer_rank}) to issue "
                "it too (both CTAs of the pair take part)")


def _rendezvous(cta) -> "tcgen05.PairRendezvous":
    """The pair's meeting point, kept by the pair's even-ranked CTA."""
    even = cta.cluster.cta(cta.rank & ~1, "")
    if not hasattr(even, "tmem_pair"):
        even.tmem_pair = tcgen05.PairRendezvous()
    return even.tmem_pair


def _as_warp(w, operation, *args):
    """operation(*args) with the tensor-memory accesses it makes attributed to warp w (race detection)."""
    trace = w.cta.grid.trace
    if trace is not None:
        trace.begin(trace.warp_access(w))
    operation(*args)
    if trace is not None:
        trace.end()


def _pair_operation(w, operation: str, operands: tuple, complete, destination: int = 0):
    """Issue this warp's half of a cta_group::2 operation: wait for the peer's, or complete both with
    complete(first, second) (PairRequest each, the peer's first)."""
    peer = _pair(w, 2)[1 - (w.cta.rank & 1)]
    if all(p.done for p in peer.warps):
        raise EmulatorError("tmem", f"tcgen05.{operation}.cta_group::2 after the peer CTA (rank {peer.rank}) exited "
                            "(the ISA requires it active)")
    request = tcgen05.PairRequest(operation, w.cta.rank, operands, w.where(), destination, issuer=w)
    first = _rendezvous(w.cta).meet(request)
    if first is None:
        return ("wait", PairWait(request, peer.rank))
    complete(first, request)
    first.done = request.done = True
    if w.cta.grid.clock is not None:  # timed mode: the peer's warp, parked on its request, resumes
        w.cta.grid.clock.wake(first)
    w.cta.grid.progress += 1
    return None


@instruction("tcgen05.alloc")
def _alloc(instr, program):
    """tcgen05.alloc.cta_group.sync.aligned.shared::cta.b32 [dst], ncols (9.7.16.7.1): the address of the
    allocation to shared memory at dst. cta_group::2: both CTAs of the pair, the same columns in each."""
    dst = address_reader(program, instr.operands[0])
    ncols = program.reader(instr.operands[1], "u32")
    cta_group = _cta_group(instr)

    def write_address(cta, address: int, column: int, writer):
        rank, offset = split_shared(address)
        if rank != cta.rank:
            raise EmulatorError("shared-bounds", "tcgen05.alloc writes its address to another CTA's memory")
        cta.shared.write(offset, np.array([column], np.uint32))
        trace = cta.grid.trace
        if trace is not None:
            trace.shared(writer, cta.shared, [offset], 4, True)

    def handler(w, mask):
        n, address = int(ncols(w)[0]), int(dst(w)[0])
        if cta_group == 1:
            write_address(w.cta, address, w.cta.tmem.alloc(n), w)
            w.cta.grid.progress += 1
            return None

        def complete(first, second):
            ctas = {c.rank: c for c in _pair(w, 2)}
            column = ctas[first.rank].tmem.alloc(n, peer=ctas[second.rank].tmem)
            for request in (first, second):
                write_address(ctas[request.rank], request.destination, column, request.issuer)

        return _pair_operation(w, "alloc", (n,), complete, destination=address)

    return handler


@instruction("tcgen05.dealloc")
def _dealloc(instr, program):
    """tcgen05.dealloc.cta_group.sync.aligned.b32 taddr, ncols (9.7.16.7.1); cta_group::2: in both CTAs."""
    taddr = program.reader(instr.operands[0], "u32")
    ncols = program.reader(instr.operands[1], "u32")
    cta_group = _cta_group(instr)

    def handler(w, mask):
        address, n = int(taddr(w)[0]), int(ncols(w)[0])
        if cta_group == 1:
            _as_warp(w, tcgen05.deallocate, w.cta.tmem, address, n)
            w.cta.grid.progress += 1
            return None

        def complete(first, second):
            ctas = {c.rank: c for c in _pair(w, 2)}
            trace = w.cta.grid.trace
            if trace is not None:  # each half may free the peer's columns too (happens_before.pair_dealloc)
                for request in (first, second):
                    column = tcgen05.split_address(request.operands[0])[1]
                    trace.pair_dealloc(request.issuer, ctas[request.rank ^ 1].tmem, column, request.operands[1])
            for request in (first, second):
                _as_warp(request.issuer, tcgen05.deallocate, ctas[request.rank].tmem, *request.operands)

        return _pair_operation(w, "dealloc", (address, n), complete)

    return handler


@instruction("tcgen05.relinquish_alloc_permit")
def _relinquish(instr, program):
    """tcgen05.relinquish_alloc_permit.cta_group.sync.aligned (9.7.16.7.1): no later tcgen05.alloc in the
    CTA; cta_group::2: in both CTAs of the pair, once both have issued it."""
    cta_group = _cta_group(instr)

    def handler(w, mask):
        if cta_group == 1:
            w.cta.tmem.relinquish()
            return None

        def complete(first, second):
            for cta in _pair(w, 2):
                cta.tmem.relinquish()

        return _pair_operation(w, "relinquish_alloc_permit", (), complete)

    return handler


# --------------------------------------------------------------------------------------------------
# copies, MMA, commit
# --------------------------------------------------------------------------------------------------


@instruction("tcgen05.cp")
def _cp(instr, program):
    """tcgen05.cp.cta_group.shape{.multicast} [taddr], s-desc: shared memory (through a matrix
    descriptor) to tensor memory."""
    mods = instr.modifiers
    shape = next(m for m in mods if "x" in m and m[0].isdigit())
    multicast = next((m for m in mods if m.startswith("warpx")), "")
    if any(m in mods for m in ("b8x16", "b6x16_p32", "b4x16_p64")):
        raise EmulatorError("unimplemented", f"{instr.opcode} (decompressing copies)")
    cta_group = _cta_group(instr)
    taddr = address_reader(program, instr.operands[0])
    sdesc = program.reader(instr.operands[1], "u64")

    def handler(w, mask):
        t, d = taddr(w), sdesc(w)
        for lane in _single_lanes(mask):
            address, desc = int(t[lane]), int(d[lane])
            ctas = _pair(w, cta_group)

            def operation(address=address, desc=desc, ctas=ctas):
                for cta in ctas:
                    tcgen05.tcgen05_cp(cta.tmem, address, _smem_reader(cta), desc, shape, multicast)

            _enqueue(w, operation, {"unit": "tcgen05.cp", "shape": shape, "cta_group": cta_group,
                                    "bytes": tcgen05.cp_source_bytes(shape)})

    return handler


def _block_scale_alias(kind: str, alias: str) -> str:
    """The `.scale_vec::NX` a `.block16` / `.block32` qualifier stands for (ISA 9.7.16.10, tcgen05.mma's
    `.scale_vectorsize`: the aliases name the number of elements along K that share one scale factor; an
    instruction's K is 64 for the FP4 kinds, 32 for mxf8f6f4): `.block16` is `.scale_vec::4X` (mxf4nvf4
    only); `.block32` is `.scale_vec::2X` for mxf4 and mxf4nvf4, `.scale_vec::1X` for mxf8f6f4. nvcc-compiled
    inline asm writes them (gau-nernst's `kind::mxf4nvf4.block_scale.block16`); the DSL writes scale_vec."""
    k = 32 if kind == "mxf8f6f4" else 64
    per = 16 if alias == "block16" else 32
    if k % per or (alias == "block16" and kind != "mxf4nvf4"):
        raise EmulatorError("unimplemented", f"tcgen05.mma kind::{kind} with .{alias}")
    return f"{k // per}X"


@instruction("tcgen05.mma")
def _mma(instr, program):
    """tcgen05.mma.cta_group.kind[.block_scale.scale_vec] [d], a-desc|[a-tmem], b-desc, idesc,
    [scale-A], [scale-B], enable-input-d."""
    mods = instr.modifiers
    kind = next(m.split("::")[1] for m in mods if m.startswith("kind::"))
    if "block_scale" not in mods:
        raise EmulatorError("unimplemented", f"{instr.opcode} (only block-scaled kinds are modelled)")
    scale_vec = next((m.split("::")[1] for m in mods if m.startswith("scale_vec::")), None)
    if "block16" in mods or "block32" in mods:
        scale_vec = _block_scale_alias(kind, "block16" if "block16" in mods else "block32")
    cta_group = _cta_group(instr)
    ops = instr.operands
    if ops[1].kind == "addr":
        raise EmulatorError("unimplemented", f"{instr.opcode} with A in tensor memory")
    if len(ops) != 7:
        raise EmulatorError("unimplemented", f"{instr.opcode}: {len(ops)} operands (disable-output-lane "
                            "masks and collector hints are not modelled)")
    d_addr = address_reader(program, ops[0])
    a_desc, b_desc = program.reader(ops[1], "u64"), program.reader(ops[2], "u64")
    idesc = program.reader(ops[3], "u32")
    sfa_addr, sfb_addr = address_reader(program, ops[4]), address_reader(program, ops[5])
    enable_d = program.reader(ops[6], "pred")

    def handler(w, mask):
        values = [r(w) for r in (d_addr, a_desc, b_desc, idesc, sfa_addr, sfb_addr)]
        accumulate = enable_d(w)
        if w.cta.rank % cta_group:
            raise EmulatorError("tmem", ".cta_group::2 MMA issued by the odd CTA of the pair")
        for lane in _single_lanes(mask):
            d, a, b, i, sfa, sfb = (int(v[lane]) for v in values)
            acc = bool(accumulate[lane])
            ctas = _pair(w, cta_group)

            def operation(d=d, a=a, b=b, i=i, sfa=sfa, sfb=sfb, acc=acc, ctas=ctas):
                tcgen05.mma_block_scaled_instruction(
                    kind=kind, scale_vec=scale_vec, cta_group=cta_group, d_tmem=d, a_desc=a, b_desc=b, idesc=i,
                    sfa_tmem=sfa, sfb_tmem=sfb, accumulate=acc,
                    tmems=[c.tmem for c in ctas], smem_readers=[_smem_reader(c) for c in ctas])

            shape = tcgen05.InstrDescriptor.decode(i)
            _enqueue(w, operation, {"unit": "tcgen05.mma", "m": shape.m, "n": shape.n, "cta_group": cta_group,
                                    "kind": kind})

    return handler


@instruction("tcgen05.commit")
def _commit(instr, program):
    """tcgen05.commit.cta_group.mbarrier::arrive::one.shared::cluster{.multicast::cluster}.b64 [mbar]{, ctaMask}:
    one arrival on the mbarrier (in every CTA of ctaMask) once every tcgen05 async operation this thread
    issued before it has completed."""
    mbar = address_reader(program, instr.operands[0])
    multicast = "multicast::cluster" in instr.modifiers
    cta_mask = program.reader(instr.operands[1], "u16") if multicast else None
    where = program.where(instr.index)

    def handler(w, mask):
        b = mbar(w)
        masks = cta_mask(w) if multicast else None
        _queue(w.cta)
        for lane in _single_lanes(mask):
            rank, offset = split_shared(int(b[lane]))
            if multicast:
                m = int(masks[lane])
                ranks = [r for r in range(len(w.cta.cluster.ctas)) if m >> r & 1]
                if not ranks or m >> len(w.cta.cluster.ctas):
                    raise EmulatorError("mbarrier", f"tcgen05.commit ctaMask 0x{m:x} for a cluster of "
                                        f"{len(w.cta.cluster.ctas)}")
            else:
                ranks = [rank]
            barriers = [mbarrier_at(w, (r << 24) | offset, True)[1] for r in ranks]
            cta, sequence = w.cta, w.cta.tensor_issued

            def deliver(cta=cta, sequence=sequence, barriers=barriers):
                _execute_through(cta, sequence)
                for barrier in barriers:
                    if cta.grid.trace is not None:
                        cta.grid.trace.signal(barrier)
                    barrier.arrive(cta.grid, 1)

            trace = w.cta.grid.trace
            agent = None if trace is None else trace.issue(w, ("tensor pipe", w.cta), f"tensor pipe of {w.cta.label}")
            issue(w.cta.grid, AsyncOp(deliver, barriers, where, agent, unit="tcgen05.commit", cta=cta))

    return handler


# --------------------------------------------------------------------------------------------------
# tensor memory -> registers
# --------------------------------------------------------------------------------------------------


@instruction("tcgen05.ld")
def _ld(instr, program):
    """tcgen05.ld.sync.aligned.shape.num{.pack}.b32 {r...}, [taddr]."""
    mods = instr.modifiers
    if "pack::16b" in mods:
        raise EmulatorError("unimplemented", f"{instr.opcode} (.pack::16b)")
    shape = next(m for m in mods if m[0].isdigit() and m.endswith("b"))
    num = int(next(m for m in mods if m[0] == "x" and m[1:].isdigit())[1:])
    targets = instr.operands[0].items
    writers = [program.writer(t, "b32") for t in targets]
    taddr = address_reader(program, instr.operands[1])

    def handler(w, mask):
        t = taddr(w)
        address = int(t[np.flatnonzero(mask)[0]])
        if (t[mask] != address).any():
            raise EmulatorError("tmem", "tcgen05.ld: the lanes give different tensor memory addresses")
        trace = w.cta.grid.trace
        if trace is not None:
            trace.begin(trace.warp_access(w))
        values = tcgen05.tcgen05_ld(w.cta.tmem, address, shape, num, w.warp_id % 4)
        if trace is not None:
            trace.end()
        if values.shape != (LANES, len(writers)):
            raise EmulatorError("tmem", f"tcgen05.ld {shape}.x{num} yields {values.shape[1]} registers per "
                                f"thread, the instruction names {len(writers)}")
        for k, write in enumerate(writers):
            write(w, values[:, k], mask)

    return handler


@instruction("tcgen05.wait")
def _wait(instr, program):
    """tcgen05.wait::ld / ::st (9.7.16.8.5): loads and stores of tensor memory complete at issue here."""
    return lambda w, mask: None


@instruction("tcgen05.fence")
def _fence(instr, program):
    return lambda w, mask: None


@instruction("tcgen05.st", "tcgen05.shift")
def _not_modelled(instr, program):
    def handler(w, mask):
        raise EmulatorError("unimplemented", f"{instr.opcode} is not modelled (tensor_core.py)")

    return handler


# --------------------------------------------------------------------------------------------------
# stmatrix
# --------------------------------------------------------------------------------------------------


@instruction("stmatrix")
def _stmatrix(instr, program):
    """stmatrix.sync.aligned.m8n8.num{.trans}.shared{::cta}.b16 [p], {r...} (9.7.9.x): each register
    holds two b16 of one 8x8 matrix; lanes 8i..8i+7 give the row addresses of matrix i."""
    mods = instr.modifiers
    if "m8n8" not in mods:
        raise EmulatorError("unimplemented", instr.opcode)
    trans = "trans" in mods
    addr = address_reader(program, instr.operands[0])
    readers = [program.reader(r, "b32") for r in instr.operands[1].items]

    def handler(w, mask):
        addresses, values = tcgen05.stmatrix_m8n8(addr(w), np.stack([r(w) for r in readers], axis=1), trans)
        ranks, offsets = addresses >> 24, addresses & 0xFFFFFF
        if (ranks != w.cta.rank).any():
            raise EmulatorError("shared-bounds", "stmatrix to another CTA's shared memory")
        if (offsets % 2).any():
            raise EmulatorError("misaligned", "stmatrix row address not 2-B aligned")
        w.cta.shared.check(int(offsets.min()), int(offsets.max() - offsets.min()) + 2, "stmatrix")
        if w.cta.grid.trace is not None:
            w.cta.grid.trace.shared(w, w.cta.shared, offsets, 2, True)
        w.cta.shared.data[offsets] = (values & 0xFF).astype(np.uint8)
        w.cta.shared.data[offsets + 1] = (values >> 8).astype(np.uint8)
        w.cta.shared.writes += 1

    return handler
