"""The warpgroup MMA of sm_90a (wgmma) as pure functions on NumPy arrays: descriptors, fragment layouts,
arithmetic.

PTX ISA 9.7.15 "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions". Which instruction
executes when is isa/warpgroup.py's; this module says what one instruction computes. Each entry: the
semantic, the function that holds it, where it comes from.
- Matrix descriptor (WgmmaDescriptor; 9.7.15.5.1.2.2): start >> 4 (bits 0-13, of the shared address's low
  18 bits), leading byte offset >> 4 (16-29), stride byte offset >> 4 (32-45), base offset (49-51), swizzle
  (62-63: 0 none, 1 128 B, 2 64 B, 3 32 B). Unlike tcgen05's descriptor there is no version field.
- K-major canonical layouts (operand_addresses; 9.7.15.5.1.2.1, the same canonical forms as tcgen05's):
  groups of 8 rows the stride byte offset apart, rows of the swizzle width (16-byte core matrices without
  swizzle, the leading byte offset apart along K), swizzled on address bits [4, 7) ^ [7, 10) for 128 B
  (tcgen05.swizzle). One k16 block of f16 is 32 bytes of each row; the kernels step the descriptor's start
  by 32 bytes per block inside a 128-byte swizzle row.
- A in registers, .f16/.bf16 (a_fragment_positions; 9.7.15.5.1.1.1, figure 148): warp w of the warpgroup
  holds rows 16 w .. 16 w + 15; lane t (group g = t / 4, q = t % 4) register j holds two elements (low half
  first) at row g + 8 (j % 2), columns 2 q + 8 (j / 2) + {0, 1}.
- Accumulator D, .f32 (d_fragment_positions; figure 149): register i of lane t holds row 16 w + g +
  8 ((i / 2) % 2), column 8 (i / 4) + 2 q + i % 2. The Hopper kernel (sm90_kernel.py), which passes the
  board's checks on the H200, reads its accumulator and writes its A fragments with these layouts.

Arithmetic (mma_f16_rows): products of two f16 values are exact in float64; one instruction sums its 16
products per output in float64 and adds the sum to the fp32 accumulator once, rounding to fp32 (nearest
even). Consecutive instructions accumulate in issue order. The hardware's internal order, alignment and
rounding of its adder are not specified by the ISA; its fp32 result may differ from this one in the last
bits (DESIGN.md, "sm_90a").
Not modelled: A from shared memory (descriptor form), MN-major (transposed) operands, base offsets, dtypes
other than f16 -> f32, sparse wgmma.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import EmulatorError
from .tcgen05 import swizzle

SWIZZLE_BYTES = {0: 0, 1: 128, 2: 64, 3: 32}
K = 16  # wgmma.mma_async K for f16/bf16 operands
ROWS_PER_WARP = 16  # of the warpgroup's M = 64


@dataclass(frozen=True)
class WgmmaDescriptor:
    start: int
    leading_offset: int
    stride_offset: int
    base_offset: int
    swizzle_bytes: int

    @classmethod
    def decode(cls, desc: int) -> "WgmmaDescriptor":
        d = cls(start=(desc & 0x3FFF) << 4, leading_offset=((desc >> 16) & 0x3FFF) << 4,
                stride_offset=((desc >> 32) & 0x3FFF) << 4, base_offset=(desc >> 49) & 7,
                swizzle_bytes=SWIZZLE_BYTES[(desc >> 62) & 3])
        if d.base_offset:
            raise EmulatorError("unimplemented", f"wgmma matrix descriptor 0x{desc:016x}: base offset {d.base_offset}")
        return d


def operand_addresses(desc: WgmmaDescriptor, rows: int, row_bytes: int) -> np.ndarray:
    """Shared memory offsets (rows, row_bytes) of a K-major operand through its descriptor."""
    width = desc.swizzle_bytes or 16
    r = np.arange(rows)[:, None]
    k = np.arange(row_bytes)[None, :]
    offset = (r // 8) * desc.stride_offset + (k // width) * desc.leading_offset + (r % 8) * width + k % width
    return swizzle(desc.start + offset, desc.swizzle_bytes)


def a_fragment_positions() -> tuple[np.ndarray, np.ndarray]:
    """(row, column) within a warp's 16 x 16 block of A, each (32 lanes, 8 elements): element 2 j + h is
    register j's half h (h = 0 the low 16 bits)."""
    t = np.arange(32)[:, None]
    e = np.arange(8)[None, :]
    j, h = e // 2, e % 2
    return t // 4 + 8 * (j % 2), 2 * (t % 4) + 8 * (j // 2) + h


def d_fragment_positions(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) within a warp's 16 x n block of D, each (32 lanes, n / 2 registers)."""
    t = np.arange(32)[:, None]
    i = np.arange(n // 2)[None, :]
    return t // 4 + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * (t % 4) + i % 2


def f16_pairs(words: np.ndarray) -> np.ndarray:
    """(lanes, registers) b32 words of f16x2 -> (lanes, 2 registers) float64, low half first."""
    words = words.astype(np.uint32)
    halves = np.stack([words & 0xFFFF, words >> 16], axis=-1).astype(np.uint16).view(np.float16)
    return halves.reshape(words.shape[0], -1).astype(np.float64)


def mma_f16_rows(a_words: np.ndarray, b: np.ndarray, acc: np.ndarray | None, negate_a: bool,
                 negate_b: bool) -> np.ndarray:
    """One warp's part of wgmma.mma_async.m64nNk16.f32.f16.f16 with A in registers: its 16 rows.
    a_words (32 lanes, 4) b32 A fragment; b (N, 16) float64 (K-major B); acc (32, N / 2) float32 or None
    (scale-d false). Returns the new (32, N / 2) float32 accumulator fragment."""
    n = b.shape[0]
    rows, cols = a_fragment_positions()
    a = np.zeros((ROWS_PER_WARP, K))
    a[rows, cols] = f16_pairs(a_words)
    if negate_a:
        a = -a
    if negate_b:
        b = -b
    product = a @ b.T  # (16, N): sums of 16 exact products, in float64
    d_rows, d_cols = d_fragment_positions(n)
    result = product[d_rows, d_cols]
    if acc is not None:
        result = acc.astype(np.float64) + result
    return result.astype(np.float32)
