"""Cluster launch control: `clusterlaunchcontrol.try_cancel` and `clusterlaunchcontrol.query_cancel` (sm_100+).

PTX ISA, Parallel Synchronization and Communication Instructions: `clusterlaunchcontrol.try_cancel`
(9.7.13.17 in ISA 9.0; anchor parallel-synchronization-and-communication-instructions-clusterlaunchcontrol-
try-cancel) and `clusterlaunchcontrol.query_cancel` (9.7.13.18), introduced in PTX ISA 8.6 for sm_100:

    clusterlaunchcontrol.try_cancel.async{.shared::cta}.mbarrier::complete_tx::bytes{.multicast::cluster::all}.b128
        [addr], [mbar];
    clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 p, response;
    clusterlaunchcontrol.query_cancel.get_first_ctaid.v4.b32.b128 {x, y, z, _}, response;
    clusterlaunchcontrol.query_cancel.get_first_ctaid::{x,y,z}.b32.b128 d, response;

What the ISA says, and what the emulator does with it:
- try_cancel "requests atomically cancelling the launch of a cluster that has not started running yet"; it
  "asynchronously writes an opaque response to shared memory indicating whether the operation succeeded or
  failed"; on success the response holds the ctaid of the first CTA of the cancelled cluster, and "no other
  successful response from other clusterlaunchcontrol.try_cancel operations from the same grid will contain
  that id". The emulator: the request is an asynchronous operation (async_ops.AsyncOp, unit "clc"); when it
  is delivered, the grid decides (machine.Grid.try_cancel: timed, the clock's dispatch queue; eager, the
  first cluster in launch order none of whose warps has run; adversarial, a random such one, and sometimes
  none), the cancelled cluster's warps are done before their first instruction, and the 16-byte response is
  written. The ISA promises no success, so a failure when clusters are left is allowed (adversarial mode
  uses that); when nothing is left to cancel the response says "not cancelled".
- `.mbarrier::complete_tx::bytes`: on completion, complete-tx of the bytes written (16) on `[mbar]`. The
  instruction performs no arrive and no expect-tx: the kernel's own `mbarrier.arrive.expect_tx` must expect
  the 16 bytes (CUTLASS's PipelineClcFetchAsync does; without it the phase's tx-count goes below zero and
  the phase never completes: a hang).
- `.shared::cta` (or generic addresses that must fall in the shared::cta window): `addr` 16-byte aligned,
  `mbar` 8-byte aligned, both in the executing CTA; otherwise "the result is undefined": an error here.
- `.multicast::cluster::all`: the response is written "using weak async-proxy writes to the corresponding
  local shared memory addr of each CTA in the requesting cluster", and each CTA's write completes on the
  mbarrier at `mbar`'s offset in that CTA.
- "If the executing CTA has already observed the completion of a clusterlaunchcontrol.try_cancel
  instruction as failed, then issuing a subsequent try_cancel instruction results in undefined behavior":
  an error here (observed: a query_cancel.is_canceled of a failure response by a warp of the CTA).
- The response is written by the async proxy; the race detector sees it as a TMA load's write (an agent per
  issuing warp and mbarrier, releasing through the complete-tx): a read of the response not ordered after
  the mbarrier wait, or a try_cancel that overwrites a response some warp reads without an order in between,
  is a race.
- An mbarrier object is opaque and touched only through mbarrier instructions (ISA 9.7.13.15.1): a response
  whose 16 bytes cover an initialized mbarrier is an error at issue.
- query_cancel decodes a response held in a `.b128` register (warp.Program.high_register): is_canceled
  sets the predicate; get_first_ctaid returns the first CTA's x, y, z (the `.v4` form's fourth element is
  left as it was). Of a failed request the ISA leaves get_first_ctaid's result undefined; the DSL's
  `cute.arch.clc_response` (CUTLASS's ClcDynamicPersistentTileScheduler) calls it whatever the outcome and
  ignores the result, so here it is no error: it returns 0xFFFFFFFF (the kernels that run on B200s win).
  A value no try_cancel wrote (uninitialized shared memory, any other 16 bytes) is an error.

The response's layout is the emulator's (the ISA calls it opaque): four 32-bit words, x, y, z of the first
CTA and a tag, 0xC1C00001 for "cancelled", 0xC1C00000 for "not cancelled" (x, y, z then 0xFFFFFFFF).

Timed mode (clock.py): the response lands `clc_response_latency` after issue (machines/b200.py; no public
figure: an estimate), the cancellation decided then against the dispatch queue.
"""

from __future__ import annotations

import numpy as np

from ..async_ops import AsyncOp, issue
from ..errors import EmulatorError
from ..warp import instruction
from .memory_ops import address_reader, resolve

RESPONSE_BYTES = 16
TAG = 0xC1C00000
CANCELLED = 1
UNDEFINED = 0xFFFFFFFF


def response(ctaid) -> np.ndarray:
    """The 16 bytes of a response: the first CTA's ctaid, or (None) "not cancelled"."""
    if ctaid is None:
        return np.array([UNDEFINED, UNDEFINED, UNDEFINED, TAG], np.uint32).view(np.uint8)
    x, y, z = ctaid
    return np.array([x, y, z, TAG | CANCELLED], np.uint32).view(np.uint8)


def decode(low: np.ndarray, high: np.ndarray):
    """(tag, x, y, z) per lane of a response held as two 64-bit halves."""
    return (high >> np.uint64(32), low & np.uint64(0xFFFFFFFF), low >> np.uint64(32), high & np.uint64(0xFFFFFFFF))


