"""Atomic read-modify-writes of global and shared memory: `atom` and `red`.

PTX ISA 9.7.13.5 `atom`, 9.7.13.6 `red`: `atom{.sem}{.scope}{.space}.op{.L2::cache_hint}.type d, [a], b{, c}
{, cache-policy}` and `red{.sem}{.scope}{.space}.op{.L2::cache_hint}.type [a], b{, cache-policy}`, the space
`.global`, `.shared{::cta, ::cluster}` or none (a generic address resolving to either, memory_ops.resolve).
Each lane's operation is one atomic step on its location; the lanes of a warp are performed one after
another in lane order, so lanes naming one location each see the value the lane before left (the ISA orders
a warp's lanes in no particular way: lane order is one order the hardware may choose, and it keeps runs
reproducible). Both are strong operations (ISA 8.4), `.relaxed` and `.gpu` unless qualified; the access is
reported to the race detector with its memory_ops.MemoryOrder, an atom's as a read and a write, a red's as a
write (its read forms no acquire pattern, ISA 8.8). The cache policy operand is a hint and is ignored.

Operations (on the raw bits of `.type`): add (integers wrap; f32 and f64 round to nearest even, and
`add.f32` on global memory flushes subnormal inputs and results to sign-preserving zero, as the ISA says
the current implementation does), and, or, xor, exch, cas, inc and dec (u32: `(r >= b) ? 0 : r + 1` and
`(r == 0 || r > b) ? b : r - 1`), min and max (signed for .s32/.s64). Not modelled, each an error naming the
instruction: the vector and packed forms (`.v2/.v4/.v8`, f16/bf16 `.noftz`), `.b16` and `.b128` cas/exch,
`red.async`.
"""

from __future__ import annotations

import numpy as np

from ..errors import EmulatorError
from ..memory import GlobalMemory
from ..warp import LANES, TYPES, from_raw, instruction, to_raw, type_of
from .memory_ops import address_reader, memory_order, report_accesses, resolve, space_of

OPERATIONS = ("add", "and", "or", "xor", "exch", "cas", "inc", "dec", "min", "max")
UNMODELLED = ("async", "noftz", "v2", "v4", "v8", "b16", "b128", "f16", "bf16", "f16x2", "bf16x2")
F32_SMALLEST_NORMAL = np.finfo(np.float32).tiny


def _flush_subnormal(x: np.float32) -> np.float32:
    return np.float32(np.copysign(0.0, x)) if abs(x) < F32_SMALLEST_NORMAL else x


def _operation(op: str, typ: str, flush: bool):
    """(old bits, b bits, c bits) -> new bits, for one location of `typ`; `flush`: a location in global
    memory, where add.f32 flushes subnormals."""
    bits = np.dtype(TYPES[typ][1]).itemsize * 8
    mask = (1 << bits) - 1
    signed = typ.startswith("s")

    def value(raw: int) -> int:
        return raw - (1 << bits) if signed and raw >> (bits - 1) else raw

    if op == "add" and typ in ("f32", "f64"):
        dtype, unsigned = TYPES[typ]
        flush = flush and typ == "f32"  # the ISA says so of add.f32 only

        def float_add(r, b, c):
            x, y = np.array([r, b], unsigned).view(dtype)
            if flush:
                x, y = _flush_subnormal(x), _flush_subnormal(y)
            total = x + y
            if flush:
                total = _flush_subnormal(total)
            return int(np.array([total], dtype).view(unsigned)[0])

        return float_add
    return {
        "add": lambda r, b, c: (r + b) & mask,
        "and": lambda r, b, c: r & b,
        "or": lambda r, b, c: r | b,
        "xor": lambda r, b, c: r ^ b,
        "exch": lambda r, b, c: b,
        "cas": lambda r, b, c: c if r == b else r,
        "inc": lambda r, b, c: 0 if r >= b else r + 1,
        "dec": lambda r, b, c: b if r == 0 or r > b else r - 1,
        "min": lambda r, b, c: r if value(r) <= value(b) else b,
        "max": lambda r, b, c: r if value(r) >= value(b) else b,
    }[op]


@instruction("atom", "red")
def _atomic(instr, program):
    """atom (9.7.13.5) and red (9.7.13.6): see the module docstring."""
    mods = instr.modifiers
    if any(m in UNMODELLED for m in mods):
        raise EmulatorError("unimplemented", f"{instr.opcode} (vector, packed, 16- or 128-bit, or async "
                            "atomics are not modelled)")
    op = next((m for m in mods if m in OPERATIONS), None)
    typ = type_of(instr)
    floating = typ.startswith("f")
    if op is None or (floating and op not in ("add", "exch", "cas")) or (op in ("inc", "dec") and typ != "u32"):
        raise EmulatorError("unimplemented", f"{instr.opcode}: no such atomic operation on .{typ}")
    reduction = instr.family == "red"
    operands = list(instr.operands)
    if "L2::cache_hint" in mods:
        operands.pop()  # the cache-policy operand
    if reduction:
        destination, location, sources = None, operands[0], operands[1:]
    else:
        destination, location, sources = operands[0], operands[1], operands[2:]
    expected = 2 if op == "cas" else 1
    if len(sources) != expected:
        raise EmulatorError("unimplemented", f"{instr.opcode}: {len(sources)} source operands, {expected} expected")
    size = np.dtype(TYPES[typ][1]).itemsize
    space = space_of(instr)
    addr = address_reader(program, location)
    readers = [program.reader(s, typ) for s in sources]
    write = program.writer(destination, typ) if destination is not None else None
    order = memory_order(instr, size)
    kind = instr.family
    combine = {True: _operation(op, typ, flush=True), False: _operation(op, typ, flush=False)}  # global or not

    def handler(w, mask):
        addresses = addr(w)
        operand_bits = [to_raw(r(w), typ) for r in readers]
        old = np.zeros(LANES, np.uint64)
        touched = {}
        for lane in np.flatnonzero(mask).tolist():
            memory, offset = resolve(w, space, int(addresses[lane]), size, kind)
            before = int.from_bytes(memory.read(offset, size).tobytes(), "little")
            b = int(operand_bits[0][lane])
            c = int(operand_bits[1][lane]) if op == "cas" else 0
            after = combine[isinstance(memory, GlobalMemory)](before, b, c)
            memory.write(offset, np.frombuffer(after.to_bytes(size, "little"), np.uint8))
            old[lane] = before
            touched.setdefault(memory, []).append(offset)
        if touched and w.cta.grid.trace is not None:
            report_accesses(w, touched, size, True, order)
        if write is not None:
            write(w, from_raw(old, typ), mask)

    return handler
