"""Loads, stores and address conversions: `ld`, `st`, `mapa`, `prefetch`, `createpolicy`.

PTX ISA 9.7.9.8 `ld`, 9.7.9.10 `st`, 9.7.9.21 `mapa`, 9.7.9.15 `prefetch{,.tensormap}`, 9.7.9.18
`createpolicy`. State spaces and their addresses: memory.py. Cache operators, eviction priorities and L2
cache hints are accepted and ignored (the emulator has no caches).
"""

from __future__ import annotations

import numpy as np

from ..errors import EmulatorError
from ..memory import (CTA_RANK_SHIFT, GENERIC_PARAM_BASE, GENERIC_SHARED_BASE, OFFSET_MASK, WINDOW_MASK,
                      GlobalMemory, SharedMemory, split_shared)
from ..warp import LANES, TYPES, instruction, type_of

SPACES = ("param", "shared", "global", "local", "const")


def space_of(instr) -> str:
    for m in instr.modifiers:
        if m in SPACES:
            return m
        if m.startswith("shared::"):
            return m
    return "generic"


def address_reader(program, operand):
    """warp -> per-lane uint64 addresses of an `[base+offset]` operand."""
    base, offset = operand.items[0], operand.items[1]
    if base is None:
        const = np.full(LANES, offset, np.uint64)
        return lambda w: const
    rb = program.reader(base, "u64")
    off = np.uint64(offset & 0xFFFFFFFFFFFFFFFF)
    return lambda w: rb(w) + off


def resolve(w, space: str, address: int, nbytes: int, where_kind: str):
    """(memory object, offset) for one lane's access; raises on misalignment or a bad space."""
    if address % nbytes if nbytes in (2, 4, 8, 16) else False:
        raise EmulatorError("misaligned", f"{where_kind} of {nbytes} B at 0x{address:x} is not {nbytes}-B aligned")
    if space == "generic":
        window = address & WINDOW_MASK
        if window == GENERIC_SHARED_BASE:
            space, address = "shared::cluster", address - GENERIC_SHARED_BASE
        elif window == GENERIC_PARAM_BASE:
            space, address = "param", address - GENERIC_PARAM_BASE
        else:
            space = "global"
    if space == "global":
        return w.cta.grid.global_memory, address
    if space == "param":
        return w.cta.grid.params, address
    if space.startswith("shared"):
        rank, offset = split_shared(address)
        if space in ("shared", "shared::cta") and rank != w.cta.rank:
            raise EmulatorError("shared-bounds", f"{where_kind} through .shared::cta at 0x{address:x}, an "
                                f"address of CTA rank {rank}, from CTA rank {w.cta.rank}")
        return w.cta.cluster.cta(rank, "").shared, offset
    raise EmulatorError("unimplemented", f"{where_kind} in the .{space} state space")


def _vector_count(instr) -> int:
    for m in instr.modifiers:
        if m in ("v2", "v4", "v8"):
            return int(m[1:])
    return 1


def _lanes_access(w, mask, space, addresses, nbytes, kind, data=None):
    """Read (data None) or write per-lane `nbytes` at `addresses`; fast path for global memory."""
    lanes = np.flatnonzero(mask)
    if space == "global" and lanes.size:
        addrs = addresses[lanes]
        bad = addrs % nbytes != 0 if nbytes in (2, 4, 8, 16) else np.zeros(lanes.size, bool)
        if bad.any():
            raise EmulatorError("misaligned", f"{kind} of {nbytes} B at 0x{int(addrs[bad][0]):x}")
        gm = w.cta.grid.global_memory
        if w.cta.grid.trace is not None:
            w.cta.grid.trace.global_lanes(w, addrs, nbytes, data is not None)
        if data is None:
            out = np.zeros((LANES, nbytes), np.uint8)
            out[lanes] = gm.lanes_read(addrs, nbytes)
            return out
        gm.lanes_write(addrs, data[lanes])
        return None
    out = np.zeros((LANES, nbytes), np.uint8) if data is None else None
    touched = {} if w.cta.grid.trace is not None else None  # memory object -> offsets, for the race detector
    for lane in lanes:
        mem, offset = resolve(w, space, int(addresses[lane]), nbytes, kind)
        if data is None:
            out[lane] = mem.read(offset, nbytes)
        else:
            mem.write(offset, data[lane])
        if touched is not None:
            touched.setdefault(mem, []).append(offset)
    if touched:
        _report_accesses(w, touched, nbytes, data is not None)
    return out


