"""Loads, stores and address conversions: `ld`, `st`, `mapa`, `prefetch`, `createpolicy`.

PTX ISA 9.7.9.8 `ld`, 9.7.9.10 `st`, 9.7.9.21 `mapa`, 9.7.9.15 `prefetch{,.tensormap}`, 9.7.9.18
`createpolicy`. State spaces and their addresses: memory.py. Cache operators, eviction priorities and L2
cache hints are accepted and ignored (the emulator has no caches).

Memory ordering (ISA chapter 8): a load or store with `.relaxed`, `.acquire`, `.release`, `.volatile` or
`.mmio` is strong (8.4; `.volatile` is relaxed at system scope, 8.4.2). Its value is what the emulator's
sequentially consistent memory holds, as for any access; with race detection on, the access is reported
with its `MemoryOrder`, from which happens_before.py decides races (strong accesses do not race with each
other) and synchronization (release and acquire patterns, 8.8). A strong load is also how a warp polls
memory that another agent writes: see `poll`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import EmulatorError
from ..machine import PollWait, Yield
from ..memory import (CTA_RANK_SHIFT, GENERIC_PARAM_BASE, GENERIC_SHARED_BASE, OFFSET_MASK, SHARED_RESERVED_BYTES,
                      WINDOW_MASK, GlobalMemory, SharedMemory, split_shared)
from ..warp import LANES, TYPES, instruction, type_of

SPACES = ("param", "shared", "global", "local", "const")
# ISA 8.5, narrowest first: a scope includes the threads of the same CTA, cluster, GPU, system
SCOPES = {"cta": 1, "cluster": 2, "gpu": 3, "sys": 4}


@dataclass(frozen=True)
class MemoryOrder:
    """The memory-model side of a strong access (ISA 8.4), or of a thread fence: `sem` ('relaxed',
    'acquire', 'release', 'acq_rel'; a fence's also 'sc'), `scope` (SCOPES' code), `element` (the bytes of
    one scalar location: a vector access is one access per element, 8.2.4), whether it `reads` (ld, atom;
    not red, whose read forms no acquire pattern, 8.8), `writes` (st, atom, red) and is `atomic` (atom,
    red: a read-modify-write, which continues a location's release sequence, 8.9.2)."""

    sem: str
    scope: int
    element: int
    reads: bool
    writes: bool
    atomic: bool


def memory_order(instr, element: int) -> MemoryOrder | None:
    """The MemoryOrder of a load, store or atomic, None for a weak access. `atom` and `red` are strong with
    `.relaxed` and `.gpu` by default (9.7.13.5, 9.7.13.6); `ld` and `st` are strong only with a
    qualifier, and then name their scope (8.5)."""
    mods = instr.modifiers
    family = instr.family
    scope = next((SCOPES[m] for m in mods if m in SCOPES), None)
    if family in ("atom", "red"):
        sem = next((m for m in mods if m in ("relaxed", "acquire", "release", "acq_rel")), "relaxed")
        return MemoryOrder(sem, scope or SCOPES["gpu"], element, family == "atom", True, True)
    if "volatile" in mods:
        sem, scope = "relaxed", SCOPES["sys"]
    else:
        sem = next((m for m in mods if m in ("relaxed", "acquire", "release")), None)
        if sem is None:
            return None
        if scope is None:
            raise EmulatorError("unimplemented", f"{instr.opcode}: a strong access names its scope (ISA 8.5)")
    return MemoryOrder(sem, scope, element, family != "st", family == "st", False)


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


def _lanes_access(w, mask, space, addresses, nbytes, kind, data=None, order=None):
    """Read (data None) or write per-lane `nbytes` at `addresses`; fast path for global memory. `order`: the
    MemoryOrder of a strong access, for the race detector."""
    lanes = np.flatnonzero(mask)
    if space == "global" and lanes.size:
        addrs = addresses[lanes]
        bad = addrs % nbytes != 0 if nbytes in (2, 4, 8, 16) else np.zeros(lanes.size, bool)
        if bad.any():
            raise EmulatorError("misaligned", f"{kind} of {nbytes} B at 0x{int(addrs[bad][0]):x}")
        gm = w.cta.grid.global_memory
        if w.cta.grid.trace is not None:
            w.cta.grid.trace.global_lanes(w, addrs, nbytes, data is not None, order)
        if data is None:
            out = np.zeros((LANES, nbytes), np.uint8)
            out[lanes] = gm.lanes_read(addrs, nbytes)
            return out
        gm.lanes_write(addrs, data[lanes])
        return None
    out = np.zeros((LANES, nbytes), np.uint8) if data is None else None
    touched = {} if w.cta.grid.trace is not None else None  # memory object -> offsets, for the race detector
    if data is None and lanes.size:
        one_window = _shared_window(w, space, addresses[lanes], nbytes)
        if one_window is not None:  # every lane reads one CTA's shared memory, in bounds: one gather
            mem, offsets = one_window
            out[lanes] = mem.data[offsets[:, None] + np.arange(nbytes)]
            if touched is not None:
                touched[mem] = offsets.tolist()
                report_accesses(w, touched, nbytes, False, order)
            return out
    read = {}  # address -> (memory, offset, bytes): lanes reading one address (a parameter) read it once
    for lane in lanes.tolist():
        address = int(addresses[lane])
        if data is None:
            hit = read.get(address)
            if hit is None:
                mem, offset = resolve(w, space, address, nbytes, kind)
                hit = read[address] = (mem, offset, mem.read(offset, nbytes))
            mem, offset, out[lane] = hit
        else:
            mem, offset = resolve(w, space, address, nbytes, kind)
            mem.write(offset, data[lane])
        if touched is not None:
            touched.setdefault(mem, []).append(offset)
    if touched:
        report_accesses(w, touched, nbytes, data is not None, order)
    return out


def _shared_window(w, space: str, addresses: np.ndarray, nbytes: int):
    """(SharedMemory, offsets) when every address is an aligned, in-bounds `nbytes` access to one CTA's shared
    memory that `resolve` would allow; else None (and the lanes go one by one, as `resolve` reports)."""
    if space == "generic":
        if ((addresses & np.uint64(WINDOW_MASK)) != np.uint64(GENERIC_SHARED_BASE)).any():
            return None
        addresses = addresses - np.uint64(GENERIC_SHARED_BASE)
        space = "shared::cluster"
    elif not space.startswith("shared"):
        return None
    if nbytes in (2, 4, 8, 16) and (addresses % np.uint64(nbytes)).any():
        return None
    ranks = addresses >> np.uint64(CTA_RANK_SHIFT)
    rank = int(ranks[0])
    if (ranks != ranks[0]).any() or (space in ("shared", "shared::cta") and rank != w.cta.rank) \
            or not 0 <= rank < len(w.cta.cluster.ctas):
        return None
    mem = w.cta.cluster.ctas[rank].shared
    offsets = (addresses & np.uint64(OFFSET_MASK)).astype(np.int64)
    if int(offsets.min()) < SHARED_RESERVED_BYTES or int(offsets.max()) + nbytes > mem.size:
        return None
    return mem, offsets


def report_accesses(w, touched: dict, nbytes: int, write: bool, order=None) -> None:
    """Tell the race detector about a warp's accesses: {memory object: offsets} of `nbytes` each."""
    trace = w.cta.grid.trace
    for mem, offsets in touched.items():
        if isinstance(mem, SharedMemory):
            trace.shared(w, mem, offsets, nbytes, write, order)
        elif isinstance(mem, GlobalMemory):
            trace.global_lanes(w, offsets, nbytes, write, order)


def poll(w, what: str):
    """A warp reaching a strong load polls memory another agent writes (the ISA's only way to read such a
    location without a data race). Back at the same load with nothing written to memory and no
    synchronization event since its previous pass there (`Grid.activity`), it has learnt nothing new:
    - with the same registers, lane PCs and live lanes too, the pass in between is the one it would repeat
      forever: it waits until something changes (machine.PollWait), which changes no outcome, and a poll
      never answered is a hang, reported as every other one, instead of a step budget spent spinning;
    - otherwise (a poll that counts its passes) it lets the other warps run first (machine.Yield).
    Returns the wait, or None."""
    grid = w.cta.grid
    here = (w.last_index, grid.activity())
    previous = w.poll
    w.poll = (here, w.regs.copy(), None if w.lane_pc is None else w.lane_pc.copy(), w.alive.copy())
    if previous is None or previous[0] != here:
        return None
    if not np.array_equal(previous[1], w.regs) or not np.array_equal(previous[3], w.alive) \
            or (previous[2] is None) != (w.lane_pc is None) \
            or (w.lane_pc is not None and not np.array_equal(previous[2], w.lane_pc)):
        return POLLING
    return ("wait", PollWait(grid, here[1], what))


POLLING = ("wait", Yield("polling memory: nothing new since its previous pass"))


@instruction("ld")
def _ld(instr, program):
    """ld{.weak,.relaxed.scope,.acquire.scope,.volatile,.mmio.relaxed.sys}[.ss][.cop][.vec].type d, [a]
    (9.7.9.8). A signed type narrower than 32 bits sign-extends into its register. A strong load
    (`memory_order`) is reported with its order, and may find its warp polling at a fixed point. `.b128`
    (PTX ISA 8.3+) loads 16 bytes into a 128-bit register (two 64-bit halves, warp.Program.high_register)."""
    if "b128" in instr.modifiers:
        return _ld_b128(instr, program)
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
    order = memory_order(instr, size)
    what = f"a strong load of {space} memory"

    def handler(w, mask):
        waits = poll(w, what) if order is not None else None
        raw = _lanes_access(w, mask, space, addr(w), size * count, "load", order=order)
        values = raw.view(dtype).reshape(LANES, count)
        for k, wr in enumerate(writers):
            wr(w, values[:, k], mask)
        return waits

    return handler


def _ld_b128(instr, program):
    space = space_of(instr)
    dst, src = instr.operands[:2]
    if dst.kind != "reg" or _vector_count(instr) != 1 or memory_order(instr, 16) is not None:
        raise EmulatorError("unimplemented", f"{instr.opcode} (a weak .b128 load into one register)")
    low, high = program.register_index[dst.name], program.high_register(dst)
    addr = address_reader(program, src)

    def handler(w, mask):
        raw = _lanes_access(w, mask, space, addr(w), 16, "load")
        halves = np.ascontiguousarray(raw).view(np.uint64).reshape(LANES, 2)
        np.copyto(w.regs[low], halves[:, 0], where=mask)
        np.copyto(w.regs[high], halves[:, 1], where=mask)

    return handler


@instruction("st")
def _st(instr, program):
    """st{.weak,.relaxed.scope,.release.scope,.volatile,.mmio.relaxed.sys}[.ss][.cop][.vec].type [a], b
    (9.7.9.10). A strong store (`memory_order`) is reported with its order."""
    typ = type_of(instr)
    space = space_of(instr)
    count = _vector_count(instr)
    size = np.dtype(TYPES[typ][1]).itemsize
    dst, src = instr.operands[:2]
    sources = src.items if src.kind == "vec" else (src,)
    readers = [program.reader(s, typ) for s in sources]
    addr = address_reader(program, dst)
    unsigned = TYPES[typ][1]
    order = memory_order(instr, size)

    def handler(w, mask):
        data = np.stack([r(w).astype(TYPES[typ][0]).view(unsigned) for r in readers], axis=1)
        _lanes_access(w, mask, space, addr(w), size * count, "store",
                      np.ascontiguousarray(data).view(np.uint8).reshape(LANES, size * count), order)

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
