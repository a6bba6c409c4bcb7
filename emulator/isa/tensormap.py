"""Tensor maps patched on the device: `tensormap.replace`, `tensormap.cp_fenceproxy` and the tensormap proxy
fences `fence.proxy.tensormap::generic.{release,acquire}`.

PTX ISA 9.7.9.26 `tensormap.replace` (Data Movement and Conversion Instructions) rewrites one field of a
128-byte tensor map (`.b1024`) in place, in `.global` or `.shared::cta` memory; 9.7.9.27
`tensormap.cp_fenceproxy` copies a 128-byte map from shared to global memory and fences the generic-proxy
copy against later tensormap-proxy reads (`.release`); 9.7.13.4 (`fence`, `fence.proxy.tensormap::generic`)
orders generic-proxy writes of a map before the TMA unit's tensormap-proxy reads of it (release at the
writer, acquire at the reader, `[addr], 128` naming the map).

The ISA calls the map opaque: which bits a field occupies is emulator/tma.py's measured layout, and
`replace` writes the field the way that layout decodes it, so a patched map copies exactly as one the
host encoded with the same values:
| field (`.field`)      | operand         | where (tma.py's table)                                            |
|-----------------------|-----------------|-------------------------------------------------------------------|
| `.global_address`     | new_val .b64    | word 0 bits 4-56: the address (16-byte aligned, below 2^57)       |
| `.global_dim` ord     | new_val .b32    | size - 1 of dim ord (ord 0..4): words 4, 5 (32 bits each), word 6 |
| `.global_stride` ord  | new_val .b64    | stride of dim ord + 1 in bytes (a multiple of 16, below 2^40),    |
|                       |                 | >> 4: low 32 bits in word 1 high / word 2 / word 3 low, bits 32-35 |
|                       |                 | in word 3 bits 32 + 4 ord                                         |
The other fields (`.rank`, `.box_dim`, `.element_stride`, `.elemtype`, `.interleave_layout`,
`.swizzle_mode`, `.swizzle_atomicity`, `.fill_mode`) are refused as unimplemented: no kernel we run
patches them. A dim or stride beyond the map's rank is written all the same: NVIDIA's grouped example
patches dims 0-4 and strides 0-3 of every map whatever its rank (the kernel that runs on B200s wins over
any reading of the ISA's text that would refuse it), and a copy reads only the map's rank.

The emulator is sequentially consistent and the TMA unit reads the map from memory at every copy
(isa/bulk_copy.py), so the fences and the copy's `.release` have no functional effect; each checks its
operands (a global 128-byte map, 64-byte aligned). The race detector sees the copy's shared read and
global write as the warp's generic accesses; it does not model the tensormap proxy (the TMA unit's read
of a map is not an access it records), so a missing tensormap fence is not caught (DESIGN.md).
"""

from __future__ import annotations

import numpy as np

from ..errors import EmulatorError
from ..memory import GlobalMemory, SharedMemory
from ..warp import instruction
from .memory_ops import address_reader, resolve

MAP_BYTES = 128
MAP_ALIGN = 64  # what the TMA unit accepts (isa/bulk_copy.py); `replace` and the copy ask for it too
ADDRESS_BITS = 57  # word 0 holds address bits 4-56
STRIDE_SLOTS = ((1, 32), (2, 0), (2, 32), (3, 0))  # (word, low bit) of each stride's low 32 bits (>> 4)
DIM_SLOTS = ((4, 0), (4, 32), (5, 0), (5, 32), (6, 0))  # (word, low bit) of each dim's size - 1
MASK32 = 0xFFFF_FFFF


def _field(instr) -> str:
    for m in instr.modifiers:
        if m in ("global_address", "global_dim", "global_stride", "rank", "box_dim", "element_stride",
                 "elemtype", "interleave_layout", "swizzle_mode", "swizzle_atomicity", "fill_mode"):
            return m
    raise EmulatorError("unimplemented", f"{instr.opcode}: no field named")


def _space(instr) -> str:
    if "shared::cta" in instr.modifiers:
        return "shared::cta"
    if "global" in instr.modifiers:
        return "global"
    raise EmulatorError("unimplemented", f"{instr.opcode}: a tensor map in generic memory")


def _patch(words: list, field: str, ordinal: int, value: int) -> None:
    """Write `value` into `field` (of dim or stride `ordinal`) of the map's 64-bit `words`, as tma.py
    decodes it; raise on a value the ISA's constraints refuse."""
    if field == "global_address":
        if value % 16 or value >> ADDRESS_BITS:
            raise EmulatorError("misaligned", f"tensormap.replace.global_address 0x{value:x}: a global address "
                                "is 16-byte aligned and below 2^57")
        field_mask = ((1 << (ADDRESS_BITS - 4)) - 1) << 4
        words[0] = (words[0] & ~field_mask) | value
    elif field == "global_dim":
        if not 0 <= ordinal < len(DIM_SLOTS) or not 1 <= value <= 1 << 32:
            raise EmulatorError("tensormap", f"tensormap.replace.global_dim ord {ordinal}, size {value}: dims 0..4 "
                                "of 1..2^32 elements")
        word, low = DIM_SLOTS[ordinal]
        words[word] = (words[word] & ~(MASK32 << low)) | ((value - 1) << low)
    elif field == "global_stride":
        if not 0 <= ordinal < len(STRIDE_SLOTS) or value % 16 or value >> 40:
            raise EmulatorError("tensormap", f"tensormap.replace.global_stride ord {ordinal}, {value} B: strides "
                                "0..3 (of dims 1..4), multiples of 16 bytes below 2^40")
        units = value >> 4
        word, low = STRIDE_SLOTS[ordinal]
        words[word] = (words[word] & ~(MASK32 << low)) | ((units & MASK32) << low)
        high_low = 32 + 4 * ordinal
        words[3] = (words[3] & ~(0xF << high_low)) | ((units >> 32) << high_low)
    else:
        raise EmulatorError("unimplemented", f"tensormap.replace.{field}")
    for i, word in enumerate(words):
        words[i] = word & 0xFFFF_FFFF_FFFF_FFFF


