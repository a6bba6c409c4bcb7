"""Bulk tensor copies (TMA): `cp.async.bulk.tensor`, bulk groups.

PTX ISA 9.7.9.25.5.1 `cp.async.bulk.tensor`, 9.7.9.25.4.1 `cp.async.bulk` (1-D, global to shared),
9.7.9.25.5.2/3 `cp.async.bulk.commit_group` / `cp.async.bulk.wait_group`. The box layout, swizzle and out-of-bounds fill are tma.py's; this module decides
where the bytes go and which mbarriers are signalled:

- **load, unicast** (`.shared::cluster.global ... .mbarrier::complete_tx::bytes`): the box lands at
  `[dstMem]` (a shared::cluster address: any CTA of the cluster) and the mbarrier at `[mbar]` receives
  complete-tx of the box's bytes. With `.cta_group::1` (or none) the mbarrier must be in the destination
  CTA; with `.cta_group::2` it may be in the destination CTA or its peer (the CTA whose rank differs in
  bit 0).
- **load, `.multicast::cluster`**: the box lands at the same CTA-relative offset in every CTA of
  `ctaMask`, and each destination signals the mbarrier at `[mbar]`'s CTA-relative offset: in that
  destination CTA (`.cta_group::1`), or with `.cta_group::2` in the CTA of the destination's pair that
  `[mbar]` names (its peer bit taken from `[mbar]`'s rank). NVIDIA's 2-CTA multicast form decided the
  second reading where the ISA's words leave room.
- **store** (`.global.shared::cta ... .bulk_group`): the box is read from the CTA's shared memory and
  written to global memory, out-of-bounds elements skipped; it belongs to the thread's current bulk group.
  `wait_group N` (with or without `.read`) returns once at most N of the thread's groups are pending: the
  emulator completes the older ones then (in the timed mode the warp waits until they complete) (the `.read` variant's distinction, source read vs. writes
  visible, is not modelled: both happen at once).
- **1-D load** (`cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [src], size,
  [mbar]`): `size` contiguous bytes (a multiple of 16; both addresses 16-byte aligned) from global memory
  to `[dst]`, complete-tx of `size` on `[mbar]`, which must be in the destination CTA.
- **`.shared::cta` destination** (PTX ISA 8.6: `cp.async.bulk.tensor.Nd.shared::cta.global...{.cta_group}`
  and `cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes`, no multicast form): as the
  shared::cluster load, with `[dstMem]` a shared::cta address, so in the executing CTA (an address of
  another CTA's window is an error, as a `.shared::cta` access there is); the mbarrier rule is the same
  (with `.cta_group::2`, the executing CTA or its peer). gau-nernst's v1, v2 and v2e issue these.
- **prefetch to L2** (`cp.async.bulk.prefetch.tensor.Nd.L2.global{.tile} [tensorMap, {coords}]`,
  `cp.async.bulk.prefetch.L2.global [src], size`): nothing observable; the map and box (or the address and
  size) are checked as a load's; the timed mode brings the bytes into L2 (clock.Clock.prefetch).
Not modelled: im2col and gather/scatter modes, `.reduce` (cp.reduce.async.bulk.tensor), the other 1-D
bulk copy forms (multicast, shared to global, shared::cta to shared::cluster): each is an error naming the
form.
"""

from __future__ import annotations

import numpy as np

from .. import tma
from ..async_ops import AsyncOp, issue
from ..errors import EmulatorError
from ..machine import AsyncOpsWait
from ..memory import split_shared
from ..warp import instruction
from .memory_ops import address_reader, resolve
from .sync_ops import mbarrier_at


def _tensor_map(w, address: int):
    mem, offset = resolve(w, "generic", address, 1, "tensormap read")
    if offset % 64:
        raise EmulatorError("misaligned", f"tensormap at 0x{address:x} is not 64-B aligned")
    return tma.decode_tensor_map(mem.read(offset, 128).tobytes())


