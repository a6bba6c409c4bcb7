"""Hopper (sm_90a) path of the NVFP4 block-scaled grouped GEMM, in CuTe DSL.

C[g] = A[g] . B[g]^T per group g, A = tokens (M x K, FP4 e2m1 + e4m3 scale per 16 k),
B = weights (N x K, same format), C fp16 (M x N).  Hopper has no FP4 tensor cores, so both
operands are dequantized to fp16 (FP4 x e4m3 is exact in fp16) and fed to wgmma (HGMMA) with
fp32 accumulation: the same function as the block-scaled MMA up to summation order.

Design note
-----------
Operand swap.  Tokens per group are few (M = 40..384) and weights many (N x K up to 4096 x 7168),
so the weights are wgmma's M side (64 rows per warpgroup, A operand from registers) and the
tokens wgmma's N side (8..256 in steps of 8, B operand from shared memory).  The accumulator of
one warpgroup is C^T for 64 weight rows x n tokens.

Two kernels per call.  (1) A token pre-pass turns the FP4 tokens x their scales into fp16 once
per call (M x K, a few MB) in a scratch buffer.  Dequantizing tokens inside the GEMM instead
repeats that work for every 128-row weight tile (N / 128 times) and needs a barrier between the
consumer warpgroups per k-step; measured, that made the GEMM issue-bound (bench 1: 171 us).
(2) The persistent GEMM, launched with programmatic dependent launch: its prologue and weight
stream start while the pre-pass finishes; only its token loads wait (griddepcontrol.wait).

Tiles and schedule.  A GEMM tile is 128 weight rows (two consumer warpgroups x 64) x up to 256
tokens x the whole K.  Its wgmma N is the tile's token count rounded up to TOKEN_STEP (16), one
of the VARIANTS compiled side by side, so small-M groups waste little tensor-core work and a
group of <= 256 tokens is one tile high (each weight row is dequantized once).  The tile list of
a plan is built once on the host (shapes are known then) and spread over min(#SMs, #tiles)
persistent CTAs by longest-processing-time-first plus swaps, because tile costs differ up to 8x
between groups and round-robin leaves SMs idle; the token-tile height (256/192/128/64) is picked
by the modeled makespan (two groups of 3072 x 4096 would otherwise make only 72 tiles for 132
SMs).  Each CTA runs its tiles sorted by variant, one loop per variant: with the accumulator
shapes behind branches inside one loop, ptxas ran out of registers and serialized every wgmma.
Nothing in the compiled code depends on shapes or group count.

Warp roles (384 threads, setmaxnreg 40 / 232) and barriers.  Warp 0 streams weights: per k-tile
(64 k) one TMA of the 128-row FP4 tile (32 B per row, no swizzle) and a 1-D bulk copy of its
scales (in the 128x4 blocked layout 128 rows x one k-tile is one 512-byte run), on a 7-deep
PipelineTmaAsync (4.5 KB stages from DRAM).  Warp 1 streams tokens: per k-tile the tile's wgmma N
rows of fp16 tokens, as 64-row TMA boxes and then 16-row boxes for the rest (128B swizzle =
wgmma's K-major layout; rows past M zero-filled), on a 6-deep pipeline of 32 KB stages
(L2-resident data), arriving with the per-tile transaction size itself.  Token reads from L2 set
the pace of a k-tile, so no row beyond N is loaded.  Warpgroups 1 and 2 consume independently:
dequantize their 64 weight rows straight into wgmma A fragments and release the weight stage at
once, issue 4 wgmma k16 blocks on the token stage, keep one wgmma group in flight (two A fragments
alternate) and release a token stage when the wgmma that read it has retired.
TMA descriptors (tokens in both box sizes, weights) per group are written once per plan by a small
init kernel into a global workspace (template descriptor + tensormap.replace of address, shape
and stride) and used through tma_desc_ptr after a tensormap acquire fence when the group changes.
NVIDIA's grouped example rewrites descriptors inside the GEMM on every group change; addresses
are fixed per plan here, so that work leaves the per-call path.

Dequantization.  The contraction order over k is free when both operands use the same
permutation, so k is permuted within each 64-k tile to make loads cheap: a thread's A fragment
(k pairs 2q, 2q+1, 2q+8, 2q+9 of each k16 block) comes from 8 contiguous bytes per row, and each
32-bit word yields four f16x2 with 11 integer instructions (nibble bits s,e1,e0,m moved to f16
bits 15,11,10,9 give value * 2^-14 exactly, subnormals included; two nibbles 8 bits apart share
their shifts, see FP4_TO_F16_PTX).  Scales are converted with cvt.f16x2.e4m3x2 and multiplied by
2^7, so every fp16 operand is value * 2^-7 (exact; 6 * 448 does not overflow) and the epilogue
multiplies the fp32 accumulator by 2^14.  The pre-pass writes the tokens in the same permuted
order.  The k-loop is sensitive to its instruction count: 11 instead of 15 integer instructions
per word, with the per-thread shared-memory addresses pinned out of the loop (pin), made
benchmarks 3 and 4 5-6% and benchmarks 1 and 2 1-2% faster (H200).

Epilogue.  Accumulators are scaled, rounded to fp16 and paired across neighbouring lanes with one
shuffle so each lane stores 4 bytes (two adjacent n) of a token row; rows m >= M are not written.
The tensor cores idle during it, so it is kept short: one pointer step and one predicate per
8 token rows, shared by the lane's two stores.

Shared memory: 7 x 4.5 KB weight stages + 6 x 32 KB token stages = 225 KB of the 227 KB.
K-tile 64 = one 128-byte swizzle row of fp16 tokens and 4 wgmma k16 blocks.
"""

