"""A leaderboard-style CuTe DSL file of ours, written to test groundtruth/peer_dsl.py (the route that runs
peers' CuTe DSL entries) without any peer's code. It has what such files have, not a GEMM kernel:

- a pip install at import (the route answers it without running pip);
- `cute.compile(..., options="--enable-tvm-ffi")` on fake compact tensors, the compiled function called with
  torch tensors (the route drops TVM-FFI and converts them by DLPack);
- torch tensors made on "cuda" (a pointer table from host data: a pageable copy; a buffer), cached by the
  identity of `data` as teelaitila's entry caches its pointer tables;
- a CuTe DSL kernel that reads addresses from that table on the device and writes every c.

custom_kernel computes each group's product on the host with reference.py's own arithmetic into a "cuda"
buffer, and the kernel (one CTA per group, 128 threads) copies the buffer into the group's c through the
address the table holds. A PASS through the route says: the file loaded, compiled for sm_100a, its launch ran
in the emulator against the CPU tensors, and every c the board's check reads was written.
DSL_PEER_EXAMPLE_COPY_LIMIT=N (the environment) stops each group's copy after N values: a planted defect.
"""

import os
import subprocess
import sys


def install_package():
    subprocess.check_call([sys.executable, "-m", "pip", "install", "apache-tvm-ffi"])


install_package()

import torch  # noqa: E402

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from task import input_t, output_t  # noqa: E402

THREADS = 128
FLAT = 1 << 18  # fp16 values the host buffer holds (the tests' shapes are small)
# elements copied per group (unset: all of them): a planted defect the check must see
COPY_LIMIT = int(os.environ.get("DSL_PEER_EXAMPLE_COPY_LIMIT", "0")) or None
_compiled = {}
_tables = {}


@cute.kernel
def copy_kernel(table: cute.Tensor, flat: cute.Tensor):
    """CTA g copies table[g, 2] fp16 values from flat[table[g, 1]:] to the address table[g, 0]."""
    tidx, _, _ = cute.arch.thread_idx()
    g, _, _ = cute.arch.block_idx()
    count = cutlass.Int32(table[g, 2])
    offset = cutlass.Int32(table[g, 1])
    destination = cute.make_tensor(cute.make_ptr(cutlass.Float16, table[g, 0], cute.AddressSpace.gmem,
                                                 assumed_align=16), cute.make_layout(count))
    i = tidx
    while i < count:
        destination[i] = flat[offset + i]
        i += THREADS


@cute.jit
def copy_all(table: cute.Tensor, flat: cute.Tensor, groups: cutlass.Constexpr[int]):
    copy_kernel(table, flat).launch(grid=[groups, 1, 1], block=[THREADS, 1, 1])


def _products(data):
    """Each group's c, computed on the host with reference.py's arithmetic (into fresh tensors)."""
    from reference import ref_kernel

    abc, sfasfb, reordered, sizes = data
    fresh = [(a, b, torch.empty_like(c)) for a, b, c in abc]
    return ref_kernel((fresh, sfasfb, reordered, sizes))


def custom_kernel(data: input_t) -> output_t:
    abc, _, _, sizes = data
    groups = len(sizes)
    if groups not in _compiled:
        table = cute.runtime.make_fake_compact_tensor(cutlass.Int64, (groups, 3), stride_order=(1, 0))
        flat = cute.runtime.make_fake_compact_tensor(cutlass.Float16, (FLAT,))
        _compiled[groups] = cute.compile(copy_all, table, flat, groups, options="--opt-level 2 --enable-tvm-ffi")
    products = [p.reshape(-1) for p in _products(data)]
    total = sum(p.numel() for p in products)
    if total > FLAT:
        raise ValueError(f"{total} outputs: this example holds {FLAT}")
    flat = torch.empty(FLAT, dtype=torch.float16, device="cuda")
    flat[:total].copy_(torch.cat(products))
    key = (id(data), abc[0][2].data_ptr())
    if key not in _tables:
        rows, offset = [], 0
        for (_, _, c), p in zip(abc, products):
            count = p.numel() if COPY_LIMIT is None else min(COPY_LIMIT, p.numel())
            rows.append([c.data_ptr(), offset, count])
            offset += p.numel()
        _tables[key] = torch.tensor(rows, dtype=torch.int64, device="cuda")
    _compiled[groups](_tables[key], flat)
    return [c for _, _, c in abc]
