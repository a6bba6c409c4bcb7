"""Tensor memory and the fifth-generation tensor core (tcgen05) as pure functions on NumPy arrays.

PTX ISA 9.7.16 "TensorCore 5th Generation Family Instructions". Each layout decision is one small function
below, with where it came from; "NVIDIA's kernel" means dense_blockscaled_gemm_persistent.py (1-CTA and
2-CTA forms) had to pass with it, which settled what the ISA's figures show but its text does not say.

Each entry: the semantic, the function that holds it, where it comes from.
- Tensor memory: 128 lanes x 512 columns of 32 bits per CTA; address = lane << 16 | column (TensorMemory;
  ISA 9.7.16.2.1). Allocation: a power of two >= 32 columns, the lowest free range; relinquishing the permit
  forbids later allocations (TensorMemory.alloc; 9.7.16.7.1). With cta_group::2 (PairRendezvous; 9.7.16.5,
  Table 46: "issue from two warps, one in each of the current CTA and its peer CTA, in order to collectively
  perform the operation ... the first warp could block until the second warp in the peer CTA also performs
  it"): alloc, dealloc and relinquish_alloc_permit take place when a warp of each CTA of the pair has issued
  the same operation; the allocation is the same columns in both CTAs' tensor memory (a cta_group::2 MMA
  names one accumulator address for both), each warp's CTA gets the address at its own dst.
- Shared-memory matrix descriptor (SmemDescriptor; 9.7.16.4.1, all in the text): start >> 4 (bits 0-13),
  LBO >> 4 (16-29), SBO >> 4 (32-45), version 1 (46-48), base offset (49-51), LBO mode (52), swizzle (61-63:
  0 none, 1 128 B with 32-B atoms, 2 128 B, 4 64 B, 6 32 B).
- K-major canonical layouts (smem_matrix_addresses; 9.7.16.4.2, 5.5.7; NVIDIA's kernel): groups of 8 rows
  SBO apart, rows of the swizzle width (16-B core matrices without swizzle, LBO apart along K), swizzled on
  address bits [4, 7) ^ [7, 10) for 128 B.
- Instruction descriptor of the block-scaled kinds (InstrDescriptor; 9.7.16.4.3's table; M's position from
  NVIDIA's constants, M = 128 at bit 27): B scale id (4-5), A/B format (7-9, 10-12), negate A/B (13, 14),
  A/B major (15, 16), N >> 3 (17-22), scale type (23: 0 ue4m3, 1 ue8m0), M >> 4 (24-28), A scale id (29-30).
- e2m1 packing: element 2i in the low nibble of byte i (fp4_e2m1_decode; 5.2.5; both kernels).
- Accumulator (mma_block_scaled_instruction; 9.7.16.10 data path layouts; NVIDIA's kernel): M = 128 per CTA,
  row m in lane m, column n at the D address + n (fp32); cta_group::2, M = 256: rows 128c.. in CTA c.
- Scale factors, scale_vec::4X (scale_factors; 9.7.16.10.7, whose text says four per row in one 32-bit
  column, duplicated to the four 32-lane quarters; the rest from NVIDIA's kernel): row r's four scales in
  lane r % 32, column address + r // 32, one byte per 16-element block.
- cta_group::2 operands (mma_block_scaled_instruction; NVIDIA's 2-CTA kernel, whose expect-tx of 57344 B
  counts both CTAs' A and half of B each): A rows 0-127 from CTA 0's shared memory, 128-255 from CTA 1's;
  B rows 0..N/2-1 from CTA 0, the rest from CTA 1, same descriptors; SFA from each CTA's tensor memory, SFB
  from the issuing CTA's.
- tcgen05.cp 32x128b.warpx4 (tcgen05_cp; 9.7.16.8.4): 32 rows of 16 B (through the descriptor, no swizzle)
  to lanes i, 32+i, 64+i, 96+i, 4 columns; with cta_group::2 each CTA of the pair from its own shared memory.
- tcgen05.ld (tcgen05_ld; 9.7.16.8.3, matrix fragments): 32x32b.xN, thread t of warp w reads lane
  32 (w % 4) + t, register j = column + j; 16x256b.xN (the figure; NVIDIA's epilogue), in repetition i
  (8 columns) thread t holds lane base + t / 4 at columns 8i + 2 (t % 4) + {0, 1}, then lane base + 8 + t / 4.
- stmatrix m8n8 .x1/.x2/.x4 [.trans] b16 (stmatrix_m8n8; 9.7.9.x, figures): lanes 8i..8i+7 give matrix i's
  row addresses; register i of lane t holds row t / 4, columns 2 (t % 4) + {0, 1} (transposed with .trans).

Products of FP4 and e4m3 values are exact in float64; each MMA instruction sums its K = 64 products in
float64 and adds them to the fp32 accumulator once, rounding to fp32 (the hardware's internal order and
precision are not specified; a sum of 64 exact products fits fp32's error budget of the board's check).
Not modelled: sparse MMA, A from tensor memory, the f16/tf32/i8/f8f6f4 kinds without block scaling,
disable-output-lane masks, tcgen05.st, tcgen05.shift, the collector buffer hints (accepted, no effect).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .errors import EmulatorError

LANES = 128
COLUMNS = 512
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def _e4m3_table() -> np.ndarray:
    table = np.zeros(256)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        exponent, mantissa = (code >> 3) & 0xF, code & 7
        if exponent == 0xF and mantissa == 7:
            table[code] = np.nan
        elif exponent == 0:
            table[code] = sign * mantissa / 8 * 2.0 ** -6
        else:
            table[code] = sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)
    return table


E4M3 = _e4m3_table()
UE8M0 = np.array([2.0 ** (code - 127) if code != 255 else np.nan for code in range(256)])


def fp4_e2m1_decode(raw: np.ndarray) -> np.ndarray:
    """Bytes (rows, k / 2) of packed e2m1 -> values (rows, k); element 2i in the low nibble of byte i."""
    out = np.empty(raw.shape[:-1] + (raw.shape[-1] * 2,))
    out[..., 0::2] = E2M1[raw & 0xF]
    out[..., 1::2] = E2M1[raw >> 4]
    return out


class TmemError(EmulatorError):
    def __init__(self, message: str):
        super().__init__("tmem", message)


class TensorMemory:
    """One CTA's tensor memory (9.7.16.2.1) and its allocations (9.7.16.7.1). `trace` is the race detector
    (happens_before.py) the cell accesses below are reported to, None when detection is off."""

    trace = None

    def __init__(self):
        self.cells = np.zeros((LANES, COLUMNS), np.uint32)
        self.allocations: dict[int, int] = {}  # first column -> columns
        self.relinquished = False

    def alloc(self, ncols: int, *, peer: "TensorMemory | None" = None) -> int:
        """The lowest free range of `ncols` columns (in this and the `peer`'s tensor memory, cta_group::2)."""
        if ncols < 32 or ncols > COLUMNS or ncols & (ncols - 1):
            raise TmemError(f"tcgen05.alloc of {ncols} columns: a power of two from 32 to 512")
        memories = (self,) if peer is None else (self, peer)
        if any(t.relinquished for t in memories):
            raise TmemError("tcgen05.alloc after tcgen05.relinquish_alloc_permit" +
                            (" (in a CTA of the pair)" if peer is not None else ""))
        for start in range(0, COLUMNS, ncols):
            if all(s + n <= start or start + ncols <= s for t in memories for s, n in t.allocations.items()):
                for t in memories:
                    t.allocations[start] = ncols
                return start
        raise TmemError(f"tcgen05.alloc of {ncols} columns: only {COLUMNS - sum(self.allocations.values())} "
                        "free (a real B200 would block until another allocation is freed)")

    def dealloc(self, column: int, ncols: int) -> None:
        if self.allocations.get(column) != ncols:
            raise TmemError(f"tcgen05.dealloc of {ncols} columns at column {column}: allocated "
                            f"{sorted(self.allocations.items())}")
        del self.allocations[column]

    def relinquish(self) -> None:
        self.relinquished = True

    def check(self, column: int, ncols: int, what: str) -> None:
        """Columns [column, column + ncols) must lie in one live allocation."""
        for start, n in self.allocations.items():
            if start <= column and column + ncols <= start + n:
                return
        raise TmemError(f"{what} uses tensor memory columns {column}..{column + ncols - 1}, outside every "
                        f"allocation {sorted(self.allocations.items()) or '(none)'}")

    def live(self) -> list:
        return sorted(self.allocations.items())


def split_address(address: int) -> tuple[int, int]:
    """(lane, column) of a tensor memory address (9.7.16.2.1)."""
    return (address >> 16) & 0xFFFF, address & 0xFFFF


def deallocate(tmem: TensorMemory, address: int, ncols: int) -> None:
    lane, column = split_address(address)
    if lane:
        raise TmemError(f"tcgen05.dealloc at lane {lane}: allocations start at lane 0")
    if tmem.trace is not None:  # freeing cells conflicts with every access to them, like a write
        tmem.trace.tmem(tmem, 0, LANES, column, ncols, True)
    tmem.dealloc(column, ncols)


@dataclass
class PairRequest:
    """One warp's half of a cta_group::2 allocation-management operation."""
    operation: str  # 'alloc', 'dealloc' or 'relinquish_alloc_permit'
    rank: int  # the issuing CTA's rank in the cluster
    operands: tuple  # alloc: (ncols,); dealloc: (address, ncols); relinquish: ()
    where: str
    destination: int = 0  # alloc: the shared address this warp's CTA gets the allocation's address at
    issuer: object = None  # the issuing warp (race detection attributes its CTA's half to it)
    done: bool = False

    def describe(self) -> str:
        columns = f" of {self.operands[-1]} columns" if self.operands else ""
        at = f" at tensor memory address 0x{self.operands[0]:x}" if self.operation == "dealloc" else ""
        return f"tcgen05.{self.operation}.cta_group::2{columns}{at}"


class PairRendezvous:
    """Where the two warps of a CTA pair meet for a cta_group::2 alloc, dealloc or relinquish_alloc_permit
    (9.7.16.5 Table 46): the first request waits; the second must be the same operation from the other CTA,
    and completes both."""

    def __init__(self):
        self.pending: PairRequest | None = None

    def meet(self, request: PairRequest) -> PairRequest | None:
        """The peer's waiting request to complete together with `request`, or None: `request` now waits."""
        first = self.pending
        if first is None:
            self.pending = request
            return None
        if first.rank == request.rank:
            raise TmemError(f"{request.describe()} issued twice by CTA rank {request.rank} (also at "
                            f"{first.where}) before the peer CTA issued it once")
        if (first.operation, first.operands if first.operation != "dealloc" else first.operands[1:]) != \
                (request.operation, request.operands if request.operation != "dealloc" else request.operands[1:]):
            raise TmemError(f"the CTA pair disagrees: CTA rank {first.rank} issued {first.describe()} (at "
                            f"{first.where}), CTA rank {request.rank} {request.describe()}")
        self.pending = None
        return first


# --------------------------------------------------------------------------------------------------
# descriptors
# --------------------------------------------------------------------------------------------------

SWIZZLE_BYTES = {0: 0, 1: 128, 2: 128, 4: 64, 6: 32}


@dataclass(frozen=True)
class SmemDescriptor:
    start: int
    leading_offset: int
    stride_offset: int
    version: int
    base_offset: int
    lbo_absolute: bool
    swizzle: int  # the 3-bit mode

    @classmethod
    def decode(cls, desc: int) -> "SmemDescriptor":
        d = cls(start=(desc & 0x3FFF) << 4, leading_offset=((desc >> 16) & 0x3FFF) << 4,
                stride_offset=((desc >> 32) & 0x3FFF) << 4, version=(desc >> 46) & 7, base_offset=(desc >> 49) & 7,
                lbo_absolute=bool(desc >> 52 & 1), swizzle=(desc >> 61) & 7)
        if d.version != 1:
            raise EmulatorError("tmem", f"shared memory descriptor 0x{desc:016x}: version {d.version}, sm_100 needs 1")
        if d.swizzle not in SWIZZLE_BYTES:
            raise EmulatorError("tmem", f"shared memory descriptor 0x{desc:016x}: swizzle mode {d.swizzle}")
        if d.swizzle == 1 or d.base_offset or d.lbo_absolute:
            raise EmulatorError("unimplemented", f"shared memory descriptor 0x{desc:016x}: 32-B-atom swizzle, a "
                                "base offset or absolute LBO mode")
        return d


def swizzle(addresses: np.ndarray, width: int) -> np.ndarray:
    """The swizzle of a `width`-byte span on shared memory address bits (5.5.7): the 16-byte unit index
    (bits 4 and up, log2(width / 16) of them) XOR the same number of bits from bit 7 up."""
    if width == 0:
        return addresses
    bits = {32: 1, 64: 2, 128: 3}[width]
    mask = (1 << bits) - 1
    return addresses ^ (((addresses >> 7) & mask) << 4)


def smem_matrix_addresses(desc: SmemDescriptor, rows: int, row_bytes: int, window_base: int = 0) -> np.ndarray:
    """Shared memory byte addresses (rows, row_bytes) of a K-major operand through its descriptor
    (9.7.16.4.2 canonical layouts). The descriptor's start is the low 18 bits of the shared address;
    `window_base` restores the CTA rank bits above them."""
    width = SWIZZLE_BYTES[desc.swizzle] or 16
    r = np.arange(rows)[:, None]
    k = np.arange(row_bytes)[None, :]
    offset = (r // 8) * desc.stride_offset + (k // width) * desc.leading_offset + (r % 8) * width + k % width
    return window_base + swizzle(desc.start + offset, SWIZZLE_BYTES[desc.swizzle])


@dataclass(frozen=True)
class InstrDescriptor:
    b_sf_id: int
    a_format: int
    b_format: int
    negate_a: bool
    negate_b: bool
    a_major_mn: bool
    b_major_mn: bool
    n: int
    scale_ue8m0: bool
    m: int
    a_sf_id: int
    sparse: bool

    @classmethod
    def decode(cls, idesc: int) -> "InstrDescriptor":
        return cls(b_sf_id=(idesc >> 4) & 3, a_format=(idesc >> 7) & 7, b_format=(idesc >> 10) & 7,
                   negate_a=bool(idesc >> 13 & 1), negate_b=bool(idesc >> 14 & 1), a_major_mn=bool(idesc >> 15 & 1),
                   b_major_mn=bool(idesc >> 16 & 1), n=((idesc >> 17) & 0x3F) << 3,
                   scale_ue8m0=bool(idesc >> 23 & 1), m=((idesc >> 24) & 0x1F) << 4, a_sf_id=(idesc >> 29) & 3,
                   sparse=bool(idesc >> 2 & 1))


# --------------------------------------------------------------------------------------------------
# MMA
# --------------------------------------------------------------------------------------------------

E2M1_FORMAT = 1  # kind::mxf4nvf4 / mxf4 A and B format code
SCALES_PER_K64 = {"4X": 4, "2X": 2, "1X": 1}


def scale_factors(tmem: TensorMemory, address: int, rows: int, per_row: int, sf_id: int, what: str) -> np.ndarray:
    """The (rows, per_row) scale bytes of an MMA operand in tensor memory (see the table above): row r
    in lane r % 32, column + r // 32, bytes sf_id .. sf_id + per_row - 1 of the 32-bit cell."""
    lane, column = split_address(address)
    if lane % 32:
        raise EmulatorError("tmem", f"{what} scale factors at lane {lane}: not a 32-lane boundary")
    if sf_id + per_row > 4:
        raise EmulatorError("tmem", f"{what} scale factor id {sf_id} with {per_row} scales per row")
    ncols = -(-rows // 32)
    if tmem.trace is not None:  # before the check: a use after another agent's dealloc is a race first
        tmem.trace.tmem(tmem, lane, 32, column, ncols, False)
    tmem.check(column, ncols, f"{what} scale factors")
    r = np.arange(rows)
    cells = tmem.cells[lane + r % 32, column + r // 32]
    raw = cells.view(np.uint8).reshape(rows, 4)
    return raw[:, sf_id:sf_id + per_row]


def mma_block_scaled_instruction(*, kind: str, scale_vec: str | None, cta_group: int, d_tmem: int, a_desc: int,
                                 b_desc: int, idesc: int, sfa_tmem: int, sfb_tmem: int, accumulate: bool,
                                 tmems, smem_readers) -> None:
    """One tcgen05.mma.cta_group.kind::mxf4nvf4|mxf4.block_scale: D (+)= (A * SFA) (B * SFB)^T, K = 64."""
    if kind not in ("mxf4nvf4", "mxf4"):
        raise EmulatorError("unimplemented", f"tcgen05.mma kind::{kind}")
    d = InstrDescriptor.decode(idesc)
    if d.sparse or d.a_major_mn or d.b_major_mn:
        raise EmulatorError("unimplemented", f"instruction descriptor 0x{idesc:08x}: sparse or MN-major operands")
    if d.a_format != E2M1_FORMAT or d.b_format != E2M1_FORMAT:
        raise EmulatorError("unimplemented", f"instruction descriptor 0x{idesc:08x}: A/B formats "
                            f"{d.a_format}/{d.b_format} (only e2m1 is modelled)")
    per_row = SCALES_PER_K64[scale_vec or "1X"]
    vec = 64 // per_row
    m_cta, n = d.m // cta_group, d.n
    if m_cta != 128 or not 8 <= n <= 256 or n % (8 * cta_group):
        raise EmulatorError("unimplemented", f"tcgen05.mma M = {d.m}, N = {n} with cta_group::{cta_group}")
    scale_table = UE8M0 if d.scale_ue8m0 else E4M3
    a_descriptor, b_descriptor = SmemDescriptor.decode(a_desc), SmemDescriptor.decode(b_desc)
    b_rows = n // cta_group
    b_parts = []
    for reader in smem_readers:
        addresses = smem_matrix_addresses(b_descriptor, b_rows, 32)
        b_parts.append(_gather(reader, addresses))
    b = fp4_e2m1_decode(np.concatenate(b_parts))
    sfb = scale_table[scale_factors(tmems[0], sfb_tmem, n, per_row, d.b_sf_id, "B")]
    b_scaled = b * np.repeat(sfb, vec, axis=1) * (-1.0 if d.negate_b else 1.0)
    d_lane, d_column = split_address(d_tmem)
    for tmem, reader in zip(tmems, smem_readers):
        a = fp4_e2m1_decode(_gather(reader, smem_matrix_addresses(a_descriptor, m_cta, 32)))
        sfa = scale_table[scale_factors(tmem, sfa_tmem, m_cta, per_row, d.a_sf_id, "A")]
        a_scaled = a * np.repeat(sfa, vec, axis=1) * (-1.0 if d.negate_a else 1.0)
        if tmem.trace is not None:
            tmem.trace.tmem(tmem, 0, m_cta, d_column, n, True)
        tmem.check(d_column, n, "the MMA accumulator")
        if d_lane:
            raise EmulatorError("tmem", f"MMA accumulator at lane {d_lane}: M = 128 per CTA starts at lane 0")
        acc = tmem.cells[0:m_cta, d_column:d_column + n].view(np.float32)
        product = a_scaled @ b_scaled.T
        result = (acc.astype(np.float64) + product) if accumulate else product
        tmem.cells[0:m_cta, d_column:d_column + n] = result.astype(np.float32).view(np.uint32)


def _gather(reader, addresses: np.ndarray) -> np.ndarray:
    lo, hi = int(addresses.min()), int(addresses.max())
    window = reader(lo, hi - lo + 1)
    return window[addresses - lo]


# --------------------------------------------------------------------------------------------------
# data movement
# --------------------------------------------------------------------------------------------------


def cp_source_bytes(shape: str) -> int:
    """Shared-memory bytes one tcgen05.cp of `shape` ("LANESxBITSb") reads (9.7.16.8.4)."""
    lanes, bits = shape.rstrip("b").split("x")
    return int(lanes) * int(bits) // 8


def tcgen05_cp(tmem: TensorMemory, address: int, read_smem, desc: int, shape: str, multicast: str) -> None:
    """tcgen05.cp [taddr], s-desc (9.7.16.8.4): only 32x128b with .warpx4 is modelled."""
    if shape != "32x128b" or multicast != "warpx4":
        raise EmulatorError("unimplemented", f"tcgen05.cp.{shape}{'.' + multicast if multicast else ''}")
    lane, column = split_address(address)
    if lane:
        raise EmulatorError("tmem", f"tcgen05.cp 32x128b.warpx4 at lane {lane}: it fills all 128 lanes")
    if tmem.trace is not None:
        tmem.trace.tmem(tmem, 0, LANES, column, 4, True)
    tmem.check(column, 4, "tcgen05.cp")
    descriptor = SmemDescriptor.decode(desc)
    rows = _gather(read_smem, smem_matrix_addresses(descriptor, 32, 16))  # (32, 16) bytes
    words = np.ascontiguousarray(rows).view(np.uint32)  # (32, 4)
    for quarter in range(4):
        tmem.cells[32 * quarter:32 * quarter + 32, column:column + 4] = words


def tcgen05_ld(tmem: TensorMemory, address: int, shape: str, num: int, warp_quarter: int) -> np.ndarray:
    """tcgen05.ld.shape.num (9.7.16.8.3): (32 threads, registers) uint32 for the warp whose id % 4 is
    `warp_quarter` (it may access lanes 32 * warp_quarter .. + 31 only). The address's lane is taken modulo
    the 128 lanes: gau-nernst's v6b (groundtruth/peer_cuda.py), which passes the board's checks on a B200,
    reads a cta_group::2 accumulator with lane 128 * (CTA rank) + 32 * (warp) in both CTAs of the pair, and
    the ISA's text does not say what the lane field's bits above the 128 lanes do."""
    lane, column = split_address(address)
    lane %= LANES
    first = 32 * warp_quarter
    lanes, columns, span, low, extent = _ld_cells(shape, num)  # relative to (lane, column)
    lanes, columns, span = lanes + lane, columns + column, (lane, span)
    if not (first <= span[0] and span[0] + span[1] <= first + 32):
        raise EmulatorError("tmem", f"tcgen05.ld.{shape} at lane {lane} from warp {warp_quarter} (mod 4): a warp "
                            f"may access lanes {first}..{first + 31} only")
    if tmem.trace is not None:
        tmem.trace.tmem(tmem, span[0], span[1], column + low, extent, False)
    tmem.check(column + low, extent, f"tcgen05.ld.{shape}.x{num}")
    return tmem.cells[lanes, columns]


@functools.lru_cache(maxsize=None)
def _ld_cells(shape: str, num: int) -> tuple:
    """tcgen05.ld.shape.num's cells for lane 0, column 0: (lanes (32, registers), columns (32, registers), the
    lanes it spans, its lowest column, its columns' extent)."""
    if shape == "32x32b":
        lanes = np.arange(32)[:, None] + np.zeros((1, num), int)
        columns = np.arange(num)[None, :] + np.zeros((32, 1), int)
        span = 32
    elif shape == "16x256b":
        t = np.arange(32)
        row = t // 4
        col = 2 * (t % 4)
        lanes_list, cols_list = [], []
        for i in range(num):
            for half in (0, 8):
                for c in (0, 1):
                    lanes_list.append(half + row)
                    cols_list.append(8 * i + col + c)
        lanes = np.stack(lanes_list, axis=1)
        columns = np.stack(cols_list, axis=1)
        span = 16
    else:
        raise EmulatorError("unimplemented", f"tcgen05.ld.{shape}")
    lanes.setflags(write=False)
    columns.setflags(write=False)
    return lanes, columns, span, int(columns.min()), int(columns.max() - columns.min() + 1)


def stmatrix_m8n8(row_addresses: np.ndarray, registers: np.ndarray, trans: bool):
    """stmatrix.m8n8.xN[.trans].b16: (addresses, uint16 values) of every element stored. `row_addresses`
    (32 lanes) and `registers` (32 lanes, N matrices) as the warp holds them; per matrix i and half h (the
    register's low, then high 16 bits), lane t's element goes to row t / 4, column 2 (t % 4) + h of the 8x8
    matrix whose rows lanes 8i .. 8i + 7 address (`.trans`: the transposed position)."""
    count = registers.shape[1]
    rows, offsets = _stmatrix_cells(count, trans)
    addresses = row_addresses.astype(np.int64)[rows] + offsets
    words = registers.astype(np.uint32).T  # (N, 32)
    values = ((words[:, None, :] >> _HALF_SHIFTS) & 0xFFFF).astype(np.uint16)  # (N, 2, 32)
    return addresses, values.reshape(-1)


_HALF_SHIFTS = np.array([0, 16], np.uint32)[None, :, None]


@functools.lru_cache(maxsize=None)
def _stmatrix_cells(count: int, trans: bool) -> tuple:
    """Per element stored, in (matrix, half, lane) order: the lane whose row address it is at, and its byte
    offset from that row's address."""
    t = np.arange(32)
    rows, offsets = [], []
    for i in range(count):
        for half in (0, 1):
            r, c = t // 4, 2 * (t % 4) + half
            rows.append(8 * i + (c if trans else r))
            offsets.append(2 * (r if trans else c))
    rows, offsets = np.concatenate(rows), np.concatenate(offsets).astype(np.int64)
    rows.setflags(write=False)
    offsets.setflags(write=False)
    return rows, offsets
