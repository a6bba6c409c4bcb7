"""TMA: the tensor map (the 128-byte `CUtensorMap`) and what a tiled bulk tensor copy moves.

PTX ISA 5.5 ("Tensors") describes a tensor map's contents (5.5.1 dimensions, element types and the sub-byte
types; 5.5.2 access modes; 5.5.3 tiled mode: bounding box, traversal stride, out-of-bound access; 5.5.6
interleave; 5.5.7 swizzling modes; 5.5.8 the tensor-map object) and 9.7.9.25.5.1 `cp.async.bulk.tensor`
the copies. The ISA calls the map opaque and gives no bit layout. The layout below was measured: the DSL's
generated host code encodes every map itself (it never calls `cuTensorMapEncodeTiled`), and
`tests/emulator/test_emulator_tma.py` keeps the descriptors it wrote for compiled variants (data types, ranks 2-5,
swizzles, boxes, load/multicast/store ops; DSL 4.3.5 and 4.5.2 encode them alike), plus maps that a real
driver's `cuTensorMapEncodeTiled` (CUDA 13.0, on an H100) wrote for the fields the DSL never varies
(interleave, L2 promotion, OOB fill, traversal strides, im2col). Little-endian 64-bit words:

| word | bits   | field                                                                      | source        |
|------|--------|----------------------------------------------------------------------------|---------------|
| 0    | 4-56   | global address (bits 0-3 of the address are zero: 16-byte aligned)         | DSL, driver   |
| 1    | 0      | im2col mode (0: tiled)                                                     | driver        |
| 1    | 1      | set by the DSL in every map, never by the driver; meaning unknown         | DSL           |
| 1    | 4-6    | rank - 1                                                                   | DSL, driver   |
| 1    | 7-10   | element format (`ElementFormat`)                                           | DSL, driver   |
| 1    | 11-12  | interleave: 0 none, 1 16 B, 2 32 B                                        | driver        |
| 1    | 13-14  | swizzle span: 0 none, 1 32 B, 2 64 B, 3 128 B                             | DSL, driver   |
| 1    | 15     | out-of-bound fill: 0 zeros, 1 NaN                                          | driver        |
| 1    | 16     | round f32 to tf32 (with format F32 or F32_FTZ: the tf32 types)             | DSL, driver   |
| 1    | 17-18  | L2 promotion: 0 none, 1 64 B, 2 128 B, 3 256 B (the DSL uses 2)           | driver        |
| 1    | 19-20  | swizzle atomicity: 0 16 B, 1 32 B, 3 64 B (2: presumably 32 B + 8 B flip) | DSL           |
| 1    | 21     | set by the DSL when the tensor spans >= 128 KiB, never by the driver       | DSL           |
| 1    | 32-63  | stride of dim 1 in bytes, >> 4, low 32 bits                                | DSL, driver   |
| 2    | 0-63   | strides of dims 2 and 3, >> 4, low 32 bits each                           | DSL, driver   |
| 3    | 0-31   | stride of dim 4, >> 4, low 32 bits                                         | DSL, driver   |
| 3    | 32-47  | bits 32-35 of each stride >> 4, 4 bits per dim 1..4                        | DSL, driver   |
| 4, 5 | 32 each| size - 1 of dims 0..3                                                      | DSL, driver   |
| 6    | 0-31   | size - 1 of dim 4                                                          | DSL, driver   |
| 6    | 32-46  | traversal (element) stride - 1, 3 bits per dim 0..4                        | driver        |
| 6    | 56-63  | box size - 1 of dim 0                                                      | DSL, driver   |
| 7    | 0-31   | box size - 1 of dims 1..4, a byte each                                     | DSL, driver   |
| 8-15 |        | ignored: driver bookkeeping; DSL 4.3.5 writes zeros, 4.5.2 leaves garbage   | all           |

Dims, box and traversal strides count elements, innermost first; for the packed 4-bit format (`.b4x16`)
an element is 4 bits. Any other bit set in words 0-7 is kept (`TensorMap.unknown_bits`) and refused by a
copy, never ignored. The DSL encodes the same map for sm_90a as for sm_100a.

What the copies do was checked on an H100's TMA unit (the test's HARDWARE_CASES: every modeled case
byte-exact, every fault matched by an EmulatorError), and is assumed to hold on sm_100 where the ISA's text
is silent: the swizzle follows the shared-memory address bits (a box at a 128-byte but not 1024-byte aligned
address gets the pattern's later rows); out-of-bound elements are filled element by element and count toward
the transaction bytes, whole boxes out of bounds included; NaN fill writes 0x7FF7 into every 16-bit half;
dim 0's traversal stride is ignored; a store writes a row's in-bounds bytes rounded up to 16-byte units; it
faults on a shared address not 128-byte aligned, an innermost coordinate not at a 16-byte boundary, and a
store at a negative coordinate; swizzled rows shorter than the span are pitched at the span (not modeled).

Encoding (`encode_tensor_map`, `encode_fields`: the table above the other way round, the decoder's exact inverse;
`encode_tiled`: what a driver's `cuTensorMapEncodeTiled` writes for its arguments, and what it refuses; the stub
driver's C twin writes the same bytes) serves host code that calls the driver, as the peers' CUDA entries do.

Modeled: tiled loads (`load_box`) and stores (`store_box`) of ranks 1-5, element formats of 8 to 64 bits
and packed 4-bit, swizzles none/32/64/128 B (128 B also with 32 B and 64 B atomicity), out-of-bound
zero and NaN fill, traversal strides, the transaction bytes of a box (`box_bytes`), the faults above
(`check_copy`, EmulatorError). Not modeled, each a NotImplementedError naming it: im2col (and its ::w
forms), gather4/scatter4 (no tiled map asks for them; bulk_copy.py refuses those instruction forms),
interleaved layouts, the padded sub-byte formats (.b4x16_p64, .b6x16_p32), conversions on copy (tf32
rounding, FTZ formats), reductions (`cp.reduce.async.bulk.tensor`, refused by bulk_copy.py), L2 promotion
(a cache hint: accepted and ignored).
"""