def _report_accesses(w, touched: dict, nbytes: int, write: bool) -> None:
    trace = w.cta.grid.trace
    for mem, offsets in touched.items():
        if isinstance(mem, SharedMemory):
            trace.shared(w, mem, offsets, nbytes, write)
        elif isinstance(mem, GlobalMemory):
            trace.global_lanes(w, offsets, nbytes, write)


@instruction("ld")
def _ld(instr, program):
    """ld[.ss][.cop][.vec].type d, [a] (9.7.9.8). A signed type narrower than 32 bits sign-extends into
    its register."""
    typ = type_of(instr)
    space = space_of(instr)
    count = _vector_count(instr)
    size = np.dtype(TYPES[typ][1]).itemsize
    dst, src = instr.operands[:2]
    targets = dst.items if dst.kind == "vec" else (dst,)
    store_type = "s32" if typ in ("s8", "s16") else typ
    writers = [program.writer(t, store_type) for t in targets]
    addr = address_reader(program, src)
    dtype = TYPES[typ][0]

    def handler(w, mask):
        raw = _lanes_access(w, mask, space, addr(w), size * count, "load")
        values = raw.view(dtype).reshape(LANES, count)
        for k, wr in enumerate(writers):
            wr(w, values[:, k], mask)

    return handler


@instruction("st")
def _st(instr, program):
    """st[.ss][.cop][.vec].type [a], b (9.7.9.10)."""
    typ = type_of(instr)
    space = space_of(instr)
    count = _vector_count(instr)
    size = np.dtype(TYPES[typ][1]).itemsize
    dst, src = instr.operands[:2]
    sources = src.items if src.kind == "vec" else (src,)
    readers = [program.reader(s, typ) for s in sources]
    addr = address_reader(program, dst)
    unsigned = TYPES[typ][1]

    def handler(w, mask):
        data = np.stack([r(w).astype(TYPES[typ][0]).view(unsigned) for r in readers], axis=1)
        _lanes_access(w, mask, space, addr(w), size * count, "store",
                      np.ascontiguousarray(data).view(np.uint8).reshape(LANES, size * count))

    return handler


@instruction("mapa")
def _mapa(instr, program):
    """mapa.shared::cluster.u32 d, a, rank (9.7.9.21): the same offset in CTA `rank`'s window."""
    if "shared::cluster" not in instr.modifiers:
        raise EmulatorError("unimplemented", f"{instr.opcode} (generic addresses)")
    typ = type_of(instr)
    d, a, b = instr.operands[:3]
    write, ra, rb = program.writer(d, typ), program.reader(a, "u64"), program.reader(b, "u32")

    def handler(w, mask):
        ranks = rb(w).astype(np.uint64)
        if (ranks[mask] >= len(w.cta.cluster.ctas)).any():
            raise EmulatorError("shared-bounds", f"mapa to CTA rank {int(ranks[mask].max())} of a cluster of "
                                f"{len(w.cta.cluster.ctas)}")
        write(w, (ra(w) & np.uint64(OFFSET_MASK)) | (ranks << np.uint64(CTA_RANK_SHIFT)), mask)

    return handler


@instruction("prefetch", "prefetchu")
def _prefetch(instr, program):
    """prefetch[.space].level / prefetch.tensormap [a] (9.7.9.15): no caches to fill; the address must
    still be valid (a tensormap in param or global memory)."""
    addr = address_reader(program, instr.operands[0])
    tensormap = "tensormap" in instr.modifiers
    space = space_of(instr)

    def handler(w, mask):
        for lane in np.flatnonzero(mask):
            mem, offset = resolve(w, space, int(addr(w)[lane]), 1, "prefetch")
            if tensormap:
                if offset % 64:
                    raise EmulatorError("misaligned", f"prefetch.tensormap at 0x{int(addr(w)[lane]):x}: a "
                                        "tensormap is 64-B aligned")
                mem.read(offset, 128)

    return handler


@instruction("createpolicy")
def _createpolicy(instr, program):
    """createpolicy (9.7.9.18): an opaque 64-bit cache policy; the emulator ignores policies."""
    write = program.writer(instr.operands[0], "b64")
    token = np.full(LANES, 0x1CACE, np.uint64)
    return lambda w, mask: write(w, token, mask)


@instruction("discard", "applypriority")
def _cache_only(instr, program):
    return lambda w, mask: None
