"""A persistent CuTe DSL kernel of ours that takes its work by cluster launch control, for
tests/emulator/test_emulator_launch_control.py. Compiled as for a B200 (sm_100a) and run in the emulator, in a process
of its own (the stub driver loads before cutlass): `python tests/emulator/clc_kernel.py CASE...` prints one JSON line
per case.

The kernel: a grid of one tile per cluster (CTAs of 64 threads, clusters of 1 or 2). Each CTA starts with
the tile of its own cluster; thread 0 counts the tile (`red.relaxed.gpu.global.add.s32`) and writes its owner
(its CTA index + 1) beside the count, and lane 0 of warp 1 counts it again: a 32-byte row per CTA of a tile
(count, owner, 0, 0, warp 1's count, 0, 0, 0), each warp's part in a 16-byte granule of its own (the race
detector's unit). Then it asks for more work: each
CTA's thread 0 arrives on its own mbarrier expecting the 16-byte response, and the cluster's first CTA issues
`clusterlaunchcontrol.try_cancel` (`.multicast::cluster::all` for clusters of 2: the response lands in both
CTAs); every thread waits for its mbarrier's phase, loads the response (two 64-bit shared loads, as the
DSL's own `cute.arch.clc_response` does), decodes it (`query_cancel.is_canceled`, `get_first_ctaid::x`:
NVVM's operations, lowered by the DSL's LLVM to `mov.b128` and the query instructions) and, before the next
request may overwrite it, synchronizes (`bar.sync` for one CTA, `barrier.cluster` for two). It goes on with
the cancelled cluster's tile, or exits when the response says nothing was cancelled. A correct run counts
every tile exactly once.

A case is `CLUSTER:MODE[:SEED][:DEFECT]` (CLUSTER 1 or 2; MODE eager, adversarial or timed); a defect is a
PTX edit (DEFECTS). Timed cases launch 160 clusters of one CTA with 200 KiB of shared memory each (one CTA
per SM: 148 placed, 12 in the dispatch queue), the others 12 clusters. Each line: the case, and either `ok`
with the counts and owners, or the error's kind and text.
"""

import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

THREADS = 64
RESPONSE_BYTES = 16
def _drop_last_release(ptx: str) -> str:
    """The last CTA or cluster barrier (the one after the response is read) removed: the next try_cancel may
    overwrite the response before every warp has read it."""
    found = list(re.finditer(r"(barrier\.cluster\.arrive[^;]*;\s*barrier\.cluster\.wait[^;]*;|bar(?:rier)?\.sync(?:\.aligned)?\s+[^;,]+;)", ptx))
    if not found:
        raise SystemExit("defect no-release: no barrier in the PTX")
    last = found[-1]
    return ptx[:last.start()] + "// no release" + ptx[last.end():]


# PTX edits: planted defects (pattern, replacement), or a function of the PTX
DEFECTS = {
    "no-release": _drop_last_release,
    # the response read before its mbarrier's phase completes: the DSL's wait loop's try_wait answers "done"
    "no-wait": (r"mbarrier\.try_wait\.parity[.\w:]*\s+(\w+),[^;]*;", r"mov.pred \1, 1;"),
    # every response taken for a failure: the CTA exits after its own tile, the cancelled ones never run
    "drop-cancelled": (r"clusterlaunchcontrol\.query_cancel\.is_canceled\.pred\.b128\s+(%p\d+),[^;]*;",
                       r"mov.pred \1, 0;"),
}


def edit(ptx: str, defect: str | None) -> str:
    if defect is None:
        return ptx
    if callable(DEFECTS[defect]):
        return DEFECTS[defect](ptx)
    pattern, replacement = DEFECTS[defect]
    edited, count = re.subn(pattern, replacement, ptx)
    if count == 0:
        raise SystemExit(f"defect {defect}: pattern {pattern!r} not in the PTX")
    return edited