from __future__ import annotations

import enum
import math
import struct
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .errors import EmulatorError

TENSOR_MAP_BYTES = 128


class ElementFormat(enum.IntEnum):
    """Word 1 bits 7-10. The numbering is the hardware's (the DSL's `TmaDataFormat` enum, "bits 74-71 of
    the TMA descriptor"), not the driver's `CUtensorMapDataType`; ISA 5.5.1 names the sub-byte types."""

    U8 = 0
    U16 = 1
    U32 = 2
    S32 = 3
    U64 = 4
    S64 = 5
    F16 = 6
    F32 = 7
    F32_FTZ = 8
    F64 = 9
    BF16 = 10
    B4X16 = 11  # packed 4-bit: 16 elements in 8 bytes, in global and in shared memory alike
    # The next two by their DSL names U4_UNPACK_U8 / U6_UNPACK_U8 and the driver's 16U4_ALIGN16B /
    # 16U6_ALIGN16B: 16 elements padded to 16 bytes in shared memory (not modeled).
    B4X16_P64 = 12  # 16 packed 4-bit elements, 8 bytes of padding appended in shared memory
    B6X16_P32 = 13  # 16 packed 6-bit elements, 4 bytes of padding appended in shared memory


ELEMENT_BITS = {
    ElementFormat.U8: 8, ElementFormat.U16: 16, ElementFormat.U32: 32, ElementFormat.S32: 32,
    ElementFormat.U64: 64, ElementFormat.S64: 64, ElementFormat.F16: 16, ElementFormat.F32: 32,
    ElementFormat.F32_FTZ: 32, ElementFormat.F64: 64, ElementFormat.BF16: 16, ElementFormat.B4X16: 4,
    ElementFormat.B4X16_P64: 4, ElementFormat.B6X16_P32: 6,
}


class Interleave(enum.IntEnum):
    NONE = 0
    B16 = 1
    B32 = 2


class Swizzle(enum.IntEnum):
    """The span of the swizzle pattern's rows (ISA 5.5.7)."""

    NONE = 0
    B32 = 1
    B64 = 2
    B128 = 3


class SwizzleAtomicity(enum.IntEnum):
    """The unit the swizzle moves: 16 B by default; the 128 B swizzle may move 32 B or 64 B units."""

    B16 = 0
    B32 = 1
    B32_FLIP_8B = 2
    B64 = 3


class L2Promotion(enum.IntEnum):
    NONE = 0
    B64 = 1
    B128 = 2
    B256 = 3


class OobFill(enum.IntEnum):
    ZERO = 0
    NAN = 1


@dataclass(frozen=True)
class TensorMap:
    """A decoded tensor map. Dims, box and element strides count elements, innermost first; `strides`
    holds the byte strides of dims 1..rank-1 (dim 0 is contiguous)."""

    global_address: int
    rank: int
    element_format: ElementFormat
    round_to_tf32: bool
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    element_strides: tuple[int, ...]
    interleave: Interleave
    swizzle: Swizzle
    swizzle_atomicity: SwizzleAtomicity
    l2_promotion: L2Promotion
    oob_fill: OobFill
    im2col: bool
    dsl_bit1: bool
    dsl_large_tensor: bool
    unknown_bits: tuple[int, ...]  # words 0-7 with every decoded field masked out
    raw: bytes
    # words 0-7's bits in the slots of dims, strides, box sizes and element strides past the rank: read by no
    # copy (NVIDIA's grouped kernel patches dims 0-4 of every map whatever its rank), kept so that
    # `encode_fields` gives back words 0-7 exactly
    beyond_rank: tuple[int, ...] = (0,) * 8

    @property
    def element_bits(self) -> int:
        return ELEMENT_BITS[self.element_format]

    def describe(self) -> str:
        fmt = getattr(self.element_format, "name", self.element_format)
        return (f"tensor map @0x{self.global_address:x} {fmt} rank {self.rank} dims {self.dims} "
                f"strides {self.strides} box {self.box} swizzle {self.swizzle.name}")


def _bits(word: int, low: int, count: int) -> int:
    return (word >> low) & ((1 << count) - 1)


# Word 1's fields, as (low bit, bit count).
_WORD1_FIELDS = {"im2col": (0, 1), "dsl_bit1": (1, 1), "rank": (4, 3), "format": (7, 4), "interleave": (11, 2),
                 "swizzle": (13, 2), "oob": (15, 1), "tf32": (16, 1), "l2": (17, 2), "atomicity": (19, 2),
                 "dsl_large": (21, 1), "stride1": (32, 32)}