from types import SimpleNamespace

import torch

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass._mlir.dialects import llvm
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.cutlass_dsl import T, dsl_user_op

# Shared with the B200 path (submission.py imports this module only on Hopper, after it is loaded):
# the tile schedule, the launch arguments and the per-group descriptor selection.
from submission import (
    asm,
    build_tile_schedule,
    CompiledLaunch,
    gmem_matrix,
    group_tma_desc,
    ir_i32,
    LaunchArgs,
    LaunchArgsView,
    pack_f16x2,
    RECORD_FIELDS,
    row_pair_word,
    ScheduleShape,
    select_by_group,
    SF_BLOCK_BYTES,  # one 128-row x 4-column block of the blocked scale layout = one k-tile here
    store_words_if,
)

# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------
TILE_W = 128  # weight rows per CTA tile (2 consumer warpgroups x wgmma M=64)
TILE_K = 64  # k per pipeline stage: 32 B of FP4 weights per row, one 128B-swizzle row of fp16
MAX_TOKENS = 256  # tokens per CTA tile (largest wgmma N)
TOKEN_STEP = 16  # granularity of the compiled wgmma N variants
VARIANTS = tuple(range(TOKEN_STEP, MAX_TOKENS + 1, TOKEN_STEP))
# Stage counts: 7 weight + 6 token stages measured 0.5-2% faster than 12 + 5 on all four
# benchmarks (H200); 7 k-tiles of weights in flight still cover the DRAM latency.
W_STAGES = 7  # weights + scales: 4.5 KB per stage, streamed from DRAM
T_STAGES = 6  # fp16 tokens: up to 32 KB per stage, L2-resident
# Scheduler cost model, in wgmma N columns per k-tile: N + TILE_COST_K.  Clock-stamped tiles on the
# H200 took 561 cycles per k-tile at N = 64 and 1087 at N = 256 (ratio 1.94; N + 128 gives 2.0):
# small N pays for more than its FLOPs (token rows read from L2 per k-tile, see the token boxes
# below, and wgmma issue).  Against 64, 128 made bench 2 5% faster (65.2 -> 61.8 us) and left
# benchmarks 1, 3, 4 unchanged.
TILE_COST_K = 128
BALANCE_FLOOR = 1.15
TOKEN_CHUNKS = (256, 192, 128, 64)  # candidate token-tile heights (multiples of the 64-row box)

W_STAGE_BYTES = TILE_W * TILE_K // 2
W_TX_BYTES = W_STAGE_BYTES + SF_BLOCK_BYTES
# Token TMA boxes: a tile loads exactly its wgmma N rows, as 64-row boxes (64 x 64 fp16, 8 KB) and
# 16-row boxes (2 KB) for the rest.  The k-tile's cost tracks the token bytes it pulls from L2 (H200,
# clock-stamped tiles: ~570 / 700 / 860 / 1070 cycles for 1 / 2 / 3 / 4 boxes of 64 rows, whatever N
# inside); 64-row boxes alone loaded 12-24% more rows than N on benchmarks 1 and 2, and 16-row boxes
# alone (4x the TMA requests) made benchmarks 3 and 4 2-4% slower.
TOKEN_BOX_ROWS = 64
TOKEN_SUBBOX_ROWS = 16
TOKEN_ROW_BYTES = TILE_K * 2
TOKEN_STAGE_ELEMS = MAX_TOKENS * TILE_K
NUM_THREADS = 384
PRODUCER_REGS = 40
CONSUMER_REGS = 232
PREP_THREADS = 128  # pre-pass: one (row, 64-k tile) unit per thread
EPILOGUE_SCALE = 16384.0  # 2^14 undoes the 2^-7 carried by each fp16 operand
CONSUMER_THREADS = 256


# ---------------------------------------------------------------------------------------------
# Inline PTX helpers.  Memory ops are marked side-effecting so LLVM keeps them ordered with the
# mbarrier waits and named barriers around them.
# ---------------------------------------------------------------------------------------------
def _unpack(struct_val, n):
    return [cutlass.Int32(llvm.extractvalue(T.i32(), struct_val, [i])) for i in range(n)]


@dsl_user_op
def pin(value, *, loc=None, ip=None):
    """`value`, computed here once: a side-effecting move the compiler cannot sink into loops."""
    return cutlass.Int32(asm(T.i32(), [ir_i32(value, loc, ip)], "mov.b32 $0, $1;", "=r,r", True))


@dsl_user_op
def lds_u8(addr, *, loc=None, ip=None):
    return cutlass.Int32(
        asm(T.i32(), [ir_i32(addr, loc, ip)], "ld.shared.u8 $0, [$1];", "=r,r", True)
    )


@dsl_user_op
def lds_vec(addr, count: int, *, loc=None, ip=None):
    """ld.shared of `count` (2 or 4) consecutive 32-bit words."""
    outs = ", ".join(f"${i}" for i in range(count))
    res = asm(
        llvm.StructType.get_literal([T.i32()] * count),
        [ir_i32(addr, loc, ip)],
        f"ld.shared.v{count}.b32 {{{outs}}}, [${count}];",
        ",".join(["=r"] * count + ["r"]),
        True,
    )
    return _unpack(res, count)