def build(cluster: int, clusters: int, shared: int):
    """The compiled kernel, its arguments and its output tensor (clusters x cluster rows of 8 int32)."""
    import torch

    import cutlass
    import cutlass.cute as cute
    import cutlass.utils as utils
    from cutlass._mlir.dialects import arith, llvm, nvvm
    from cutlass.cutlass_dsl import T, dsl_user_op

    @dsl_user_op
    def count_tile(address: cutlass.Int64, *, loc=None, ip=None):
        llvm.inline_asm(None, [address.ir_value(loc=loc, ip=ip), cutlass.Int32(1).ir_value(loc=loc, ip=ip)],
                        "red.relaxed.gpu.global.add.s32 [$0], $1;", "l,r", has_side_effects=True,
                        is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip)

    @dsl_user_op
    def try_cancel(response: cute.Pointer, mbar: cute.Pointer, *, loc=None, ip=None):
        if cluster > 1:
            nvvm.clusterlaunchcontrol_try_cancel_multicast(response.llvm_ptr, mbar.llvm_ptr, loc=loc, ip=ip)
        else:
            nvvm.clusterlaunchcontrol_try_cancel(response.llvm_ptr, mbar.llvm_ptr, loc=loc, ip=ip)

    @dsl_user_op
    def decode(low: cutlass.Int64, high: cutlass.Int64, *, loc=None, ip=None):
        """(cancelled, first CTA's x) of a response held as two 64-bit halves."""
        wide = T.i(128)
        value = arith.ori(arith.extui(wide, low.ir_value(loc=loc, ip=ip), loc=loc, ip=ip),
                          arith.shli(arith.extui(wide, high.ir_value(loc=loc, ip=ip), loc=loc, ip=ip),
                                     arith.constant(wide, 64, loc=loc, ip=ip), loc=loc, ip=ip), loc=loc, ip=ip)
        cancelled = nvvm.clusterlaunchcontrol_query_cancel_is_canceled(T.bool(), value, loc=loc, ip=ip)
        first_x = nvvm.clusterlaunchcontrol_query_cancel_get_first_ctaid_x(T.i32(), value, loc=loc, ip=ip)
        return cutlass.Boolean(cancelled), cutlass.Int32(first_x)

    @cute.struct
    class Storage:
        response: cute.struct.Align[cute.struct.MemRange[cutlass.Int64, 2], RESPONSE_BYTES]
        full: cute.struct.Align[cutlass.Int64, 8]

    @cute.kernel
    def kernel(out: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        rank = bidx % cluster
        storage = utils.SmemAllocator().allocate(Storage)
        response = storage.response.data_ptr()
        full = storage.full
        if tidx == 0:
            cute.arch.mbarrier_init(full, 1)
            cute.arch.mbarrier_init_fence()
        if cutlass.const_expr(cluster > 1):
            cute.arch.cluster_arrive()
            cute.arch.cluster_wait()
        else:
            cute.arch.barrier()
        tile = bidx - rank  # the first CTA of the cluster's
        phase = cutlass.Int32(0)
        more = cutlass.Boolean(True)
        while more:
            cta = tile + rank
            if tidx % 32 == 0:  # each warp counts the tile it works on
                count_tile(out.iterator.toint() + cta * 32 + tidx // 32 * 16)
            if tidx == 0:
                out[cta, 1] = bidx + 1
                cute.arch.mbarrier_arrive_and_expect_tx(full, RESPONSE_BYTES)
                if rank == 0:
                    try_cancel(response, full)
            cute.arch.mbarrier_wait(full, phase)
            phase = phase ^ 1
            words = cute.make_tensor(cute.recast_ptr(response, dtype=cutlass.Int64), cute.make_layout(2))
            more, first_x = decode(words[0], words[1])
            tile = first_x
            # every thread of the cluster has read the response before the next request overwrites it
            if cutlass.const_expr(cluster > 1):
                cute.arch.cluster_arrive()
                cute.arch.cluster_wait()
            else:
                cute.arch.barrier()

    @cute.jit
    def host(out: cute.Tensor):
        kernel(out).launch(grid=[clusters * cluster, 1, 1], block=[THREADS, 1, 1], cluster=[cluster, 1, 1],
                           smem=shared)

    output = torch.zeros((clusters * cluster, 8), dtype=torch.int32)
    from cutlass.cute.runtime import from_dlpack

    tensor = from_dlpack(output, assumed_align=16)
    return cute.compile(host, tensor), (tensor,), output


def main(cases: list[str]) -> None:
    from emulator import driver

    driver.install()
    os.environ.setdefault("CUTE_DSL_KEEP_PTX", "1")
    from emulator import EmulatorError, GlobalMemory
    from emulator.launch import execute

    built = {}
    for case in cases:
        parts = case.split(":")
        cluster, mode = int(parts[0]), parts[1]
        seed = int(parts[2]) if len(parts) > 2 and parts[2] else 0
        defect = parts[3] if len(parts) > 3 else None
        clusters, shared = (160, 200 * 1024) if mode == "timed" else (12, 1024)
        key = (cluster, clusters, shared)
        if key not in built:
            built[key] = build(*key)
        compiled, args, output = built[key]
        output.zero_()
        driver.take_launches()
        compiled(*args)
        (launch,) = driver.take_launches()
        ptx = edit(driver.kernel_ptx(compiled, launch.kernel_name), defect)
        memory = GlobalMemory()
        memory.register(output.data_ptr(), output.numel() * 4, "out")
        line = {"case": case}
        try:
            stats = execute(launch, ptx, memory, mode=mode, seed=seed, races=True, step_budget=20_000_000)
            counts = output[:, 0].tolist()
            second = output[:, 4].tolist()  # warp 1's counts
            owners = (output[:, 1] - 1).tolist()
            line.update(ok=True, counts=counts, second=second, owners=owners,
                        cancelled=(stats.timing or {}).get("cancelled_ctas", 0))
        except EmulatorError as e:
            line.update(ok=False, kind=e.kind, error=str(e))
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