_FULL32 = 0xFFFF_FFFF
# Per word 0-7, the bits the decoder reads; any other bit set is kept as unknown.
_KNOWN_BITS = (
    ((1 << 53) - 1) << 4,
    sum(((1 << count) - 1) << low for low, count in _WORD1_FIELDS.values()),
    _FULL32 | _FULL32 << 32,
    _FULL32 | 0xFFFF << 32,
    _FULL32 | _FULL32 << 32,
    _FULL32 | _FULL32 << 32,
    _FULL32 | 0x7FFF << 32 | 0xFF << 56,
    _FULL32,
)


def _enum_or_int(kind, value: int):
    """An enum member, or the raw value where the hardware's encoding of it is unknown (refused by copies)."""
    return kind(value) if value in kind._value2member_map_ else value


# raw bytes -> TensorMap: a map's fields are a function of its 128 bytes, and the copies of a kernel read the
# same few maps again and again (every lane of every TMA store re-reads its map). Bounded: maps patched on the
# device (tensormap.replace) make new byte strings.
_DECODED: dict = {}
_DECODED_LIMIT = 4096


def decode_tensor_map(raw: bytes) -> TensorMap:
    """The fields of a 128-byte tensor map (layout: the module docstring's table). Decoding never refuses a
    map: what the emulator cannot copy with is refused by `check_copy`. A TensorMap is immutable: the maps
    of equal bytes are one object."""
    raw = bytes(raw)
    tmap = _DECODED.get(raw)
    if tmap is None:
        if len(_DECODED) >= _DECODED_LIMIT:
            _DECODED.clear()
        tmap = _DECODED[raw] = _decode(raw)
    return tmap


def _decode(raw: bytes) -> TensorMap:
    if len(raw) != TENSOR_MAP_BYTES:
        raise ValueError(f"a tensor map is {TENSOR_MAP_BYTES} bytes, got {len(raw)}")
    w = struct.unpack("<16Q", raw)

    def word1(name: str) -> int:
        return _bits(w[1], *_WORD1_FIELDS[name])

    rank = word1("rank") + 1
    sizes = [_bits(w[4], 0, 32), _bits(w[4], 32, 32), _bits(w[5], 0, 32), _bits(w[5], 32, 32), _bits(w[6], 0, 32)]
    low_strides = [word1("stride1"), _bits(w[2], 0, 32), _bits(w[2], 32, 32), _bits(w[3], 0, 32)]
    strides = tuple((low_strides[i] | _bits(w[3], 32 + 4 * i, 4) << 32) << 4 for i in range(rank - 1))
    boxes = [_bits(w[6], 56, 8)] + [_bits(w[7], 8 * i, 8) for i in range(4)]
    return TensorMap(
        global_address=_bits(w[0], 4, 53) << 4,
        rank=rank,
        element_format=_enum_or_int(ElementFormat, word1("format")),
        round_to_tf32=bool(word1("tf32")),
        dims=tuple(s + 1 for s in sizes[:rank]),
        strides=strides,
        box=tuple(b + 1 for b in boxes[:rank]),
        element_strides=tuple(_bits(w[6], 32 + 3 * i, 3) + 1 for i in range(rank)),
        interleave=_enum_or_int(Interleave, word1("interleave")),
        swizzle=Swizzle(word1("swizzle")),
        swizzle_atomicity=SwizzleAtomicity(word1("atomicity")),
        l2_promotion=L2Promotion(word1("l2")),
        oob_fill=OobFill(word1("oob")),
        im2col=bool(word1("im2col")),
        dsl_bit1=bool(word1("dsl_bit1")),
        dsl_large_tensor=bool(word1("dsl_large")),
        unknown_bits=tuple(word & ~known & 0xFFFF_FFFF_FFFF_FFFF for word, known in zip(w, _KNOWN_BITS)),
        raw=bytes(raw),
        beyond_rank=tuple(word & mask for word, mask in zip(w, _beyond_rank_bits(rank))),
    )


def _beyond_rank_bits(rank: int) -> tuple:
    """Per word 0-7, the bits of the per-dimension fields of dims `rank`..4 (see the table)."""
    m = [0] * 8
    for dim in range(rank, 5):
        m[(4, 4, 5, 5, 6)[dim]] |= _FULL32 << (32 * (dim % 2) if dim < 4 else 0)  # size - 1
        m[6] |= 0b111 << (32 + 3 * dim)  # traversal stride - 1
        if dim:
            m[7] |= 0xFF << (8 * (dim - 1))  # box size - 1
            if dim == 1:  # stride of dim 1, then its bits 32-35
                m[1] |= _FULL32 << 32
            else:
                m[(2, 2, 3)[dim - 2]] |= _FULL32 << (32 if dim == 3 else 0)
            m[3] |= 0xF << (32 + 4 * (dim - 1))
    return tuple(m)


# ---- encoding: the decoder's inverse, and the driver's cuTensorMapEncodeTiled ----