@dsl_user_op
def sts_v4(addr, v0, v1, v2, v3, *, loc=None, ip=None):
    asm(
        None,
        [ir_i32(a, loc, ip) for a in (addr, v0, v1, v2, v3)],
        "st.shared.v4.b32 [$0], {$1, $2, $3, $4};",
        "r,r,r,r,r",
        True,
    )


@dsl_user_op
def bulk_copy_g2s(smem_addr, gmem_addr, nbytes, mbar_addr, *, loc=None, ip=None):
    """1-D TMA bulk copy (no tensor map) completing on an mbarrier's transaction count."""
    asm(
        None,
        [
            ir_i32(smem_addr, loc, ip),
            cutlass.Int64(gmem_addr).ir_value(loc=loc, ip=ip),
            ir_i32(nbytes, loc, ip),
            ir_i32(mbar_addr, loc, ip),
        ],
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [$0], [$1], $2, [$3];",
        "r,l,r,r",
        True,
    )


@dsl_user_op
def scale_pair(word, byte_index: int, *, loc=None, ip=None):
    """f16x2 (s, s) with s = e4m3 byte `byte_index` of `word` times 2^7 (exact)."""
    sel = byte_index * 0x1111
    return cutlass.Int32(
        asm(
            T.i32(),
            [ir_i32(word, loc, ip)],
            "{\n .reg .b32 t, k;\n .reg .b16 lo, hi;\n"
            f" prmt.b32 t, $1, 0, {sel};\n"
            " mov.b32 {lo, hi}, t;\n"
            " cvt.rn.f16x2.e4m3x2 $0, lo;\n"
            " mov.b32 k, 0x58005800;\n"
            " mul.rn.f16x2 $0, $0, k;\n}",
            "=r,r",
            False,
        )
    )


F16_NIBBLE_MASK = 0x8E008E00  # f16 bits 15 (sign) and 11, 10, 9 (exponent 1..0, mantissa msb)
BITSELECT = 0xE4  # lop3 truth table of (a & c) | (b & ~c)
# PTX of dequant_fp4 up to the scale multiply: word $4 -> f16x2 outputs $0..$3 (value * 2^-14).
# Two nibbles of a half 8 bits apart share their shifts: a bit-select builds a word in which both
# have their sign 6 bits above their 3 magnitude bits (odd nibbles: magnitudes moved down 3; even
# nibbles: signs moved up 3), then each output is one shift and one mask (which clears whatever
# the bit-select left in the other bits): 11 integer instructions per word instead of 15 with a
# separate sign shift and magnitude shift per output.  tests/kernel/test_sm90.py interprets this text.
FP4_TO_F16_PTX = (
    " shr.b32 t, $4, 3;\n"
    f" lop3.b32 odd, $4, t, 0x80808080, {BITSELECT:#x};\n"  # signs 7+8i, magnitudes 1+8i..3+8i
    f" and.b32 $0, odd, {F16_NIBBLE_MASK:#x};\n"
    " shl.b32 t, odd, 8;\n"
    f" and.b32 $2, t, {F16_NIBBLE_MASK:#x};\n"
    " shl.b32 t, $4, 3;\n"
    f" lop3.b32 even, t, $4, 0x40404040, {BITSELECT:#x};\n"  # signs 6+8i, magnitudes 8i..2+8i
    " shl.b32 t, even, 1;\n"
    f" and.b32 $1, t, {F16_NIBBLE_MASK:#x};\n"
    " shl.b32 t, even, 9;\n"
    f" and.b32 $3, t, {F16_NIBBLE_MASK:#x};\n"
)


@dsl_user_op
def dequant_fp4(word, scale2, *, loc=None, ip=None):
    """Four f16x2 values (fp4 * scale * 2^-7) of the eight nibbles of `word`; scale2 is f16x2.

    Output o takes the nibble at bits 12-4o..15-4o of each 16-bit half: o=0 high nibbles of bytes
    1 and 3, o=1 low nibbles of bytes 1 and 3, o=2 high nibbles of bytes 0 and 2, o=3 low nibbles
    of bytes 0 and 2; the nibble of the low half is the lower k of the pair.  Nibble s,e1,e0,m
    goes to f16 bits 15,11,10,9 (value * 2^-14 exactly, subnormals included), see FP4_TO_F16_PTX.
    """
    text = "{\n .reg .b32 t, odd, even;\n" + FP4_TO_F16_PTX
    for o in range(4):
        text += f" mul.rn.f16x2 ${o}, ${o}, $5;\n"
    text += "}"
    res = asm(
        llvm.StructType.get_literal([T.i32()] * 4),
        [ir_i32(word, loc, ip), ir_i32(scale2, loc, ip)],
        text,
        "=r,=r,=r,=r,r,r",
        False,
    )
    return _unpack(res, 4)


@dsl_user_op
def ldg_v4(addr, *, loc=None, ip=None):
    res = asm(
        llvm.StructType.get_literal([T.i32()] * 4),
        [cutlass.Int64(addr).ir_value(loc=loc, ip=ip)],
        "ld.global.nc.v4.b32 {$0, $1, $2, $3}, [$4];",
        "=r,=r,=r,=r,l",
        True,
    )
    return _unpack(res, 4)


@dsl_user_op
def ldg_b32(addr, *, loc=None, ip=None):
    return cutlass.Int32(
        asm(
            T.i32(),
            [cutlass.Int64(addr).ir_value(loc=loc, ip=ip)],
            "ld.global.nc.b32 $0, [$1];",
            "=r,l",
            True,
        )
    )