def _shared_cta(w, space: str, address: int, nbytes: int, what: str) -> int:
    """The shared::cta offset of `address` (a `.shared::cta` address, or a generic one that must fall in the
    shared window), in the executing CTA."""
    memory, offset = resolve(w, "shared::cta" if space == "shared::cta" else "generic", address, nbytes, what)
    if memory is not w.cta.shared:
        raise EmulatorError("clc", f"{what} at 0x{address:x} is not in the executing CTA's shared memory (the ISA "
                            "leaves the result undefined)")
    return offset


@instruction("clusterlaunchcontrol.try_cancel")
def _try_cancel(instr, program):
    mods = instr.modifiers
    if "async" not in mods or "mbarrier::complete_tx::bytes" not in mods or "b128" not in mods:
        raise EmulatorError("unimplemented", instr.opcode)
    space = "shared::cta" if "shared::cta" in mods else "generic"
    multicast = "multicast::cluster::all" in mods
    addr = address_reader(program, instr.operands[0])
    mbar = address_reader(program, instr.operands[1])
    where = program.where(instr.index)

    def handler(w, lane_mask):
        a, b = addr(w), mbar(w)
        grid = w.cta.grid
        for lane in np.flatnonzero(lane_mask):
            if w.cta.clc_failed is not None:
                raise EmulatorError("clc", f"{w.cta.label} issues clusterlaunchcontrol.try_cancel after it observed "
                                    f"one fail ({w.cta.clc_failed}): undefined behaviour (PTX ISA, try_cancel)")
            offset = _shared_cta(w, space, int(a[lane]), RESPONSE_BYTES, "clusterlaunchcontrol.try_cancel response")
            bar_offset = _shared_cta(w, space, int(b[lane]), 8, "clusterlaunchcontrol.try_cancel mbarrier")
            ctas = w.cta.cluster.ctas if multicast else [w.cta]
            deliveries = []
            for cta in ctas:
                cta.shared.check(offset, RESPONSE_BYTES, "clusterlaunchcontrol.try_cancel response")
                for other in cta.mbarriers:
                    if other < offset + RESPONSE_BYTES and offset < other + 8:
                        raise EmulatorError("clc", f"the 16-byte response at shared 0x{(cta.rank << 24) | offset:x} "
                                            f"covers the mbarrier at 0x{(cta.rank << 24) | other:x} of {cta.label} "
                                            "(an mbarrier object is accessed only by mbarrier instructions)")
                deliveries.append((cta, cta.mbarrier(bar_offset, where)))

            def deliver(deliveries=deliveries, offset=offset):
                cancelled = grid.try_cancel()
                data = response(None if cancelled is None else cancelled.ctas[0].ctaid)
                trace = grid.trace
                for target, barrier in deliveries:
                    target.shared.write(offset, data)
                    if trace is not None:
                        trace.shared_range(target.shared, offset, RESPONSE_BYTES, True)
                        trace.signal(barrier)
                    barrier.complete_tx(grid, RESPONSE_BYTES)

            trace = grid.trace
            agent = None if trace is None else trace.issue(
                w, ("CLC", w, tuple(id(bar) for _, bar in deliveries)), f"cluster launch control for {w.label}")
            issue(grid, AsyncOp(deliver, [bar for _, bar in deliveries], where, agent, unit="clc",
                                nbytes=RESPONSE_BYTES, cta=w.cta))

    return handler


@instruction("clusterlaunchcontrol.query_cancel")
def _query_cancel(instr, program):
    mods = instr.modifiers
    dst, src = instr.operands[:2]
    if src.kind != "reg" or "b128" not in mods:
        raise EmulatorError("unimplemented", instr.opcode)
    low, high = program.register_index[src.name], program.high_register(src)
    where = program.where(instr.index)
    if "is_canceled" in mods:
        write = program.writer(dst, "pred")
        fields = None
    elif "get_first_ctaid" in mods and dst.kind == "vec":
        fields = [(k, program.writer(x, "b32")) for k, x in enumerate(dst.items[:3])]
    elif any(m.startswith("get_first_ctaid::") for m in mods):
        axis = next(m for m in mods if m.startswith("get_first_ctaid::")).split("::")[1]
        fields = [({"x": 0, "y": 1, "z": 2}[axis], program.writer(dst, "b32"))]
    else:
        raise EmulatorError("unimplemented", instr.opcode)

    def handler(w, mask):
        tag, x, y, z = decode(w.regs[low], w.regs[high])
        foreign = mask & (tag & np.uint64(~CANCELLED & 0xFFFFFFFF) != np.uint64(TAG))
        if foreign.any():
            lane = int(np.flatnonzero(foreign)[0])
            raise EmulatorError("clc", f"clusterlaunchcontrol.query_cancel of a value no try_cancel wrote (lane {lane}: "
                                f"0x{int(w.regs[high][lane]):016x}{int(w.regs[low][lane]):016x})")
        cancelled = (tag & np.uint64(CANCELLED)) != 0
        if fields is None:
            write(w, cancelled, mask)
            if (mask & ~cancelled).any() and w.cta.clc_failed is None:
                w.cta.clc_failed = where
            return None
        values = (x, y, z)
        for k, wr in fields:
            wr(w, np.where(cancelled, values[k], np.uint64(UNDEFINED)), mask)
        return None

    return handler

