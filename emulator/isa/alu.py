"""Integer, floating-point, logic, comparison, conversion, move and control instructions.

PTX ISA 9.7.1 (integer arithmetic), 9.7.3 (floating point), 9.7.6 (comparison and selection), 9.7.7
(logic and shift), 9.7.9.x `mov`, `cvt`, `prmt`, 9.7.12 (control flow). Every instruction works on the
32 lanes at once; masked-off lanes keep their registers.
"""

from __future__ import annotations

import numpy as np

from ..errors import EmulatorError
from ..warp import BRANCH, EXIT, LANES, TYPES, instruction, type_of

# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------


def _bits(typ: str) -> int:
    return np.dtype(TYPES[typ][1]).itemsize * 8


def _wide(values, typ):
    """Integers as Python-width-safe int64/uint64 arrays (for products and shifts)."""
    return values.astype(np.int64) if TYPES[typ][0](0).dtype.kind == "i" else values.astype(np.uint64)


def _binary(fn):
    """Factory for `op.type d, a, b` with `fn(a, b, typ)`. Integer vectors wrap without a word from NumPy;
    a float overflow to infinity is the ISA's result too, and NumPy is told not to warn about it."""

    def factory(instr, program):
        typ = type_of(instr)
        d, a, b = instr.operands[:3]
        write, ra, rb = program.writer(d, typ), program.reader(a, typ), program.reader(b, typ)

        if not _float(typ):
            return lambda w, mask: write(w, fn(ra(w), rb(w), typ), mask)

        def handler(w, mask):
            with np.errstate(over="ignore"):
                write(w, fn(ra(w), rb(w), typ), mask)

        return handler

    return factory


def _unary(fn):
    def factory(instr, program):
        typ = type_of(instr)
        d, a = instr.operands[:2]
        write, ra = program.writer(d, typ), program.reader(a, typ)

        if not _float(typ):
            return lambda w, mask: write(w, fn(ra(w), typ), mask)

        def handler(w, mask):
            with np.errstate(over="ignore"):
                write(w, fn(ra(w), typ), mask)

        return handler

    return factory


# --------------------------------------------------------------------------------------------------
# integer and float arithmetic
# --------------------------------------------------------------------------------------------------


def _float(typ):
    return TYPES[typ][0](0).dtype.kind == "f"


@instruction("add")
def _add(instr, program):
    return _binary(lambda a, b, t: a + b)(instr, program)


@instruction("sub")
def _sub(instr, program):
    return _binary(lambda a, b, t: a - b)(instr, program)


@instruction("min")
def _min(instr, program):
    return _binary(lambda a, b, t: np.minimum(a, b))(instr, program)


@instruction("max")
def _max(instr, program):
    return _binary(lambda a, b, t: np.maximum(a, b))(instr, program)


@instruction("neg")
def _neg(instr, program):
    return _unary(lambda a, t: -a)(instr, program)


@instruction("abs")
def _abs(instr, program):
    return _unary(lambda a, t: np.abs(a))(instr, program)


def _f16x2(fn):
    """Factory for `op.rn.f16x2 d, a, b` (9.7.4 half precision): each 16-bit half of a and b, low with
    low and high with high, through `fn` in float32 (exact for a product or sum of two f16 values), then
    rounded once to f16, nearest even. A register's halves are viewed in place, the low one first (the
    host is little-endian, as every byte view of the emulator's memory assumes)."""

    def factory(instr, program):
        d, a, b = instr.operands[:3]
        write, ra, rb = program.writer(d, "b32"), program.reader(a, "b32"), program.reader(b, "b32")

        def handler(w, mask):
            x = ra(w).view(np.float16).astype(np.float32)  # 64 halves: lane 0 low, lane 0 high, lane 1 low...
            y = rb(w).view(np.float16).astype(np.float32)
            with np.errstate(over="ignore", invalid="ignore"):
                halves = fn(x, y).astype(np.float16)
            write(w, halves.view(np.uint32), mask)

        return handler

    return factory