@dsl_user_op
def stg_v4(addr, v0, v1, v2, v3, *, loc=None, ip=None):
    asm(
        None,
        [cutlass.Int64(addr).ir_value(loc=loc, ip=ip)] + [ir_i32(v, loc, ip) for v in (v0, v1, v2, v3)],
        "st.global.v4.b32 [$0], {$1, $2, $3, $4};",
        "l,r,r,r,r",
        True,
    )


def _sf_offset(row, k_tile, k_tiles):
    """Byte offset of the 4 scales (k_tile*4 .. +3) of `row` in the 128x4 blocked layout."""
    return (
        (cutlass.Int64(row >> 7) * k_tiles + k_tile) * SF_BLOCK_BYTES
        + (row & 31) * 16
        + ((row >> 5) & 3) * 4
    )


def _token_smem_layout(rows, stages):
    """(rows, 64 k, stages) fp16 K-major with 128B swizzle, stages at the stride of a full
    MAX_TOKENS-row stage (a variant uses the first `rows` rows of each stage)."""
    atom = warpgroup.make_smem_layout_atom(warpgroup.SmemLayoutAtomKind.K_SW128, cutlass.Float16)
    one = cute.tile_to_shape(atom, (rows, TILE_K), order=(0, 1))
    staged = cute.make_layout(
        (*one.outer.shape, stages), stride=(*one.outer.stride, TOKEN_STAGE_ELEMS)
    )
    return one, staged