def encode_tensor_map(*, global_address: int, element_format, dims, strides, box, element_strides=None,
                      interleave=Interleave.NONE, swizzle=Swizzle.NONE, swizzle_atomicity=SwizzleAtomicity.B16,
                      l2_promotion=L2Promotion.NONE, oob_fill=OobFill.ZERO, round_to_tf32: bool = False,
                      im2col: bool = False, dsl_bit1: bool = False, dsl_large_tensor: bool = False,
                      unknown_bits=(0,) * 8, beyond_rank=(0,) * 8, tail: bytes = bytes(64)) -> bytes:
    """The 128-byte map whose `decode_tensor_map` gives these fields: the exact inverse of the decoder (the
    module docstring's table, written the other way round). `strides` are the byte strides of dims 1..rank-1;
    `unknown_bits` and `beyond_rank` (the decoder's) are ORed back into words 0-7; `tail` is words 8-15 (the driver's bookkeeping, which no
    copy reads: zeros, as DSL 4.3.5 writes). A field that does not fit its bits is a ValueError."""
    rank = len(dims)
    element_strides = tuple(element_strides or (1,) * rank)
    if not 1 <= rank <= 5 or len(box) != rank or len(element_strides) != rank or len(strides) != rank - 1:
        raise ValueError(f"rank {rank}: dims {tuple(dims)}, strides {tuple(strides)} (rank - 1), box {tuple(box)}, "
                         f"element strides {element_strides} (rank each)")
    if global_address % 16 or not 0 <= global_address < 1 << 57:
        raise ValueError(f"global address 0x{global_address:x}: 16-byte aligned, below 2^57")
    if any(not 1 <= d <= 1 << 32 for d in dims) or any(not 1 <= b <= 256 for b in box) or \
            any(not 1 <= e <= 8 for e in element_strides):
        raise ValueError(f"dims {tuple(dims)} (1..2^32), box {tuple(box)} (1..256), element strides "
                         f"{element_strides} (1..8)")
    if any(s % 16 or not 0 <= s < 1 << 40 for s in strides):
        raise ValueError(f"strides {tuple(strides)}: multiples of 16 below 2^40")
    if len(tail) != TENSOR_MAP_BYTES - 64:
        raise ValueError("tail: words 8-15, 64 bytes")

    def field(name: str, value: int) -> int:
        low, count = _WORD1_FIELDS[name]
        if not 0 <= int(value) < 1 << count:
            raise ValueError(f"{name} {value} does not fit {count} bits")
        return int(value) << low

    s = [x >> 4 for x in strides] + [0] * (4 - len(strides))
    w = [0] * 8
    w[0] = global_address
    w[1] = (field("im2col", im2col) | field("dsl_bit1", dsl_bit1) | field("rank", rank - 1)
            | field("format", element_format) | field("interleave", interleave) | field("swizzle", swizzle)
            | field("oob", oob_fill) | field("tf32", round_to_tf32) | field("l2", l2_promotion)
            | field("atomicity", swizzle_atomicity) | field("dsl_large", dsl_large_tensor)
            | field("stride1", s[0] & _FULL32))
    w[2] = (s[1] & _FULL32) | (s[2] & _FULL32) << 32
    w[3] = (s[3] & _FULL32) | sum((x >> 32) << (32 + 4 * i) for i, x in enumerate(s))
    d = [x - 1 for x in dims] + [0] * (5 - rank)
    w[4], w[5] = d[0] | d[1] << 32, d[2] | d[3] << 32
    w[6] = d[4] | sum((e - 1) << (32 + 3 * i) for i, e in enumerate(element_strides)) | (box[0] - 1) << 56
    w[7] = sum((b - 1) << (8 * i) for i, b in enumerate(box[1:]))
    w = [word | extra | spare for word, extra, spare in zip(w, tuple(unknown_bits) + (0,) * (8 - len(unknown_bits)),
                                                            tuple(beyond_rank) + (0,) * (8 - len(beyond_rank)))]
    return struct.pack("<8Q", *w) + bytes(tail)


def encode_fields(tmap: TensorMap, tail: bytes = bytes(64)) -> bytes:
    """`encode_tensor_map` of a decoded map's fields: `encode_fields(decode_tensor_map(raw))` is `raw`'s
    words 0-7 followed by `tail`."""
    return encode_tensor_map(
        global_address=tmap.global_address, element_format=tmap.element_format, dims=tmap.dims,
        strides=tmap.strides, box=tmap.box, element_strides=tmap.element_strides, interleave=tmap.interleave,
        swizzle=tmap.swizzle, swizzle_atomicity=tmap.swizzle_atomicity, l2_promotion=tmap.l2_promotion,
        oob_fill=tmap.oob_fill, round_to_tf32=tmap.round_to_tf32, im2col=tmap.im2col, dsl_bit1=tmap.dsl_bit1,
        dsl_large_tensor=tmap.dsl_large_tensor, unknown_bits=tmap.unknown_bits, beyond_rank=tmap.beyond_rank,
        tail=tail)


class TensorMapDataType(enum.IntEnum):
    """The driver's `CUtensorMapDataType` (cuda.h), which cuTensorMapEncodeTiled takes."""

    UINT8 = 0
    UINT16 = 1
    UINT32 = 2
    INT32 = 3
    UINT64 = 4
    INT64 = 5
    FLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BFLOAT16 = 9
    FLOAT32_FTZ = 10
    TFLOAT32 = 11
    TFLOAT32_FTZ = 12
    U4X16_ALIGN8B = 13  # CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B
    U4X16_ALIGN16B = 14  # CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B
    U6X16_ALIGN16B = 15  # CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B