@instruction("mul")
def _mul(instr, program):
    """mul{.lo,.hi,.wide}.type (9.7.1.3); mul.f32 (9.7.3.3); mul.rn.f16x2 (9.7.4.3)."""
    mods = instr.modifiers
    if "f16x2" in mods:
        if "rn" not in mods or "ftz" in mods or "sat" in mods:
            raise EmulatorError("unimplemented", instr.opcode)
        return _f16x2(lambda a, b: a * b)(instr, program)
    typ = type_of(instr)
    if _float(typ):
        return _binary(lambda a, b, t: a * b)(instr, program)
    bits = _bits(typ)
    signed = typ.startswith("s")
    if "wide" in mods:
        wide = {"s16": "s32", "u16": "u32", "s32": "s64", "u32": "u64"}[typ]
        d, a, b = instr.operands[:3]
        write, ra, rb = program.writer(d, wide), program.reader(a, typ), program.reader(b, typ)
        return lambda w, mask: write(w, _wide(ra(w), typ) * _wide(rb(w), typ), mask)
    if "hi" in mods:
        d, a, b = instr.operands[:3]
        write, ra, rb = program.writer(d, typ), program.reader(a, typ), program.reader(b, typ)

        def hi(w, mask):
            x = [int(v) for v in ra(w)]
            y = [int(v) for v in rb(w)]
            out = np.array([(p * q) >> bits for p, q in zip(x, y)], dtype=object)
            write(w, np.array([int(v) & ((1 << bits) - 1) for v in out], dtype=np.uint64), mask)

        if bits <= 32:
            def hi(w, mask):  # noqa: F811 - the 32-bit case fits int64/uint64 products
                p = _wide(ra(w), typ) * _wide(rb(w), typ)
                write(w, (p >> 32) if signed else (p >> np.uint64(32)), mask)
        return hi
    return _binary(lambda a, b, t: a * b)(instr, program)


@instruction("mad")
def _mad(instr, program):
    """mad{.lo,.wide}.type d, a, b, c (9.7.1.4); mad/fma.f32 (9.7.3.5)."""
    typ = type_of(instr)
    d, a, b, c = instr.operands[:4]
    if _float(typ):
        return _fma(instr, program)
    if "hi" in instr.modifiers:
        raise EmulatorError("unimplemented", "mad.hi")
    if "wide" in instr.modifiers:
        wide = {"s16": "s32", "u16": "u32", "s32": "s64", "u32": "u64"}[typ]
        write, ra, rb, rc = (program.writer(d, wide), program.reader(a, typ), program.reader(b, typ),
                             program.reader(c, wide))

        return lambda w, mask: write(w, _wide(ra(w), typ) * _wide(rb(w), typ) + rc(w), mask)  # integer: wraps
    write, ra, rb, rc = (program.writer(d, typ), program.reader(a, typ), program.reader(b, typ),
                         program.reader(c, typ))
    return lambda w, mask: write(w, ra(w) * rb(w) + rc(w), mask)  # integer vectors wrap silently


@instruction("fma")
def _fma(instr, program):
    """fma.rnd.f32/f64 d, a, b, c (9.7.3.5): the product and sum rounded once (float64 then the type)."""
    typ = type_of(instr)
    d, a, b, c = instr.operands[:4]
    write, ra, rb, rc = (program.writer(d, typ), program.reader(a, typ), program.reader(b, typ),
                         program.reader(c, typ))
    return lambda w, mask: write(w, (ra(w).astype(np.float64) * rb(w) + rc(w)).astype(TYPES[typ][0]), mask)


def _divide(kind):
    def factory(instr, program):
        typ = type_of(instr)
        d, a, b = instr.operands[:3]
        write, ra, rb = program.writer(d, typ), program.reader(a, typ), program.reader(b, typ)

        def handler(w, mask):
            x, y = ra(w), rb(w)
            if _float(typ):
                write(w, x / y, mask)
                return
            if (y[mask] == 0).any():
                raise EmulatorError("arith", f"integer {kind} by zero")
            y = np.where(y == 0, 1, y)
            q = np.trunc(x.astype(np.float64) / y).astype(np.int64) if typ.startswith("s") else x // y
            write(w, q if kind == "div" else x - q * y, mask)

        return handler

    return factory


instruction("div")(_divide("div"))
instruction("rem")(_divide("rem"))


# --------------------------------------------------------------------------------------------------
# logic and shifts
# --------------------------------------------------------------------------------------------------


@instruction("and")
def _and(instr, program):
    return _binary(lambda a, b, t: a & b)(instr, program)


@instruction("or")
def _or(instr, program):
    return _binary(lambda a, b, t: a | b)(instr, program)