def _maps(w, copies_at_issue: bool = True):
    """address -> TensorMap, for the lanes of one instruction: each lane reads its map; lanes naming one
    address share one read unless a lane's copy may be performed at its issue (eager mode), before the next
    lane reads its map."""
    if copies_at_issue and w.cta.grid.mode == "eager":
        return lambda address: _tensor_map(w, address)
    maps = {}

    def read(address: int):
        tmap = maps.get(address)
        if tmap is None:
            tmap = maps[address] = _tensor_map(w, address)
        return tmap

    return read


# (map bytes, box, shared address, store) of the copies check_copy passed: its verdict is a function of these,
# and the lanes of a warp-wide TMA instruction repeat one copy
_CHECKED: set = set()
_CHECKED_LIMIT = 1 << 16


def _check(tmap, box, smem_address: int, store: bool) -> None:
    """What the copy will fault on, raised at issue (where the PTX line is known)."""
    key = (tmap.raw, box, smem_address, store)
    if key in _CHECKED:
        return
    try:
        tma.check_copy(tmap, box, smem_address, store)
    except NotImplementedError as e:
        raise EmulatorError("unimplemented", f"TMA: {e}") from None
    if len(_CHECKED) >= _CHECKED_LIMIT:
        _CHECKED.clear()
    _CHECKED.add(key)


def _coords(program, vector):
    """warp -> each lane's box coordinates (32 tuples of ints): the registers are read once per instruction."""
    readers = [program.reader(c, "s32") for c in vector.items]
    return lambda w: list(zip(*(r(w).tolist() for r in readers)))


def _tiled(mods) -> bool:
    """The copy is in tile mode: `.tile` named, or no load mode at all. ISA 9.7.9.25.5.1 gives the syntax
    `cp.async.bulk.tensor.dim.dst.src{.load_mode}.completion_mechanism...` with `.load_mode = { .tile,
    .tile::gather4, .im2col, .im2col::w, .im2col::w::128 }` optional and `.tile` the default: the DSL names
    it, nvcc's inline asm (CUTLASS's and hand-written) usually does not."""
    return not any(m.startswith(("im2col", "tile::")) for m in mods)


@instruction("cp.async.bulk.tensor")
def _bulk_tensor(instr, program):
    mods = instr.modifiers
    destination, source = instr.opcode.split(".")[5:7]  # cp.async.bulk.tensor.Nd.dst.src...
    if not _tiled(mods):
        raise EmulatorError("unimplemented", f"{instr.opcode} (only .tile mode)")
    if destination == "global":  # a store
        return _store(instr, program)
    if destination not in ("shared::cluster", "shared::cta") or source != "global" \
            or "mbarrier::complete_tx::bytes" not in mods or (destination == "shared::cta" and "multicast::cluster" in mods):
        raise EmulatorError("unimplemented", instr.opcode)
    return _load(instr, program, own_cta=destination == "shared::cta")


def _own_cta(w, address: int, what: str) -> None:
    """A .shared::cta destination must lie in the executing CTA's window."""
    rank = split_shared(address)[0]
    if rank != w.cta.rank:
        raise EmulatorError("shared-bounds", f"{what} into .shared::cta at 0x{address:x}, an address of CTA rank "
                            f"{rank}'s window, not the executing CTA's (rank {w.cta.rank})")