# driver data type -> (hardware element format, round f32 to tf32): the driver vectors of
# tests/test_emulator_tma.py show S32, S64, F32_FTZ, TFLOAT32 (F32 + bit 16) and TFLOAT32_FTZ (F32_FTZ + bit 16)
DRIVER_FORMAT = {
    TensorMapDataType.UINT8: (ElementFormat.U8, False), TensorMapDataType.UINT16: (ElementFormat.U16, False),
    TensorMapDataType.UINT32: (ElementFormat.U32, False), TensorMapDataType.INT32: (ElementFormat.S32, False),
    TensorMapDataType.UINT64: (ElementFormat.U64, False), TensorMapDataType.INT64: (ElementFormat.S64, False),
    TensorMapDataType.FLOAT16: (ElementFormat.F16, False), TensorMapDataType.FLOAT32: (ElementFormat.F32, False),
    TensorMapDataType.FLOAT64: (ElementFormat.F64, False), TensorMapDataType.BFLOAT16: (ElementFormat.BF16, False),
    TensorMapDataType.FLOAT32_FTZ: (ElementFormat.F32_FTZ, False),
    TensorMapDataType.TFLOAT32: (ElementFormat.F32, True), TensorMapDataType.TFLOAT32_FTZ: (ElementFormat.F32_FTZ, True),
    TensorMapDataType.U4X16_ALIGN8B: (ElementFormat.B4X16, False),
    TensorMapDataType.U4X16_ALIGN16B: (ElementFormat.B4X16_P64, False),
    TensorMapDataType.U6X16_ALIGN16B: (ElementFormat.B6X16_P32, False),
}
_FLOAT_TYPES = {TensorMapDataType.FLOAT16, TensorMapDataType.FLOAT32, TensorMapDataType.FLOAT64,
                TensorMapDataType.BFLOAT16, TensorMapDataType.FLOAT32_FTZ, TensorMapDataType.TFLOAT32,
                TensorMapDataType.TFLOAT32_FTZ}
# the driver's CUtensorMapSwizzle values past 128B (CUDA 12.8+): the 128-byte swizzle with 32- or 64-byte atoms,
# as (swizzle span, atomicity); their atomicity bits are the ones the DSL writes for the same smem layouts (a
# driver was never seen writing them: an H100's refuses them)
DRIVER_SWIZZLE_ATOMS = {4: (Swizzle.B128, SwizzleAtomicity.B32), 5: (Swizzle.B128, SwizzleAtomicity.B32_FLIP_8B),
                        6: (Swizzle.B128, SwizzleAtomicity.B64)}
CUDA_ERROR_INVALID_VALUE = 1


class TensorMapEncodeError(ValueError):
    """An argument cuTensorMapEncodeTiled refuses (it returns CUDA_ERROR_INVALID_VALUE); the message names it."""

    code = CUDA_ERROR_INVALID_VALUE


def encode_tiled(data_type, rank: int, global_address: int, global_dim, global_strides, box_dim,
                 element_strides, interleave=Interleave.NONE, swizzle=Swizzle.NONE,
                 l2_promotion=L2Promotion.NONE, oob_fill=OobFill.ZERO) -> bytes:
    """The map a real driver's `cuTensorMapEncodeTiled` writes for these arguments (in its order and terms:
    the enums' values are the driver's CU_TENSOR_MAP_* values (swizzles 4-6: DRIVER_SWIZZLE_ATOMS), `global_strides` the rank - 1 byte strides of
    dims 1.., dims and boxes in elements, 4-bit elements for the packed types), words 0-7 as the driver vectors
    of tests/test_emulator_tma.py show them (the DSL's bits 1 and 21 of word 1 are never set), words 8-15
    zero (the driver's bookkeeping there, e.g. 0x400, is not reproduced: no copy reads it). Refused as the
    CUDA driver API documents it (TensorMapEncodeError): rank 1..5 (3..5 interleaved); address 16-byte aligned
    (32 with 32-byte interleave); every dim in 1..2^32; strides multiples of 16 (32 with 32-byte interleave)
    below 2^40; box dims in 1..256, the inner one a multiple of 16 bytes without interleave and at most the
    swizzle span; element strides 1..8; NaN fill for float types only; a swizzle other than 32 B with
    32-byte interleave."""
    try:
        data_type = TensorMapDataType(data_type)
        swizzle, atomicity = DRIVER_SWIZZLE_ATOMS[int(swizzle)] if int(swizzle) in DRIVER_SWIZZLE_ATOMS else \
            (Swizzle(swizzle), SwizzleAtomicity.B16)
        interleave = Interleave(interleave)
        l2_promotion, oob_fill = L2Promotion(l2_promotion), OobFill(oob_fill)
    except ValueError as e:
        raise TensorMapEncodeError(f"cuTensorMapEncodeTiled: {e}") from None
    element_format, tf32 = DRIVER_FORMAT[data_type]
    bits = ELEMENT_BITS[element_format]
    dims, box, estrides = tuple(global_dim[:rank]), tuple(box_dim[:rank]), tuple(element_strides[:rank])
    strides = tuple(global_strides[:max(rank - 1, 0)])

    def refuse(why: str):
        raise TensorMapEncodeError(f"cuTensorMapEncodeTiled: {why}")

    if not (3 if interleave != Interleave.NONE else 1) <= rank <= 5:
        refuse(f"rank {rank} (1..5; 3..5 with interleave)")
    align = 32 if interleave == Interleave.B32 else 16
    if global_address % align:
        refuse(f"global address 0x{global_address:x} not {align}-byte aligned")
    if any(not 1 <= d <= 1 << 32 for d in dims):
        refuse(f"global dims {dims}: each 1..2^32")
    if any(s % align or not 0 < s < 1 << 40 for s in strides):
        refuse(f"global strides {strides}: multiples of {align} below 2^40")
    if any(not 1 <= b <= 256 for b in box):
        refuse(f"box {box}: each 1..256")
    if any(not 1 <= e <= 8 for e in estrides):
        refuse(f"element strides {estrides}: each 1..8")
    inner_bytes = box[0] * bits / 8
    if interleave == Interleave.NONE and inner_bytes % 16:
        refuse(f"box inner dimension of {inner_bytes:g} B: a multiple of 16 B")
    if interleave == Interleave.NONE and swizzle != Swizzle.NONE and inner_bytes > 16 << swizzle:
        refuse(f"box inner dimension of {inner_bytes:g} B exceeds the {16 << swizzle} B swizzle span")
    if interleave == Interleave.B32 and swizzle != Swizzle.B32:
        refuse("32-byte interleave requires the 32-byte swizzle")
    if oob_fill == OobFill.NAN and data_type not in _FLOAT_TYPES:
        refuse(f"NaN out-of-bound fill for {data_type.name}")
    return encode_tensor_map(global_address=global_address, element_format=element_format, dims=dims,
                             strides=strides, box=box, element_strides=estrides, interleave=interleave,
                             swizzle=swizzle, swizzle_atomicity=atomicity, l2_promotion=l2_promotion,
                             oob_fill=oob_fill, round_to_tf32=tf32)