@instruction("xor")
def _xor(instr, program):
    return _binary(lambda a, b, t: a ^ b)(instr, program)


@instruction("not")
def _not(instr, program):
    return _unary(lambda a, t: ~a)(instr, program)


@instruction("cnot")
def _cnot(instr, program):
    return _unary(lambda a, t: (a == 0).astype(a.dtype))(instr, program)


def _shift(left: bool):
    """shl/shr (9.7.7.x): the shift amount is an unsigned 32-bit value; amounts past the width give 0
    (or the sign for shr.s)."""

    def factory(instr, program):
        typ = type_of(instr)
        bits = _bits(typ)
        d, a, b = instr.operands[:3]
        write, ra, rb = program.writer(d, typ), program.reader(a, typ), program.reader(b, "u32")
        signed = typ.startswith("s")
        if b.kind == "imm":  # a constant amount (most shifts): the same bits, without the per-lane clamping
            amount = min(int(rb(None)[0]), bits)
            if signed and not left:
                shift = np.int64(min(amount, 63))
                return lambda w, mask: write(w, ra(w).astype(np.int64) >> shift, mask)
            if amount >= bits:
                zeros = np.zeros(LANES, np.uint64)
                zeros.setflags(write=False)
                return lambda w, mask: write(w, zeros, mask)
            shift = np.uint64(amount)
            if left:
                return lambda w, mask: write(w, ra(w).astype(np.uint64) << shift, mask)
            return lambda w, mask: write(w, ra(w).astype(np.uint64) >> shift, mask)

        def handler(w, mask):
            x = ra(w)
            n = np.minimum(rb(w).astype(np.int64), bits)
            if left:
                wide = x.astype(np.uint64)
                out = np.where(n >= bits, 0, wide << np.minimum(n, bits - 1).astype(np.uint64))
            elif signed:
                out = x.astype(np.int64) >> np.minimum(n, 63)
            else:
                out = np.where(n >= bits, 0, x.astype(np.uint64) >> np.minimum(n, bits - 1).astype(np.uint64))
            write(w, out, mask)

        return handler

    return factory


instruction("shl")(_shift(True))
instruction("shr")(_shift(False))


@instruction("popc")
def _popc(instr, program):
    typ = type_of(instr)
    d, a = instr.operands[:2]
    write, ra = program.writer(d, "u32"), program.reader(a, typ)
    return lambda w, mask: write(w, np.array([bin(int(v)).count("1") for v in ra(w)], np.uint32), mask)


@instruction("bfe")
def _bfe(instr, program):
    """bfe.type d, a, pos, len (9.7.1.17)."""
    typ = type_of(instr)
    bits = _bits(typ)
    d, a, b, c = instr.operands[:4]
    write, ra, rb, rc = (program.writer(d, typ), program.reader(a, typ), program.reader(b, "u32"),
                         program.reader(c, "u32"))

    def handler(w, mask):
        out = []
        for x, p, n in zip(ra(w), rb(w), rc(w)):
            x, p, n = int(x), min(int(p) & 0xFF, bits), min(int(n) & 0xFF, bits)
            ux = x & ((1 << bits) - 1)
            v = (ux >> p) & ((1 << n) - 1) if n else 0
            if typ.startswith("s") and n:
                sign = (ux >> min(p + n - 1, bits - 1)) & 1
                if sign:
                    v |= ((1 << bits) - 1) ^ ((1 << n) - 1)
            out.append(v)
        write(w, np.array(out, np.uint64), mask)

    return handler


@instruction("bfi")
def _bfi(instr, program):
    typ = type_of(instr)
    bits = _bits(typ)
    d, f, b, p, n = instr.operands[:5]
    write, rf, rb, rp, rn = (program.writer(d, typ), program.reader(f, typ), program.reader(b, typ),
                             program.reader(p, "u32"), program.reader(n, "u32"))

    def handler(w, mask):
        out = []
        for fv, bv, pv, nv in zip(rf(w), rb(w), rp(w), rn(w)):
            pv, nv = min(int(pv) & 0xFF, bits), min(int(nv) & 0xFF, bits)
            m = (((1 << nv) - 1) << pv) & ((1 << bits) - 1)
            out.append((int(bv) & ~m | (int(fv) << pv) & m) & ((1 << bits) - 1))
        write(w, np.array(out, np.uint64), mask)

    return handler