def _tma_atoms(w_template, tok_template):
    """TMA atoms: weights (128 rows x 32 B, no swizzle), tokens (64 and 16 rows x 64 fp16, SW128)."""
    w_smem = cute.make_layout((TILE_W, TILE_K // 2), stride=(TILE_K // 2, 1))
    atom_w, tma_w = cpasync.make_tiled_tma_atom(
        cpasync.CopyBulkTensorTileG2SOp(), w_template, w_smem, (TILE_W, TILE_K // 2)
    )
    tok = []
    for rows in (TOKEN_BOX_ROWS, TOKEN_SUBBOX_ROWS):
        tok_smem, _ = _token_smem_layout(rows, 1)
        tok.extend(cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), tok_template, tok_smem, (rows, TILE_K)
        ))
    return (atom_w, tma_w, *tok)


# ---------------------------------------------------------------------------------------------
# Token pre-pass: FP4 tokens x scales -> fp16 (x 2^-7), k permuted within each 64-k tile
# ---------------------------------------------------------------------------------------------
@cute.struct
class _PrepStorage:
    staging: cute.struct.Align[cute.struct.MemRange[cutlass.Uint8, PREP_THREADS * 128], 128]


@cute.kernel
def _token_kernel(args: LaunchArgsView):
    """One thread per (row, 64-k tile) unit u: 32 B of FP4 at a + 32u and 4 scales in, 128 B of
    fp16 out at tok + 128u.  Chunks go through shared memory (XOR-swizzled, conflict-free) so
    each warp store writes 512 contiguous bytes; storing straight from the thread left partial
    sectors and ran 4x slower.

    Chunk c = 2j + s (8 fp16, logical k 16j + 8s .. +7) holds, at positions 2q', 2q'+1, output
    o = 2 (j % 2) + s of word W[2q' + j // 2] of the row's 8 words: the k permutation of the
    weights' wgmma fragments (see _consume_tile)."""
    cute.arch.griddepcontrol_launch_dependents()  # let the GEMM start streaming weights
    tidx, _, _ = cute.arch.thread_idx()
    bx, g, _ = cute.arch.block_idx()
    m = select_by_group(g, args.m)
    k = select_by_group(g, args.k)
    k_tiles = k // TILE_K
    num_units = m * k_tiles
    warp_base = bx * PREP_THREADS + (tidx & ~31)
    lane = tidx & 31
    unit = warp_base + lane
    staging = utils.SmemAllocator().allocate(_PrepStorage).staging.data_ptr().toint()
    warp_smem = staging + (tidx & ~31) * 128
    if unit < num_units:
        row = unit // k_tiles
        kt = unit - row * k_tiles
        src = select_by_group(g, args.a) + cutlass.Int64(unit) * (TILE_K // 2)
        words = ldg_v4(src) + ldg_v4(src + 16)
        sf_word = ldg_b32(select_by_group(g, args.sfa) + _sf_offset(row, kt, k_tiles))
        outs = [dequant_fp4(words[i], scale_pair(sf_word, i // 2)) for i in range(8)]
        for c in cutlass.range_constexpr(8):
            j, s = c // 2, c % 2
            o, w = 2 * (j % 2) + s, j // 2
            sts_v4(warp_smem + lane * 128 + ((c ^ (lane & 7)) << 4), *[outs[2 * qq + w][o] for qq in range(4)])
    cute.arch.sync_warp()
    dst = select_by_group(g, args.tokens) + cutlass.Int64(warp_base) * 128
    for i in cutlass.range_constexpr(8):
        src_unit = 4 * i + (lane >> 3)
        if warp_base + src_unit < num_units:
            vals = lds_vec(warp_smem + src_unit * 128 + (((lane & 7) ^ (src_unit & 7)) << 4), 4)
            stg_v4(dst + i * 512 + lane * 16, *vals)


# ---------------------------------------------------------------------------------------------
# The GEMM kernel
# ---------------------------------------------------------------------------------------------
def _tiled_mma(n):
    return sm90_utils.make_trivial_tiled_mma(
        cutlass.Float16,
        cutlass.Float16,
        warpgroup.OperandMajorMode.K,
        warpgroup.OperandMajorMode.K,
        cutlass.Float32,
        (1, 1, 1),
        tiler_mn=(64, n),
        a_source=warpgroup.OperandSource.RMEM,
    )


@cute.struct
class _Storage:
    w_barriers: cute.struct.MemRange[cutlass.Int64, 2 * W_STAGES]
    t_barriers: cute.struct.MemRange[cutlass.Int64, 2 * T_STAGES]
    tokens: cute.struct.Align[
        cute.struct.MemRange[cutlass.Float16, T_STAGES * TOKEN_STAGE_ELEMS], 1024
    ]
    w: cute.struct.Align[cute.struct.MemRange[cutlass.Uint8, W_STAGES * W_STAGE_BYTES], 1024]
    sfw: cute.struct.Align[cute.struct.MemRange[cutlass.Uint8, W_STAGES * SF_BLOCK_BYTES], 128]


@cute.jit
def _consume_tile(n_tok, c, tile, pw, pt, st):
    """Mainloop + epilogue of one record (a tile over its whole K) with wgmma N = n_tok; st carries
    the pipeline states."""
    tiled_mma = _tiled_mma(n_tok)
    thr_mma = tiled_mma.get_slice(c.wg_tid)
    acc = cute.make_rmem_tensor(
        thr_mma.partition_C(cute.make_identity_tensor((64, n_tok))).shape, cutlass.Float32
    )
    frag_shape = thr_mma.partition_A(cute.make_identity_tensor((64, TILE_K))).shape
    frags = [tiled_mma.make_fragment_A(frag_shape) for _ in range(2)]
    frags32 = [cute.recast_tensor(f, cutlass.Int32) for f in frags]
    one, staged = _token_smem_layout(n_tok, T_STAGES)
    s_tok = cute.make_tensor(cute.recast_ptr(c.tokens_ptr, one.inner, dtype=cutlass.Float16), staged)
    tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(s_tok))
    tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
    acc.fill(0.0)
    w_read, t_read, t_release = st

    # Two A fragments alternate so the dequantization of k-tile i+1 overlaps wgmma i.
    for kt2 in range(tile.k_end // (2 * TILE_K)):
        for par in cutlass.range_constexpr(2):
            # Weights -> wgmma A fragments.  Thread (g, q) of warp w holds rows r = 16w + g and
            # r + 8, k pairs 2q, 2q+1 and 2q+8, 2q+9 of each k16 block: those are fed from
            # bytes 8q..8q+7 of the row (two words; word w, output o -> k16 block 2w + o // 2,
            # pair o % 2), whose scale is column q of the k-tile's four.
            pw.consumer_wait(w_read)
            w_base = c.w_thread + w_read.index * W_STAGE_BYTES
            sf_base = c.sf_thread + w_read.index * SF_BLOCK_BYTES
            r_words = [lds_vec(w_base + rs * 8 * (TILE_K // 2), 2) for rs in range(2)]
            r_scales = [scale_pair(lds_u8(sf_base + 128 * rs), 0) for rs in range(2)]
            for rs in cutlass.range_constexpr(2):
                for w in cutlass.range_constexpr(2):
                    vals = dequant_fp4(r_words[rs][w], r_scales[rs])
                    for o in cutlass.range_constexpr(4):
                        frags32[par][rs + 2 * (o % 2) + 4 * (2 * w + o // 2)] = vals[o]
            # The stage's bytes are in registers now.  Every consumer thread arrives (count 256)
            # rather than lane 0 after a warp sync: compute-sanitizer's racecheck orders only a
            # thread's own loads before its arrive, and flagged the TMA refill against lanes
            # 1-31's loads when one lane per warp arrived (with or without __syncwarp).
            pw.sync_object_empty.arrive(w_read.index, pw.consumer_mask)
            w_read.advance()

            pt.consumer_wait(t_read)
            warpgroup.fence()
            for kb in cutlass.range_constexpr(TILE_K // 16):
                cute.gemm(
                    tiled_mma, acc, frags[par][None, None, kb], tCrB[None, None, kb, t_read.index], acc
                )
            warpgroup.commit_group()
            t_read.advance()
            warpgroup.wait_group(1)
            # wgmma of the previous k-tile has retired: its token stage may be refilled.
            if cutlass.const_expr(par == 1) or kt2 > 0:
                pt.consumer_release(t_release)
                t_release.advance()
    warpgroup.wait_group(0)
    pt.consumer_release(t_release)
    t_release.advance()

    _store_c(acc, n_tok, c, tile)
    return w_read, t_read, t_release


@cute.jit
def _store_c(acc, n_tok, c, tile):
    """The tile's accumulator, scaled, rounded to fp16 and stored to C.
    acc element (v0, v1, v2) is weight row 16*warp + g + 8*v1, token 2q + v0 + 8*v2.
    Lanes g and g^1 swap halves so each stores two adjacent n of one token row (4 bytes)."""
    odd_g = c.g & 1
    m_first = 2 * c.q + odd_g  # this lane's token row for v2 = 0; v2 adds 8 rows
    rows_left = tile.m_end - tile.t0 - m_first
    n_col = tile.n0 + c.wg * 64 + c.warp * 16 + c.g - odd_g
    addr = tile.c_ptr + (cutlass.Int64(tile.t0 + m_first) * tile.n + n_col) * 2
    step = cutlass.Int64(tile.n) * 16  # 8 token rows of fp16
    for v2 in cutlass.range_constexpr(n_tok // 8):
        words = []
        for v1 in cutlass.range_constexpr(2):
            e = 2 * v1 + 4 * v2
            mine = pack_f16x2(acc[e] * EPILOGUE_SCALE, acc[e + 1] * EPILOGUE_SCALE)
            words.append(row_pair_word(mine, odd_g, 4))  # lane ^ 4 holds weight row g ^ 1
        store_words_if(addr, words, rows_left, 8 * v2, 16)  # v1 = 1 is 8 n (16 B) on
        addr = addr + step


@cute.jit
def _produce_weights(w_atoms, tma_w, args, tiles, tile_begin, tile_end, pw, smem):
    """Warp 0: per k-tile, TMA the 128-row FP4 weight tile and bulk-copy its scale block (in the
    128x4 blocked layout, 128 rows x one 64-k tile is one contiguous 512-byte run).  The TMA
    coordinates come from group 0's tensor; the group's own descriptor (a kernel parameter) bounds
    them."""
    g_w = cute.local_tile(tma_w, (TILE_W, TILE_K // 2), (None, None))
    tWs, tWg = cpasync.tma_partition(
        w_atoms[0], 0, cute.make_layout(1), cute.group_modes(smem.w, 0, 2), cute.group_modes(g_w, 0, 2)
    )
    state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, W_STAGES)
    for t in range(tile_begin, tile_end):
        g = tiles[t, 0]
        n0 = tiles[t, 1]
        k_tiles = tiles[t, 6] // TILE_K
        desc = group_tma_desc(g, w_atoms)
        scales = select_by_group(g, args.sfb)
        for kt in range(0, k_tiles):
            pw.producer_acquire(state)
            bar = pw.producer_get_barrier(state)
            cute.copy(
                w_atoms[0],
                tWg[(None, n0 // TILE_W, kt)],
                tWs[(None, state.index)],
                tma_bar_ptr=bar,
                tma_desc_ptr=desc,
            )
            with cute.arch.elect_one():
                bulk_copy_g2s(
                    smem.sfw_addr + state.index * SF_BLOCK_BYTES,
                    scales + _sf_offset(n0, kt, k_tiles),
                    SF_BLOCK_BYTES,
                    bar.toint(),
                )
            state.advance()
    pw.producer_tail(state)


@cute.jit
def _produce_tokens(box_atoms, sub_atoms, tmas, tiles, tile_begin, tile_end, pt, smem):
    """Warp 1: per k-tile, TMA the tile's fp16 tokens: its wgmma N rows as 64-row boxes, then 16-row
    boxes (rows past M are zero-filled).  The transaction size depends on the tile, so this
    arrives on the full barrier itself instead of through PipelineTmaAsync's producer_acquire."""
    parts = []
    for atoms, tma, rows, boxes_smem in zip(
        (box_atoms, sub_atoms), tmas, (TOKEN_BOX_ROWS, TOKEN_SUBBOX_ROWS), smem.token_boxes
    ):
        g_t = cute.local_tile(tma, (rows, TILE_K), (None, None))
        parts.append(cpasync.tma_partition(
            atoms[0], 0, cute.make_layout(1), cute.group_modes(boxes_smem, 0, 2), cute.group_modes(g_t, 0, 2)
        ))
    (tBs, tBg), (tSs, tSg) = parts
    boxes_per_stage = MAX_TOKENS // TOKEN_BOX_ROWS
    subboxes_per_box = TOKEN_BOX_ROWS // TOKEN_SUBBOX_ROWS
    state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, T_STAGES)
    # The GEMM is launched with programmatic dependent launch: everything before this point (and
    # the weight stream) overlaps the token pre-pass; its fp16 tokens are read only after it.
    cute.arch.griddepcontrol_wait()
    for t in range(tile_begin, tile_end):
        g = tiles[t, 0]
        t0 = tiles[t, 2]
        k_tiles = tiles[t, 6] // TILE_K
        rows = (tiles[t, 4] - t0 + TOKEN_STEP - 1) // TOKEN_STEP * TOKEN_STEP  # the wgmma N
        boxes = rows // TOKEN_BOX_ROWS
        subboxes = (rows - boxes * TOKEN_BOX_ROWS) // TOKEN_SUBBOX_ROWS
        sub0 = (t0 + boxes * TOKEN_BOX_ROWS) // TOKEN_SUBBOX_ROWS  # first 16-row box in gmem
        desc_box = group_tma_desc(g, box_atoms)
        desc_sub = group_tma_desc(g, sub_atoms)
        for kt in range(0, k_tiles):
            pt.sync_object_empty.wait(state.index, state.phase)
            bar = pt.producer_get_barrier(state)
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(bar, rows * TOKEN_ROW_BYTES)
            for b in range(boxes):
                cute.copy(
                    box_atoms[0],
                    tBg[(None, t0 // TOKEN_BOX_ROWS + b, kt)],
                    tBs[(None, state.index * boxes_per_stage + b)],
                    tma_bar_ptr=bar,
                    tma_desc_ptr=desc_box,
                )
            for b in range(subboxes):
                cute.copy(
                    sub_atoms[0],
                    tSg[(None, sub0 + b, kt)],
                    tSs[(None, (state.index * boxes_per_stage + boxes) * subboxes_per_box + b)],
                    tma_bar_ptr=bar,
                    tma_desc_ptr=desc_sub,
                )
            state.advance()
    pt.producer_tail(state)


@cute.jit
def _consume(args, tiles, cta_tiles, bidx, pw, pt, smem, tidx, wg):
    """Consumer warpgroups: walk the CTA's tiles, one loop per wgmma N variant.

    The CTA's tiles are sorted by variant, so each variant is a separate loop rather than a
    branch inside one loop: with eight accumulator shapes behind run-time branches ptxas ran out
    of registers and serialized every wgmma; separate loops keep each one's registers apart.
    """
    wg_tid = tidx % 128
    lane = tidx % 32
    warp = wg_tid // 32
    g = lane // 4
    r0 = wg * 64 + warp * 16 + g
    c = SimpleNamespace(
        wg=wg,
        wg_tid=wg_tid,
        warp=warp,
        g=g,
        q=lane % 4,
        # Shared-memory addresses of the thread's weight bytes (row r0, bytes 8q..8q+7; row r0 + 8
        # is 256 bytes on) and scale (row r0, column q of the 128x4 blocked block; row r0 + 8 is
        # 128 bytes on, as r0 % 32 <= 23) in stage 0.  Pinned: left as plain arithmetic, the
        # compiler recomputed them from tid.x in every k-loop iteration (~9 instructions/k-tile).
        lane=lane,
        w_thread=pin(smem.w_addr + r0 * (TILE_K // 2) + 8 * (lane % 4)),
        sf_thread=pin(smem.sfw_addr + (r0 & 31) * 16 + (r0 >> 5) * 4 + lane % 4),
        tokens_ptr=smem.tokens_ptr,
    )
    consumer = pipeline.PipelineUserType.Consumer
    st = (
        pipeline.make_pipeline_state(consumer, W_STAGES),
        pipeline.make_pipeline_state(consumer, T_STAGES),
        pipeline.make_pipeline_state(consumer, T_STAGES),
    )
    for vi in cutlass.range_constexpr(len(VARIANTS)):
        for t in range(cta_tiles[bidx, vi], cta_tiles[bidx, vi + 1]):
            tile = SimpleNamespace(
                n0=tiles[t, 1],
                t0=tiles[t, 2],
                m_end=tiles[t, 4],
                n=tiles[t, 5],
                k_end=tiles[t, 6],
                c_ptr=select_by_group(tiles[t, 0], args.c),
            )
            st = _consume_tile(VARIANTS[vi], c, tile, pw, pt, st)


@cute.kernel
def _gemm_kernel(
    w_atoms: tuple,
    tma_w: cute.Tensor,
    box_atoms: tuple,
    tma_box: cute.Tensor,
    sub_atoms: tuple,
    tma_sub: cute.Tensor,
    args: LaunchArgsView,
):
    """The persistent GEMM.  w_atoms, box_atoms, sub_atoms: one TMA atom per group (weights, 64-row
    and 16-row token boxes); tma_*: group 0's coordinate tensors, used for every group."""
    tiles = gmem_matrix(cutlass.Int32, args.tiles, args.num_tiles, RECORD_WORDS)
    cta_tiles = gmem_matrix(cutlass.Int32, args.cta_tiles, args.num_ctas, len(VARIANTS) + 1)
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())

    storage = utils.SmemAllocator().allocate(_Storage)
    pw = pipeline.PipelineTmaAsync.create(
        barrier_storage=storage.w_barriers.data_ptr(),
        num_stages=W_STAGES,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 256),  # see _consume_tile
        tx_count=W_TX_BYTES,
        defer_sync=True,
    )
    pt = pipeline.PipelineTmaAsync.create(
        barrier_storage=storage.t_barriers.data_ptr(),
        num_stages=T_STAGES,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        # Released by lane 0 of each of the 8 consumer warps once wgmma.wait_group has retired the
        # reads: the tensor core read the stage, not the threads' own loads.
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 8),
        tx_count=TOKEN_BOX_ROWS * TOKEN_ROW_BYTES,  # unused: _produce_tokens sets it per stage
    )
    # The token stages seen as 64-row boxes and as 16-row boxes (same bytes, same swizzle).
    box_layouts = [
        cute.tile_to_shape(
            warpgroup.make_smem_layout_atom(warpgroup.SmemLayoutAtomKind.K_SW128, cutlass.Float16),
            (rows, TILE_K, T_STAGES * MAX_TOKENS // rows),
            order=(0, 1, 2),
        )
        for rows in (TOKEN_BOX_ROWS, TOKEN_SUBBOX_ROWS)
    ]
    smem = SimpleNamespace(
        w=storage.w.get_tensor(
            cute.make_layout((TILE_W, TILE_K // 2, W_STAGES), stride=(TILE_K // 2, 1, W_STAGE_BYTES))
        ),
        token_boxes=[storage.tokens.get_tensor(bl.outer, swizzle=bl.inner) for bl in box_layouts],
        w_addr=storage.w.data_ptr().toint(),
        sfw_addr=storage.sfw.data_ptr().toint(),
        tokens_ptr=storage.tokens.data_ptr(),
    )
    tile_begin = cta_tiles[bidx, 0]
    tile_end = cta_tiles[bidx, len(VARIANTS)]

    if warp_idx < 4:
        cute.arch.warpgroup_reg_dealloc(PRODUCER_REGS)
        if warp_idx == 0:
            _produce_weights(w_atoms, tma_w, args, tiles, tile_begin, tile_end, pw, smem)
        if warp_idx == 1:
            _produce_tokens(box_atoms, sub_atoms, (tma_box, tma_sub), tiles, tile_begin, tile_end, pt, smem)
    else:
        cute.arch.warpgroup_reg_alloc(CONSUMER_REGS)
        _consume(args, tiles, cta_tiles, bidx, pw, pt, smem, tidx, warp_idx // 4 - 1)


@cute.jit
def _launch(args: LaunchArgs, pdl: cutlass.Constexpr):
    """Token pre-pass, then the GEMM (with `pdl`, programmatic dependent launch; without it the
    GEMM starts after the pre-pass ends, and its griddepcontrol.wait returns at once).  The TMA
    descriptors of every group are encoded here, in the generated host code, at each launch:
    weights from b, tokens from the group's fp16 scratch."""
    w_atoms, box_atoms, sub_atoms, tmas = [], [], [], []
    for g in cutlass.range_constexpr(len(args.a)):
        weights = gmem_matrix(cutlass.Uint8, args.b[g], args.n[g], args.k[g] // 2)
        tokens = gmem_matrix(cutlass.Float16, args.tokens[g], args.m[g], args.k[g])
        atom_w, tma_w, atom_box, tma_box, atom_sub, tma_sub = _tma_atoms(weights, tokens)
        w_atoms.append(atom_w)
        box_atoms.append(atom_box)
        sub_atoms.append(atom_sub)
        tmas.append((tma_w, tma_box, tma_sub))
    _token_kernel(args).launch(
        grid=(args.prep_blocks, len(args.a), 1),
        block=(PREP_THREADS, 1, 1),
        smem=_PrepStorage.size_in_bytes(),
        stream=args.stream,
    )
    tma_w, tma_box, tma_sub = tmas[0]
    _gemm_kernel(tuple(w_atoms), tma_w, tuple(box_atoms), tma_box, tuple(sub_atoms), tma_sub, args).launch(
        grid=(args.num_ctas, 1, 1),
        block=(NUM_THREADS, 1, 1),
        smem=_Storage.size_in_bytes(),
        min_blocks_per_mp=1,
        stream=args.stream,
        use_pdl=pdl,
    )


# ---------------------------------------------------------------------------------------------
# Host side: schedule, scratch and launch arguments per shape signature
# ---------------------------------------------------------------------------------------------
RECORD_WORDS = len(RECORD_FIELDS)  # int32 per tile record

SCHEDULE = ScheduleShape(
    weight_rows=TILE_W,
    token_chunks=TOKEN_CHUNKS,
    token_variants=VARIANTS,
    tile_cost=lambda n_tok, k: (k // TILE_K) * (n_tok + TILE_COST_K),
    balance_floor=BALANCE_FLOOR,
    group_by_variant=True,
    jobs="tiles",
)

_compiled = {}


def _launch_args(num_groups):
    return LaunchArgs(
        num_groups,
        group_addresses=("tokens",),
        addresses=("tiles", "cta_tiles"),
        integers=("num_tiles", "num_ctas", "prep_blocks"),
    )


def compile_sm90(num_groups, pdl=True):
    """The compiled pre-pass + GEMM for `num_groups` groups (the per-group descriptors are kernel
    parameters, so the group count is part of the kernel); works without a GPU with
    CUTE_DSL_ARCH=sm_90a up to the cubin.  `pdl`: the GEMM launched with programmatic dependent
    launch on the pre-pass (Sm100Config.pdl, the one switch of submission's configuration with a
    Hopper counterpart)."""
    key = (num_groups, bool(pdl))
    if key not in _compiled:
        _compiled[key] = cute.compile(_launch, _launch_args(num_groups), bool(pdl))
    return _compiled[key]


def make_sm90_launch(sizes, device, config):
    """Everything that depends only on the shapes, built once per shape signature: the tile
    schedule (device tables), the fp16 token scratch, and the launch arguments that hold their
    addresses.  The returned launch takes the inputs' addresses per call (see submission.ShapePlan).
    Of `config` (a submission.Sm100Config) only `pdl` applies here."""
    for m, n, k in sizes:
        if m < 1 or n % TILE_W or k % (2 * TILE_K):
            raise ValueError(f"sm90 kernel needs M >= 1, N % {TILE_W} == 0, K % 128 == 0: {(m, n, k)}")
    num_sms = torch.cuda.get_device_properties(device).multi_processor_count
    records, offsets = build_tile_schedule(sizes, num_sms, SCHEDULE)
    tiles = torch.tensor(records, dtype=torch.int32, device=device)
    cta_tiles = torch.tensor(offsets, dtype=torch.int32, device=device)
    # fp16 token scratch, one [m, k] matrix per group (256-byte aligned)
    starts, total = [], 0
    for m, _, k in sizes:
        starts.append(total)
        total += -(-m * k // 128) * 128
    scratch = torch.empty(total, dtype=torch.float16, device=device)

    args = _launch_args(len(sizes))
    args.set_sizes(sizes)
    args.set("tokens", [scratch.data_ptr() + 2 * s for s in starts])
    args.set("tiles", tiles.data_ptr())
    args.set("cta_tiles", cta_tiles.data_ptr())
    args.set("num_tiles", len(records))
    args.set("num_ctas", len(offsets))
    args.set("prep_blocks", max(-(-m * (k // TILE_K) // PREP_THREADS) for m, _, k in sizes))
    # One scratch per plan: submission.ShapePlan makes a call on another stream wait for the
    # previous call's kernels before this launch can overwrite the tokens they read.
    return CompiledLaunch(compile_sm90(len(sizes), config.pdl), args, buffers=(tiles, cta_tiles, scratch), config=config)