def _load(instr, program, own_cta: bool = False):
    mods = instr.modifiers
    ops = instr.operands
    dst = address_reader(program, ops[0])
    tmap_addr = address_reader(program, ops[1])
    coords = _coords(program, ops[1].items[2])
    mbar = address_reader(program, ops[2])
    multicast = "multicast::cluster" in mods
    mask_reader = program.reader(ops[3], "u16") if multicast else None
    pair = "cta_group::2" in mods
    where = program.where(instr.index)

    def handler(w, lane_mask):
        d, t, b = dst(w).tolist(), tmap_addr(w).tolist(), mbar(w).tolist()
        ctamask = mask_reader(w).tolist() if multicast else None
        boxes, map_at = coords(w), _maps(w)
        for lane in np.flatnonzero(lane_mask).tolist():
            tmap = map_at(t[lane])
            box = boxes[lane]
            if own_cta:
                _own_cta(w, d[lane], "TMA load")
            d_rank, d_offset = split_shared(d[lane])
            b_rank, b_offset = split_shared(b[lane])
            if multicast:
                m = ctamask[lane]
                targets = [r for r in range(len(w.cta.cluster.ctas)) if m >> r & 1]
                if not targets or m >> len(w.cta.cluster.ctas):
                    raise EmulatorError("tma", f"ctaMask 0x{m:x} for a cluster of {len(w.cta.cluster.ctas)} CTAs")
            else:
                targets = [d_rank]
            deliveries = []
            for rank in targets:
                if pair:
                    bar_rank = (rank & ~1) | (b_rank & 1) if multicast else b_rank
                    if bar_rank >> 1 != rank >> 1:
                        raise EmulatorError("tma", f".cta_group::2 load into CTA rank {rank} signals an mbarrier "
                                            f"in CTA rank {bar_rank}, outside its pair")
                else:
                    bar_rank = rank if multicast else b_rank
                    if bar_rank != rank:
                        raise EmulatorError("tma", f"load into CTA rank {rank} signals an mbarrier in CTA rank "
                                            f"{bar_rank} (without .cta_group::2 it must be the same CTA)")
                cta = w.cta.cluster.cta(rank, where)
                bar_address = (bar_rank << 24) | b_offset
                _, barrier = mbarrier_at(w, bar_address, True)
                deliveries.append((cta, barrier))
            gm = w.cta.grid.global_memory
            nbytes = tma.box_bytes(tmap)
            _check(tmap, box, d[lane], store=False)
            for cta, _ in deliveries:
                cta.shared.check(d_offset, nbytes, "TMA load destination")

            def deliver(tmap=tmap, box=box, deliveries=deliveries, d_offset=d_offset, gm=gm):
                trace = w.cta.grid.trace
                for cta, barrier in deliveries:
                    if w.cta.grid.timing_only:  # the clock's fast path: the bytes are counted, not moved
                        barrier.complete_tx(w.cta.grid, nbytes)
                        continue
                    address = (cta.rank << 24) | d_offset
                    data, count = tma.load_box(tmap, box, gm.read, address)
                    cta.shared.write(d_offset, data)
                    if trace is not None:
                        trace.shared_range(cta.shared, d_offset, data.size, True)
                        trace.signal(barrier)
                    barrier.complete_tx(w.cta.grid, count)

            trace = w.cta.grid.trace
            agent = None if trace is None else trace.issue(
                w, ("TMA load", w, tuple(id(b) for _, b in deliveries)), f"TMA load unit for {w.label}")
            issue(w.cta.grid, AsyncOp(deliver, [b for _, b in deliveries], where, agent, unit="tma.load",
                                      nbytes=nbytes, cta=w.cta, key=tma.box_key(tmap, box), tiled=True))

    return handler


def _store(instr, program):
    ops = instr.operands
    tmap_addr = address_reader(program, ops[0])
    coords = _coords(program, ops[0].items[2])
    src = address_reader(program, ops[1])
    if "bulk_group" not in instr.modifiers:
        raise EmulatorError("unimplemented", f"{instr.opcode} (only bulk-group completion)")
    where = program.where(instr.index)

    def handler(w, lane_mask):
        t, s = tmap_addr(w).tolist(), src(w).tolist()
        boxes, map_at = coords(w), _maps(w)
        copies = {}  # the lanes issuing one copy (the same map, box and source) check it once
        for lane in np.flatnonzero(lane_mask).tolist():
            tmap = map_at(t[lane])
            box = boxes[lane]
            key = (t[lane], s[lane], box, id(tmap))
            copy = copies.get(key)
            if copy is None:
                rank, offset = split_shared(s[lane])
                if rank != w.cta.rank:
                    raise EmulatorError("shared-bounds", f"TMA store source 0x{s[lane]:x} is not in this CTA")
                nbytes = tma.box_bytes(tmap)
                _check(tmap, box, s[lane], store=True)
                w.cta.shared.check(offset, nbytes, "TMA store source")
                copy = copies[key] = (tmap, nbytes, _store_delivery(w, tmap, box, offset, s[lane], nbytes))
            _, nbytes, deliver = copy
            trace = w.cta.grid.trace
            agent = None if trace is None else trace.issue(w, ("TMA store", w), f"TMA store unit for {w.label}")
            op = AsyncOp(deliver, (), where, agent, unit="tma.store", nbytes=nbytes, cta=w.cta,
                         key=(t[lane], box))
            w.bulk_open.setdefault(lane, []).append(op)
            issue(w.cta.grid, op)

    return handler