@instruction("prmt")
def _prmt(instr, program):
    """prmt.b32 d, a, b, c (9.7.9.7), default mode: byte k of d is byte c[4k+2:4k] of {b, a}, replicated
    sign when c[4k+3] is set."""
    if len(instr.modifiers) > 1:
        raise EmulatorError("unimplemented", f"{instr.opcode} (only the default mode)")
    d, a, b, c = instr.operands[:4]
    write, ra, rb, rc = (program.writer(d, "b32"), program.reader(a, "b32"), program.reader(b, "b32"),
                         program.reader(c, "b32"))

    def selectors(w):
        """(per lane, the source byte of each byte of d (32, 4); whether it replicates that byte's sign)"""
        nibbles = (rc(w)[:, None] >> _NIBBLES) & np.uint32(0xF)
        return nibbles & np.uint32(7), (nibbles & np.uint32(8)) != 0

    if c.kind == "imm":  # a constant selector (the usual): the same bytes every time
        constant = selectors(None)
        sign = bool(constant[1].any())
        selectors = lambda w: constant  # noqa: E731
    else:
        sign = True

    def handler(w, mask):
        source = np.empty((LANES, 2), np.uint32)  # {b, a}: bytes 0-3 are a's, 4-7 b's (little-endian)
        source[:, 0], source[:, 1] = ra(w), rb(w)
        picks, replicate = selectors(w)
        out = source.view(np.uint8)[_LANE_ROWS, picks]  # (32, 4)
        if sign:
            out = np.where(replicate, np.where(out & 0x80, np.uint8(0xFF), np.uint8(0)), out).astype(np.uint8)
        write(w, np.ascontiguousarray(out).view(np.uint32).reshape(LANES), mask)

    return handler


_NIBBLES = np.array([0, 4, 8, 12], np.uint32)
_LANE_ROWS = np.arange(LANES)[:, None]


# lop3's 3-input table split on a (Shannon): d = (a & F1(b, c)) | (~a & F0(b, c)), each half a 2-input table
# (bit (2 b + c) of the 4-bit F): the 16 functions of two inputs, as the few bitwise operations each takes
_TWO_INPUT = (
    lambda y, z: np.zeros_like(y), lambda y, z: ~(y | z), lambda y, z: ~y & z, lambda y, z: ~y,
    lambda y, z: y & ~z, lambda y, z: ~z, lambda y, z: y ^ z, lambda y, z: ~(y & z),
    lambda y, z: y & z, lambda y, z: ~(y ^ z), lambda y, z: z.copy(), lambda y, z: ~y | z,
    lambda y, z: y.copy(), lambda y, z: y | ~z, lambda y, z: y | z, lambda y, z: ~np.zeros_like(y),
)


@instruction("lop3")
def _lop3(instr, program):
    """lop3.b32 d, a, b, c, immLut (9.7.7.6): bit i of d is bit (4 a_i + 2 b_i + c_i) of immLut."""
    d, a, b, c, lut = instr.operands[:5]
    write, ra, rb, rc = (program.writer(d, "b32"), program.reader(a, "b32"), program.reader(b, "b32"),
                         program.reader(c, "b32"))
    table = lut.value & 0xFF
    high, low = _TWO_INPUT[table >> 4], _TWO_INPUT[table & 0xF]

    def handler(w, mask):
        x, y, z = ra(w), rb(w), rc(w)
        if high is low:  # d does not depend on a
            write(w, low(y, z), mask)
        else:
            write(w, (x & high(y, z)) | (~x & low(y, z)), mask)

    return handler


# --------------------------------------------------------------------------------------------------
# comparison and selection
# --------------------------------------------------------------------------------------------------

_COMPARE = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal, "hi": np.greater, "hs": np.greater_equal,
}