# ---- swizzles (ISA 5.5.7) ----

# The 128 B swizzle's 16-byte unit index (address bits 4-6) is XORed with the 128-byte row index within
# the 1024-byte pattern (bits 7-9); 64 B and 32 B use 2 and 1 bits. As CuTe Swizzle<bits, base, shift>
# on byte addresses: address ^ ((address >> shift) & (((1 << bits) - 1) << base)). An H100 placed boxes
# so for all three (HARDWARE_CASES in the test). The atomicity forms are the smem layouts the DSL pairs with
# those descriptor bits (MN_SW128_32B is Swizzle<2,5,2>; Swizzle<1,6,1> gets atomicity 3); the ISA shows
# them only in figures, and an H100's driver refuses them.
_SWIZZLE_FUNCTION = {
    (Swizzle.B32, SwizzleAtomicity.B16): (1, 4, 3),
    (Swizzle.B64, SwizzleAtomicity.B16): (2, 4, 3),
    (Swizzle.B128, SwizzleAtomicity.B16): (3, 4, 3),
    (Swizzle.B128, SwizzleAtomicity.B32): (2, 5, 2),
    (Swizzle.B128, SwizzleAtomicity.B64): (1, 6, 1),
}


def swizzled_address(tmap: TensorMap, address):
    """The shared-memory address(es) where the byte(s) at `address` (an int or an integer array) of a box's
    row-major image land."""
    if tmap.swizzle == Swizzle.NONE:
        return address
    bits, base, shift = _SWIZZLE_FUNCTION[(tmap.swizzle, tmap.swizzle_atomicity)]
    return address ^ ((address >> shift) & (((1 << bits) - 1) << base))