def _store_delivery(w, tmap, box, offset: int, address: int, nbytes: int):
    """What a TMA store does when delivered: the box read from shared memory at `offset` written to global
    memory (nothing in the timed mode's fast path)."""
    gm = w.cta.grid.global_memory

    def deliver():
        if w.cta.grid.timing_only:
            return
        trace = w.cta.grid.trace
        if trace is None:
            tma.store_box(tmap, box, w.cta.shared.read(offset, nbytes), address, gm.write)
            return
        trace.shared_range(w.cta.shared, offset, nbytes, False)
        spans = []

        def write(a, data):
            spans.append((a, data.nbytes))
            gm.write(a, data)

        tma.store_box(tmap, box, w.cta.shared.read(offset, nbytes), address, write)
        trace.global_writes(spans)

    return deliver


@instruction("cp.async.bulk.commit_group")
def _commit_group(instr, program):
    def handler(w, mask):
        for lane in np.flatnonzero(mask):
            w.bulk_groups.setdefault(int(lane), []).append(w.bulk_open.pop(int(lane), []))

    return handler


@instruction("cp.async.bulk.wait_group")
def _wait_group(instr, program):
    limit = instr.operands[0].value

    def handler(w, mask):
        timed = w.cta.grid.clock is not None
        waiting = []
        for lane in np.flatnonzero(mask):
            groups = w.bulk_groups.get(int(lane), [])
            while len(groups) > limit:
                group = groups.pop(0)
                for op in group:
                    if timed:
                        waiting += [op] if not op.delivered else []
                    else:
                        op.deliver(w.cta.grid)
                if w.cta.grid.trace is not None:
                    w.cta.grid.trace.bulk_wait(w, [op.agent for op in group])
        return ("wait", AsyncOpsWait("cp.async.bulk.wait_group", waiting, "TMA store(s)")) if waiting else None

    return handler


@instruction("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes",
             "cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes")
def _bulk_load(instr, program):
    """1-D bulk copy, global to shared::cluster (or the executing CTA's shared::cta), completing on an mbarrier
    (module docstring)."""
    own_cta = instr.opcode.split(".")[3] == "shared::cta"
    dst, src = address_reader(program, instr.operands[0]), address_reader(program, instr.operands[1])
    size = program.reader(instr.operands[2], "u32")
    mbar = address_reader(program, instr.operands[3])
    where = program.where(instr.index)

    def handler(w, lane_mask):
        d, g, n, b = dst(w), src(w), size(w), mbar(w)
        for lane in np.flatnonzero(lane_mask):
            nbytes, source = int(n[lane]), int(g[lane])
            if own_cta:
                _own_cta(w, int(d[lane]), "cp.async.bulk")
            d_rank, d_offset = split_shared(int(d[lane]))
            if nbytes % 16 or source % 16 or d_offset % 16:
                raise EmulatorError("misaligned", f"cp.async.bulk of {nbytes} B from 0x{source:x} to shared "
                                    f"0x{int(d[lane]):x}: size and addresses must be multiples of 16")
            if split_shared(int(b[lane]))[0] != d_rank:
                raise EmulatorError("tma", f"cp.async.bulk into CTA rank {d_rank} signals an mbarrier in another "
                                    "CTA")
            cta = w.cta.cluster.cta(d_rank, where)
            _, barrier = mbarrier_at(w, int(b[lane]), True)
            cta.shared.check(d_offset, nbytes, "cp.async.bulk destination")
            gm = w.cta.grid.global_memory

            def deliver(cta=cta, d_offset=d_offset, source=source, nbytes=nbytes, barrier=barrier, gm=gm):
                if not cta.grid.timing_only:
                    cta.shared.write(d_offset, gm.read(source, nbytes))
                    trace = cta.grid.trace
                    if trace is not None:
                        trace.shared_range(cta.shared, d_offset, nbytes, True)
                        trace.signal(barrier)
                barrier.complete_tx(cta.grid, nbytes)

            trace = w.cta.grid.trace
            agent = None if trace is None else trace.issue(w, ("TMA load", w, (id(barrier),)),
                                                           f"TMA load unit for {w.label}")
            issue(w.cta.grid, AsyncOp(deliver, [barrier], where, agent, unit="tma.load", nbytes=nbytes, cta=w.cta,
                                      key=(source, nbytes)))

    return handler