@instruction("setp")
def _setp(instr, program):
    """setp.CmpOp[.BoolOp].type p[|q], a, b[, c] (9.7.6.1)."""
    mods = instr.modifiers
    typ = type_of(instr)
    cmp = _COMPARE.get(mods[0])
    if cmp is None:
        raise EmulatorError("unimplemented", instr.opcode)
    boolop = next((m for m in mods[1:] if m in ("and", "or", "xor")), None)
    dst = instr.operands[0]
    ra, rb = program.reader(instr.operands[1], typ), program.reader(instr.operands[2], typ)
    rc = program.reader(instr.operands[3], "pred") if boolop else None
    if dst.kind == "pair":
        wp, wq = program.writer(dst.items[0], "pred"), program.writer(dst.items[1], "pred")
    else:
        wp, wq = program.writer(dst, "pred"), None
    combine = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.get(boolop)

    def handler(w, mask):
        t = cmp(ra(w), rb(w))
        p, q = t, ~t
        if combine is not None:
            c = rc(w)
            p, q = combine(t, c), combine(~t, c)
        wp(w, p, mask)
        if wq is not None:
            wq(w, q, mask)

    return handler


@instruction("selp")
def _selp(instr, program):
    typ = type_of(instr)
    d, a, b, c = instr.operands[:4]
    write, ra, rb, rc = (program.writer(d, typ), program.reader(a, typ), program.reader(b, typ),
                         program.reader(c, "pred"))
    return lambda w, mask: write(w, np.where(rc(w), ra(w), rb(w)), mask)


# --------------------------------------------------------------------------------------------------
# moves and conversions
# --------------------------------------------------------------------------------------------------