def _map_at(w, space: str, address: int, what: str):
    """(memory, offset) of a 128-byte map at `address` in `space`, checked for alignment."""
    if address % MAP_ALIGN:
        raise EmulatorError("misaligned", f"{what}: tensor map at 0x{address:x} is not {MAP_ALIGN}-B aligned")
    return resolve(w, space, address, 1, what)


def _record(w, mem, offset: int, write: bool) -> None:
    """The warp's access of a whole map, for the race detector: as 16 accesses of 8 bytes (one per word,
    so every granule of the map is covered)."""
    trace = w.cta.grid.trace
    if trace is None:
        return
    words = offset + np.arange(0, MAP_BYTES, 8)
    if isinstance(mem, SharedMemory):
        trace.shared(w, mem, words, 8, write)
    elif isinstance(mem, GlobalMemory):
        trace.global_lanes(w, words.astype(np.uint64), 8, write)


@instruction("tensormap.replace")
def _replace(instr, program):
    """tensormap.replace.tile.field.space.b1024.type [addr], [ord,] new_val: each active lane rewrites the
    field of the map at its address (lanes that name the same map write it in turn)."""
    if "tile" not in instr.modifiers:
        raise EmulatorError("unimplemented", f"{instr.opcode}: only .tile maps are modeled")
    field, space = _field(instr), _space(instr)
    operands = instr.operands
    address = address_reader(program, operands[0])
    ordinal = program.reader(operands[1], "u32") if len(operands) == 3 else None
    value = program.reader(operands[-1], "u64" if field in ("global_address", "global_stride") else "u32")

    def handler(w, mask):
        addresses, values = address(w), value(w)
        ordinals = ordinal(w) if ordinal is not None else None
        for lane in np.flatnonzero(mask):
            mem, offset = _map_at(w, space, int(addresses[lane]), instr.opcode)
            words = [int(x) for x in mem.read(offset, MAP_BYTES).view(np.uint64)]
            _patch(words, field, int(ordinals[lane]) if ordinals is not None else 0, int(values[lane]))
            mem.write(offset, np.array(words, np.uint64).view(np.uint8))
            _record(w, mem, offset, True)

    return handler


@instruction("tensormap.cp_fenceproxy")
def _copy_and_fence(instr, program):
    """tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.scope.sync.aligned [dst], [src],
    128: the warp copies the map at shared `src` to global `dst` (every lane names the same pair:
    `.sync.aligned`), then releases it to the tensormap proxy (no functional effect)."""
    if "global" not in instr.modifiers or "shared::cta" not in instr.modifiers:
        raise EmulatorError("unimplemented", f"{instr.opcode}: only shared::cta to global is modeled")
    dst, src, size = instr.operands[:3]
    destination, source = address_reader(program, dst), address_reader(program, src)
    nbytes = program.reader(size, "u32")

    def handler(w, mask):
        lanes = np.flatnonzero(mask)
        if not lanes.size:
            return
        dsts, srcs, sizes = destination(w)[lanes], source(w)[lanes], nbytes(w)[lanes]
        if (dsts != dsts[0]).any() or (srcs != srcs[0]).any():
            raise EmulatorError("divergent", f"{instr.opcode}: .sync.aligned lanes name different maps")
        if int(sizes[0]) != MAP_BYTES:
            raise EmulatorError("tensormap", f"{instr.opcode}: size {int(sizes[0])}, a tensor map is 128 bytes")
        smem, soff = _map_at(w, "shared::cta", int(srcs[0]), instr.opcode)
        gmem, goff = _map_at(w, "global", int(dsts[0]), instr.opcode)
        data = smem.read(soff, MAP_BYTES)
        _record(w, smem, soff, False)
        gmem.write(goff, data)
        _record(w, gmem, goff, True)

    return handler


@instruction("fence.proxy.tensormap::generic")
def _tensormap_fence(instr, program):
    """fence.proxy.tensormap::generic.{release,acquire}.scope [addr, size]: no functional effect (module
    docstring); the acquire's operands must name a 128-byte map in global memory."""
    if not instr.operands:
        return lambda w, mask: None
    address = address_reader(program, instr.operands[0])
    size = program.reader(instr.operands[1], "u32")

    def handler(w, mask):
        lanes = np.flatnonzero(mask)
        for lane in lanes[:1]:
            if int(size(w)[lane]) != MAP_BYTES:
                raise EmulatorError("tensormap", f"{instr.opcode}: size {int(size(w)[lane])}, a map is 128 bytes")
            _map_at(w, "global", int(address(w)[lane]), instr.opcode)

    return handler