@instruction("cp.async.bulk.prefetch.tensor")
def _prefetch_tensor(instr, program):
    """cp.async.bulk.prefetch.tensor.{1-5}d.L2.global{.tile}{.L2::cache_hint} [tensorMap, {coords}]{, policy}
    (9.7.9.25.5.3): the box a tiled load at `coords` would read, brought into L2. No shared memory, no
    mbarrier, nothing a thread can observe: the map and the box are checked as a load's are (a copy the
    hardware faults on is an error at issue); the timed mode brings the box's bytes into L2
    (clock.Clock.prefetch), so that a later load of it hits."""
    if not _tiled(instr.modifiers):
        raise EmulatorError("unimplemented", f"{instr.opcode} (only .tile mode)")
    if "L2" not in instr.modifiers or "global" not in instr.modifiers:
        raise EmulatorError("unimplemented", instr.opcode)
    operand = instr.operands[0]
    tmap_addr = address_reader(program, operand)
    coords = _coords(program, operand.items[2])

    def handler(w, lane_mask):
        t = tmap_addr(w).tolist()
        boxes, map_at = coords(w), _maps(w, copies_at_issue=False)
        for lane in np.flatnonzero(lane_mask).tolist():
            tmap = map_at(t[lane])
            box = boxes[lane]
            _check(tmap, box, 0, store=False)
            if w.cta.grid.clock is not None:
                w.cta.grid.clock.prefetch(w, tma.box_key(tmap, box), tma.box_bytes(tmap), tiled=True)

    return handler


@instruction("cp.async.bulk.prefetch.L2.global")
def _prefetch_bulk(instr, program):
    """cp.async.bulk.prefetch.L2.global{.L2::cache_hint} [srcMem], size{, policy} (9.7.9.25.4.3): `size`
    bytes (a multiple of 16) at a 16-byte aligned global address brought into L2; checked as a 1-D bulk
    load's source (inside a registered region); timed: as prefetch.tensor, keyed as the 1-D load of the same
    bytes."""
    src = address_reader(program, instr.operands[0])
    size = program.reader(instr.operands[1], "u32")

    def handler(w, lane_mask):
        g, n = src(w), size(w)
        for lane in np.flatnonzero(lane_mask):
            nbytes, source = int(n[lane]), int(g[lane])
            if nbytes % 16 or source % 16:
                raise EmulatorError("misaligned", f"cp.async.bulk.prefetch of {nbytes} B at 0x{source:x}: size and "
                                    "address must be multiples of 16")
            memory, offset = resolve(w, "global", source, 16, "cp.async.bulk.prefetch")
            if memory.region(offset, nbytes) is None:
                raise EmulatorError("global-bounds", f"cp.async.bulk.prefetch of {nbytes} B at 0x{source:x}: not "
                                    "inside one registered region")
            if w.cta.grid.clock is not None:
                w.cta.grid.clock.prefetch(w, (source, nbytes), nbytes)

    return handler


@instruction("cp.async.bulk", "cp.reduce.async.bulk")
def _bulk_other(instr, program):
    def handler(w, mask):
        raise EmulatorError("unimplemented", f"{instr.opcode} is not modelled (bulk_copy.py)")

    return handler