@instruction("mov")
def _mov(instr, program):
    """mov.type d, a (9.7.9.1): register, immediate, special register, or the address of a variable;
    with a vector on one side (9.7.9.2) it packs or unpacks the bits, lowest element in the low bits."""
    d, a = instr.operands[:2]
    if "b128" in instr.modifiers:
        return _mov_b128(program, d, a)
    typ = type_of(instr)
    bits = _bits(typ)
    if d.kind == "vec":
        n = len(d.items)
        part = f"b{bits // n}"
        ra = program.reader(a, f"b{bits}")
        writers = [program.writer(x, part) for x in d.items]

        def unpack(w, mask):
            v = ra(w).astype(np.uint64)
            for k, wr in enumerate(writers):
                wr(w, (v >> np.uint64(k * bits // n)) & np.uint64((1 << (bits // n)) - 1), mask)

        return unpack
    if a.kind == "vec":
        n = len(a.items)
        part = f"b{bits // n}"
        readers = [program.reader(x, part) for x in a.items]
        write = program.writer(d, f"b{bits}")

        def pack(w, mask):
            v = np.zeros(LANES, np.uint64)
            for k, rd in enumerate(readers):
                v |= rd(w).astype(np.uint64) << np.uint64(k * bits // n)
            write(w, v, mask)

        return pack
    write = program.writer(d, typ)
    if typ == "pred":
        ra = program.reader(a, "pred")
    else:
        ra = program.reader(a, typ)
    return lambda w, mask: write(w, ra(w), mask)


def _mov_b128(program, d, a):
    """mov.b128 d, {lo, hi} / mov.b128 {lo, hi}, a / mov.b128 d, a (9.7.9.1, 9.7.9.2; PTX ISA 8.3+): a 128-bit
    register is two 64-bit halves here (Program.high_register), the vector's first element the low half."""
    def halves(operand):
        if operand.kind == "vec":
            if len(operand.items) != 2:
                raise EmulatorError("unimplemented", f"mov.b128 with a {len(operand.items)}-element vector")
            return [(program.reader(x, "b64"), program.writer(x, "b64")) for x in operand.items]
        high = program.high_register(operand)
        low = program.register_index[operand.name]

        def read(index):
            return lambda w: w.regs[index].copy()

        def write(index):
            return lambda w, values, mask: np.copyto(w.regs[index], np.asarray(values, np.uint64), where=mask)

        return [(read(low), write(low)), (read(high), write(high))]

    sources, targets = halves(a), halves(d)

    def move(w, mask):
        values = [read(w) for read, _ in sources]
        for (_, write), v in zip(targets, values):
            write(w, v.astype(np.uint64), mask)

    return move


@instruction("cvt")
def _cvt(instr, program):
    """cvt[.rnd][.sat].dtype.atype d, a (9.7.9.21). Integer widening sign- or zero-extends by the
    source type; narrowing truncates. f32 -> f16x2 (`cvt.rn.f16x2.f32 d, a, b`): a to the upper half,
    b to the lower, round to nearest even. e4m3x2 -> f16x2 (`cvt.rn.f16x2.e4m3x2 d, a`, a .b16): the upper
    byte of a to the upper half of d, the lower to the lower (exact: every e4m3 value is an f16)."""
    mods = instr.modifiers
    types = [m for m in mods if m in TYPES or m in ("f16x2", "bf16x2", "bf16")]
    if types[0] == "f16x2" and "e4m3x2" in mods:
        from ..tcgen05 import E4M3

        if "rn" not in mods or "relu" in mods:
            raise EmulatorError("unimplemented", instr.opcode)
        d, a = instr.operands[:2]
        write, ra = program.writer(d, "b32"), program.reader(a, "b16")
        table = E4M3.astype(np.float16).view(np.uint16).astype(np.uint32)  # e4m3 code -> f16 bits

        def widen(w, mask):
            v = ra(w).astype(np.uint32)
            write(w, (table[v >> np.uint32(8)] << np.uint32(16)) | table[v & np.uint32(0xFF)], mask)

        return widen
    if types[0] in ("f16x2", "bf16x2"):
        if types[0] != "f16x2" or "rn" not in mods:
            raise EmulatorError("unimplemented", instr.opcode)
        d, a, b = instr.operands[:3]
        write, ra, rb = program.writer(d, "b32"), program.reader(a, "f32"), program.reader(b, "f32")

        def pack(w, mask):
            halves = np.empty((LANES, 2), np.float32)  # low half b, high half a (little-endian, as the host)
            halves[:, 0], halves[:, 1] = rb(w), ra(w)
            write(w, halves.astype(np.float16).view(np.uint32).reshape(LANES), mask)

        return pack
    dtyp, atyp = types[0], types[1]
    if "bf16" in (dtyp, atyp):
        raise EmulatorError("unimplemented", instr.opcode)
    d, a = instr.operands[:2]
    write, ra = program.writer(d, dtyp), program.reader(a, atyp)
    saturate = "sat" in mods
    float_to_int = _float(atyp) and not _float(dtyp)
    rounding = next((m for m in mods if m in ("rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi")), None)

    def handler(w, mask):
        v = ra(w)
        if float_to_int:
            mode = (rounding or "rzi").rstrip("i")
            f = {"rn": np.rint, "rz": np.trunc, "rm": np.floor, "rp": np.ceil}[mode](v.astype(np.float64))
            info = np.iinfo(TYPES[dtyp][0])
            f = np.nan_to_num(f, nan=0.0)
            v = np.clip(f, info.min, info.max).astype(TYPES[dtyp][0])
        elif _float(dtyp):
            v = v.astype(TYPES[dtyp][0])
        else:
            v = v.astype(np.int64) if atyp.startswith("s") else v.astype(np.uint64)
            if saturate:
                info = np.iinfo(TYPES[dtyp][0])
                v = np.clip(v.astype(np.int64) if atyp.startswith("s") else v, info.min, info.max)
        write(w, v, mask)

    return handler


@instruction("cvta")
def _cvta(instr, program):
    """cvta[.to].space.size d, a (9.7.9.19): param/shared <-> generic windows (memory.py)."""
    from ..memory import GENERIC_PARAM_BASE, GENERIC_SHARED_BASE

    mods = instr.modifiers
    to = "to" in mods
    space = next(m for m in mods if m in ("param", "shared", "global", "local", "const"))
    typ = type_of(instr)
    d, a = instr.operands[:2]
    write, ra = program.writer(d, typ), program.reader(a, "u64")
    base = {"param": GENERIC_PARAM_BASE, "shared": GENERIC_SHARED_BASE, "global": 0}.get(space)
    if base is None:
        raise EmulatorError("unimplemented", instr.opcode)

    def handler(w, mask):
        v = ra(w)
        write(w, (v - np.uint64(base)) if to else (v + np.uint64(base)), mask)

    return handler


# --------------------------------------------------------------------------------------------------
# control flow
# --------------------------------------------------------------------------------------------------


@instruction("bra")
def _bra(instr, program):
    target = program.kernel.labels[instr.operands[0].name]
    result = BRANCH + (target,)
    return lambda w, mask: result


@instruction("ret", "exit")
def _exit(instr, program):
    return lambda w, mask: EXIT


@instruction("trap")
def _trap(instr, program):
    def handler(w, mask):
        raise EmulatorError("trap", "the kernel executed trap")

    return handler