def _chunk_permutation(tmap: TensorMap, smem_address: int, nbytes: int) -> np.ndarray | None:
    """For each 16-byte unit of the box's row-major image, the unit of shared memory it lands in (relative
    to `smem_address`); None without a swizzle."""
    if tmap.swizzle == Swizzle.NONE:
        return None
    addresses = smem_address + 16 * np.arange(nbytes // 16, dtype=np.int64)
    units = swizzled_address(tmap, addresses) - smem_address
    if nbytes % 16 or units.min() < 0 or units.max() >= nbytes:
        # The swizzle moves 16 B units within aligned blocks of up to 1024 bytes; a box that covers such a
        # block only in part would spill outside its own bytes.
        raise NotImplementedError(f"a {tmap.swizzle.name}-swizzled box of {nbytes} B at shared address "
                                  f"0x{smem_address:x} that covers its swizzle blocks only in part")
    return units // 16


# ---- what a copy moves ----

# Out-of-bound elements under OobFill.NAN: every 16-bit half of the element is 0x7FF7, whatever the float
# format (seen on an H100 for f16, bf16, f32 and f64). The driver refuses NaN fill for integer formats.
_NAN_HALF = np.array([0xF7, 0x7F], dtype=np.uint8)
_NAN_FORMATS = (ElementFormat.F16, ElementFormat.BF16, ElementFormat.F32, ElementFormat.F64)

# Alignments an H100 enforces (the ISA text names neither): a misaligned shared address faults
# ("misaligned address"), a box whose innermost coordinate is not at a 16-byte boundary faults ("illegal
# instruction"), and so does a TMA store at a negative coordinate.
SHARED_ALIGNMENT = 128
INNER_COORD_ALIGNMENT = 16
STORE_UNIT = 16  # a TMA store writes the in-bounds part of a row rounded up to whole 16-byte units


def _require_modeled(tmap: TensorMap) -> None:
    """Refuse, naming it, any feature of the map the copies below do not model."""
    if tmap.im2col:
        raise NotImplementedError("im2col tensor maps")
    if any(tmap.unknown_bits):
        words = ", ".join(f"word {i}: 0x{b:x}" for i, b in enumerate(tmap.unknown_bits) if b)
        raise NotImplementedError(f"tensor map with undecoded bits set ({words})")
    if not isinstance(tmap.element_format, ElementFormat):
        raise NotImplementedError(f"tensor map element format {tmap.element_format}")
    if tmap.element_format in (ElementFormat.B4X16_P64, ElementFormat.B6X16_P32):
        raise NotImplementedError(f"padded sub-byte element format {tmap.element_format.name}")
    if tmap.round_to_tf32 or tmap.element_format == ElementFormat.F32_FTZ:
        raise NotImplementedError("tensor map formats that convert on copy (tf32 rounding, FTZ)")
    if tmap.interleave != Interleave.NONE:
        raise NotImplementedError(f"interleaved tensor maps ({tmap.interleave!r})")
    if tmap.swizzle != Swizzle.NONE and (tmap.swizzle, tmap.swizzle_atomicity) not in _SWIZZLE_FUNCTION:
        raise NotImplementedError(f"swizzle {tmap.swizzle.name} with atomicity {tmap.swizzle_atomicity.name}")
    if tmap.oob_fill == OobFill.NAN and tmap.element_format not in _NAN_FORMATS:
        raise NotImplementedError(f"NaN out-of-bound fill for {tmap.element_format.name}")
    row_bytes = tmap.box[0] * tmap.element_bits // 8
    if (tmap.box[0] * tmap.element_bits) % 128:
        raise NotImplementedError(f"a box row of {tmap.box[0]} x {tmap.element_bits} bits, not whole 16-byte units")
    span = 16 << tmap.swizzle if tmap.swizzle != Swizzle.NONE else 0
    if row_bytes < span and box_extent(tmap)[1:] and int(np.prod(box_extent(tmap)[1:])) > 1:
        # Seen on an H100: such rows are pitched at the swizzle span, the gaps left unwritten, and the
        # transaction count appears to follow the pitch.
        raise NotImplementedError(f"{tmap.swizzle.name}-swizzled box rows of {row_bytes} B, shorter than the span")


def box_extent(tmap: TensorMap) -> tuple[int, ...]:
    """Elements the box holds per dim, innermost first. A traversal stride s on an outer dim takes every
    s-th element of the bounding box, ceil(box / s) of them (ISA 5.5.3.2); on dim 0 an H100 ignores it
    and loads the whole row (the DSL never sets one: all its maps have strides of 1)."""
    return (tmap.box[0],) + tuple(-(-b // s) for b, s in zip(tmap.box[1:], tmap.element_strides[1:]))


_BOX_BYTES: dict = {}  # map bytes -> box_bytes (a TensorMap's fields are its bytes')


def box_bytes(tmap: TensorMap) -> int:
    """Bytes one load of a box writes to shared memory, out-of-bound elements included: the transaction
    count its mbarrier completes (ISA 9.7.9.25.5.1; 5.5.3.3: out-of-bound elements are filled, not
    skipped; an H100 completes exactly this count for boxes partly and wholly out of bounds)."""
    nbytes = _BOX_BYTES.get(tmap.raw)
    if nbytes is None:
        if len(_BOX_BYTES) >= _DECODED_LIMIT:
            _BOX_BYTES.clear()
        nbytes = _BOX_BYTES[tmap.raw] = math.prod(box_extent(tmap)) * tmap.element_bits // 8
    return nbytes


def box_key(tmap: TensorMap, coords: tuple[int, ...]) -> tuple:
    """What identifies the global bytes a box of `tmap` at `coords` reads: the tensor's address, element
    format, dims and strides, the box and its traversal strides, and the coordinates, not where the map
    lies (the same kernel's maps lie at the same parameter address in every launch, each describing other
    tensors; a map patched in place describes another tensor). Two copies with the same key read the
    same bytes (the timed mode's L2 matches hits on it)."""
    return (tmap.global_address, int(tmap.element_format), tmap.dims, tmap.strides, tmap.box,
            tmap.element_strides, tuple(coords))


def check_copy(tmap: TensorMap, coords: tuple[int, ...], smem_address: int, store: bool) -> None:
    """Raise what `load_box` / `store_box` would for this copy, before any byte moves: EmulatorError for a
    copy the hardware faults on (misaligned shared address or innermost coordinate, a store at a negative
    coordinate, a wrong number of coordinates), NotImplementedError for a map the emulator does not model.
    Instruction handlers call it at issue time, where the PTX line is known."""
    _require_modeled(tmap)
    if len(coords) != tmap.rank:
        raise EmulatorError("tma", f"{len(coords)} coordinates for a rank-{tmap.rank} {tmap.describe()}")
    if smem_address % SHARED_ALIGNMENT:
        raise EmulatorError("misaligned", f"TMA shared-memory address 0x{smem_address:x} is not "
                            f"{SHARED_ALIGNMENT}-byte aligned")
    if (coords[0] * tmap.element_bits) % (8 * INNER_COORD_ALIGNMENT):
        raise EmulatorError("misaligned", f"TMA box at innermost coordinate {coords[0]}: not at a "
                            f"{INNER_COORD_ALIGNMENT}-byte boundary ({tmap.describe()})")
    if store and min(coords) < 0:
        raise EmulatorError("tma", f"TMA store at negative coordinates {coords} ({tmap.describe()})")


def _rows(tmap: TensorMap, coords: tuple[int, ...]) -> list[tuple[int, int | None]]:
    """The box's rows (every dim but the innermost) in row-major order: (row index, global byte address
    of the row's element at inner coordinate 0, or None where an outer coordinate is out of bounds)."""
    extent = box_extent(tmap)
    if tmap.rank == 1:
        return [(0, tmap.global_address)]
    outer = [np.arange(n, dtype=np.int64) * s + c
             for n, s, c in zip(extent[1:], tmap.element_strides[1:], coords[1:])]
    grids = np.meshgrid(*outer[::-1], indexing="ij")  # the outermost dim varies slowest
    per_dim = [g.reshape(-1) for g in grids[::-1]]  # dim 1 first again
    inside = np.ones(per_dim[0].shape, dtype=bool)
    address = np.full(per_dim[0].shape, tmap.global_address, dtype=np.int64)
    for c, size, stride in zip(per_dim, tmap.dims[1:], tmap.strides):
        inside &= (c >= 0) & (c < size)
        address += c * stride
    return [(row, a if ok else None) for row, (ok, a) in enumerate(zip(inside.tolist(), address.tolist()))]


def load_box(tmap: TensorMap, coords: tuple[int, ...], read_global: Callable[[int, int], np.ndarray],
             smem_address: int) -> tuple[np.ndarray, int]:
    """What `cp.async.bulk.tensor.Nd.shared::cluster.global.tile` writes to shared memory at
    `smem_address`: the box at `coords` (elements, innermost first; ISA 5.5.3.1), row-major, out-of-bound
    elements filled (ISA 5.5.3.3), swizzled on the shared-memory address bits (ISA 5.5.7). Returns the
    bytes to store at `smem_address` and the transaction bytes (the same count: the whole box).
    `read_global(address, nbytes)` reads global memory; it is called once per row, for the row's
    in-bounds elements."""
    check_copy(tmap, coords, smem_address, store=False)
    nbytes = box_bytes(tmap)
    bits = tmap.element_bits
    row_bytes = tmap.box[0] * bits // 8
    if tmap.oob_fill == OobFill.NAN:
        image = np.tile(_NAN_HALF, nbytes // 2).reshape(-1, row_bytes)
    else:
        image = np.zeros((nbytes // row_bytes, row_bytes), dtype=np.uint8)
    c0 = coords[0]
    first, last = max(0, -c0), min(tmap.box[0], tmap.dims[0] - c0)  # in-bounds box elements of a row
    if last > first:
        lo, hi = first * bits // 8, last * bits // 8
        offset = (c0 + first) * bits // 8
        for row, address in _rows(tmap, coords):
            if address is not None:
                image[row, lo:hi] = read_global(address + offset, hi - lo)
    image = image.reshape(-1)
    units = _chunk_permutation(tmap, smem_address, nbytes)
    if units is not None:
        placed = np.empty_like(image)
        placed.reshape(-1, 16)[units] = image.reshape(-1, 16)
        image = placed
    return image, nbytes


def store_box(tmap: TensorMap, coords: tuple[int, ...], smem_bytes: np.ndarray, smem_address: int,
              write_global: Callable[[int, np.ndarray], None]) -> None:
    """What `cp.async.bulk.tensor.Nd.global.shared::cta.tile` writes to global memory: the box at
    `coords`, read from the `box_bytes(tmap)` bytes of shared memory at `smem_address` (swizzled as a load
    would have placed them) and written row by row; out-of-bound rows are not written (ISA 5.5.3.3), and
    of a row that crosses the tensor's end the in-bounds bytes rounded up to whole 16-byte units are (as
    an H100 does: the elements past the end inside the last unit are written too)."""
    check_copy(tmap, coords, smem_address, store=True)
    nbytes = box_bytes(tmap)
    smem_bytes = np.asarray(smem_bytes, dtype=np.uint8).reshape(-1)
    if smem_bytes.size != nbytes:
        raise EmulatorError("tma", f"TMA store of {smem_bytes.size} B from shared memory; the box holds {nbytes}")
    units = _chunk_permutation(tmap, smem_address, nbytes)
    image = smem_bytes.reshape(-1, 16)[units].reshape(-1) if units is not None else smem_bytes
    bits = tmap.element_bits
    row_bytes = tmap.box[0] * bits // 8
    image = image.reshape(-1, row_bytes)
    inside = min(tmap.box[0], tmap.dims[0] - coords[0]) * bits // 8
    if inside <= 0:
        return
    written = min(row_bytes, -(-inside // STORE_UNIT) * STORE_UNIT)
    offset = coords[0] * bits // 8
    for row, address in _rows(tmap, coords):
        if address is not None:
            write_global(address + offset, image[row, :written])
