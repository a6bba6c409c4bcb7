"""Two CuTe DSL kernels that synchronize CTAs through global memory, for tests/emulator/test_emulator_global_sync.py.
Compiled as for a B200 (sm_100a) and run in the emulator, in a process of their own (the stub driver loads
before cutlass): `python tests/emulator/global_sync_kernels.py CASE...` prints one JSON line per case.

- **split-K pair** (`splitk`): the protocol our kernels emit for split-K, as inline PTX. A grid of two 2-CTA
  clusters, 4 warps (128 threads) per CTA. CTA (2, 0, 0), of the second cluster, writes its partial tile
  (128 x 4 fp32, one `st.global.v4.f32` per thread) to a workspace, `bar.sync 1, 128`, then one thread
  `red.release.gpu.global.add.s32 [flag], 1`. CTA (0, 0, 0) polls with one thread (`ld.acquire.gpu.global.b32`,
  `nanosleep.u32 20`), `bar.sync 1, 128`, adds the workspace (`ld.global.v4.f32`) to its own partial into
  `out`, and one thread resets the flag (`st.relaxed.gpu.global.b32 [flag], 0`) for the next grid. The other
  two CTAs exit.
- **NVIDIA's grid barrier** (`barrier`): `GlobalBarrier` of CUTLASS's CuTe DSL example
  `ampere/cooperative_launch.py` (the copy in FlashInfer's wheel data), the known-good side: arrivals by
  `atom.add.release.gpu.u32` (the last arrival flips the phase bit with a second one), waits by a spin on
  `ld.global.acquire.gpu.b32` (no nanosleep), `bar.sync 0` around both. Our kernel around it: 4 CTAs of
  64 threads, 3 rounds; in each every CTA writes its block of a buffer, waits at the barrier, reads the next
  CTA's block into its accumulator and waits again before the buffer is rewritten. (The example itself
  launches with `cooperative=True`, which DSL 4.3.5 lacks; the emulator runs every CTA of the grid at once.)

A case is `KERNEL:MODE[:SEED][:DEFECT]`; a defect is a PTX edit (DEFECTS). Each line: the case, and either
`ok` with whether the output matched, or the error's kind and text.
"""

import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

# PTX edits: a planted defect, or another form of the protocol (pattern, replacement)
FLAG_RELEASE = r"red\.release\.gpu\.global\.add\.s32 (\[[^\]]+\]), ([^;]+);"
FLAG_POLL = r"ld\.acquire\.gpu\.global\.b32 (%r\d+), (\[[^\]]+\]);"
DEFECTS = {
    "relaxed-red": (FLAG_RELEASE, r"red.relaxed.gpu.global.add.s32 \1, \2;"),  # no release
    "relaxed-poll": (FLAG_POLL, r"ld.relaxed.gpu.global.b32 \1, \2;"),  # no acquire
    "no-poll": (FLAG_POLL, r"mov.u32 \1, 1;"),  # the reader reads at once
    "no-signal": (FLAG_RELEASE, r"// no signal"),
    "cta-scope": (FLAG_RELEASE, r"red.release.cta.global.add.s32 \1, \2;"),  # a scope that misses the reader
    # CUTLASS's release (cutlass/barrier.h, red_release): a fence, then a relaxed reduction
    "cutlass-fence": (FLAG_RELEASE, r"fence.acq_rel.gpu;\n\tred.relaxed.gpu.global.add.s32 \1, \2;"),
    "no-nanosleep": (r"nanosleep\.u32 [^;]+;", r"// no nanosleep"),
}
BARRIER_EXAMPLE = "data/cutlass/examples/python/CuTeDSL/ampere/cooperative_launch.py"  # in FlashInfer's wheel
TILE_THREADS = 128
VALUES_PER_THREAD = 4


def edit(ptx: str, defect: str | None) -> str:
    if defect is None:
        return ptx
    pattern, replacement = DEFECTS[defect]
    edited, count = re.subn(pattern, replacement, ptx)
    if count == 0:
        raise SystemExit(f"defect {defect}: pattern {pattern!r} not in the PTX")
    return edited


class Built:
    """A compiled kernel and its arguments, the tensors it reaches (`tensors`; `zeroed` before each run), its
    `output` with the `expected` values, and the `flag` word its synchronization leaves."""

    def __init__(self, compiled, args, tensors, zeroed, output, expected, flag):
        self.compiled, self.args, self.tensors, self.zeroed = compiled, args, tensors, zeroed
        self.output, self.expected, self.flag = output, expected, flag


def build_splitk() -> Built:
    """The split-K kernel on a workspace, both partials, out (fp32) and a flag (int32)."""
    import torch

    import cutlass
    import cutlass.cute as cute
    from cutlass._mlir.dialects import llvm
    from cutlass.cutlass_dsl import T, dsl_user_op

    def asm(result, operands, text, constraints, loc, ip):
        return llvm.inline_asm(result, [o.ir_value(loc=loc, ip=ip) for o in operands], text, constraints,
                               has_side_effects=True, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT,
                               loc=loc, ip=ip)

    @dsl_user_op
    def store_v4(address: cutlass.Int64, v0, v1, v2, v3, *, loc=None, ip=None):
        asm(None, [address, v0, v1, v2, v3], "st.global.v4.f32 [$0], {$1, $2, $3, $4};", "l,f,f,f,f", loc, ip)

    @dsl_user_op
    def load_v4(address: cutlass.Int64, *, loc=None, ip=None) -> tuple:
        vector = asm(llvm.StructType.get_literal([T.f32()] * 4), [address],
                     "ld.global.v4.f32 {$0, $1, $2, $3}, [$4];", "=f,=f,=f,=f,l", loc, ip)
        return tuple(cutlass.Float32(llvm.extractvalue(T.f32(), vector, [k], loc=loc, ip=ip)) for k in range(4))

    @dsl_user_op
    def release_flag(address: cutlass.Int64, *, loc=None, ip=None):
        asm(None, [address, cutlass.Int32(1)], "red.release.gpu.global.add.s32 [$0], $1;", "l,r", loc, ip)

    @dsl_user_op
    def acquire_flag(address: cutlass.Int64, *, loc=None, ip=None) -> cutlass.Int32:
        return cutlass.Int32(asm(T.i32(), [address], "ld.acquire.gpu.global.b32 $0, [$1];", "=r,l", loc, ip))

    @dsl_user_op
    def sleep(*, loc=None, ip=None):
        asm(None, [cutlass.Int32(20)], "nanosleep.u32 $0;", "r", loc, ip)

    @dsl_user_op
    def reset_flag(address: cutlass.Int64, *, loc=None, ip=None):
        asm(None, [address, cutlass.Int32(0)], "st.relaxed.gpu.global.b32 [$0], $1;", "l,r", loc, ip)

    @cute.kernel
    def kernel(workspace: cute.Pointer, partial: cute.Pointer, out: cute.Pointer, flag: cute.Pointer):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        offset = tidx * VALUES_PER_THREAD * 4  # bytes: one 16-byte vector per thread
        if bidx == 2:  # the writer, in the second cluster
            store_v4(workspace.toint() + offset, *load_v4(partial.toint() + offset))
            cute.arch.barrier(barrier_id=1, number_of_threads=TILE_THREADS)
            if tidx == 0:
                release_flag(flag.toint())
        if bidx == 0:  # the reader
            if tidx == 0:
                while acquire_flag(flag.toint()) != 1:
                    sleep()
            cute.arch.barrier(barrier_id=1, number_of_threads=TILE_THREADS)
            theirs = load_v4(workspace.toint() + offset)
            mine = load_v4(partial.toint() + TILE_THREADS * VALUES_PER_THREAD * 4 + offset)
            store_v4(out.toint() + offset, *(a + b for a, b in zip(mine, theirs)))
            if tidx == 0:
                reset_flag(flag.toint())

    @cute.jit
    def host(workspace: cute.Pointer, partial: cute.Pointer, out: cute.Pointer, flag: cute.Pointer):
        kernel(workspace, partial, out, flag).launch(grid=[4, 1, 1], block=[TILE_THREADS, 1, 1], cluster=[2, 1, 1])

    values = TILE_THREADS * VALUES_PER_THREAD
    generator = torch.Generator().manual_seed(7)
    partial = torch.randn(2 * values, generator=generator, dtype=torch.float32)  # the writer's, then the reader's
    workspace = torch.zeros(values, dtype=torch.float32)
    out = torch.zeros(values, dtype=torch.float32)
    flag = torch.zeros(4, dtype=torch.int32)
    args = tuple(cute.runtime.make_ptr(dtype, t.data_ptr(), cute.AddressSpace.gmem, assumed_align=16)
                 for dtype, t in ((cutlass.Float32, workspace), (cutlass.Float32, partial),
                                  (cutlass.Float32, out), (cutlass.Int32, flag)))
    return Built(cute.compile(host, *args), args, (workspace, partial, out, flag), (workspace, out, flag), out,
                 partial[:values] + partial[values:], flag)


def build_barrier() -> Built:
    """NVIDIA's GlobalBarrier driving our exchange kernel, on its barrier word, a buffer and out (int32)."""
    import importlib.util

    import torch

    import cutlass
    import cutlass.cute as cute

    spec = importlib.util.find_spec("flashinfer")
    example = Path(spec.submodule_search_locations[0]) / BARRIER_EXAMPLE
    loaded = importlib.util.spec_from_file_location("nvidia_cooperative_launch", example)
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    ctas, threads, rounds = 4, 64, 3

    @cute.kernel
    def kernel(barrier_word: cute.Pointer, buffer: cute.Pointer, out: cute.Pointer):
        barrier = module.GlobalBarrier(barrier_ptr=barrier_word)
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        data = cute.make_tensor(buffer, cute.make_layout(ctas * threads))
        result = cute.make_tensor(out, cute.make_layout(ctas * threads))
        accumulated = cutlass.Int32(0)
        for r in cutlass.range_constexpr(rounds):
            data[bidx * threads + tidx] = cutlass.Int32(1000 * (r + 1)) + bidx * threads + tidx
            barrier.arrive_and_wait()
            accumulated += data[((bidx + 1) % ctas) * threads + tidx]
            barrier.arrive_and_wait()
        result[bidx * threads + tidx] = accumulated

    @cute.jit
    def host(barrier_word: cute.Pointer, buffer: cute.Pointer, out: cute.Pointer):
        kernel(barrier_word, buffer, out).launch(grid=[ctas, 1, 1], block=[threads, 1, 1])

    word = torch.zeros(4, dtype=torch.int32)
    buffer = torch.zeros(ctas * threads, dtype=torch.int32)
    out = torch.zeros(ctas * threads, dtype=torch.int32)
    args = (cute.runtime.make_ptr(cutlass.Uint32, word.data_ptr(), cute.AddressSpace.gmem, assumed_align=16),
            cute.runtime.make_ptr(cutlass.Int32, buffer.data_ptr(), cute.AddressSpace.gmem, assumed_align=16),
            cute.runtime.make_ptr(cutlass.Int32, out.data_ptr(), cute.AddressSpace.gmem, assumed_align=16))
    index = torch.arange(ctas * threads)
    neighbour = (index // threads + 1) % ctas * threads + index % threads
    expected = sum(1000 * (r + 1) + neighbour for r in range(rounds)).to(torch.int32)
    return Built(cute.compile(host, *args), args, (word, buffer, out), (word, buffer, out), out, expected, word)


def main(cases: list[str]) -> None:
    from emulator import driver

    driver.install()
    os.environ.setdefault("CUTE_DSL_KEEP_PTX", "1")
    from emulator import EmulatorError, GlobalMemory
    from emulator.launch import execute

    ready = {}  # kernel -> (Built, its launch, its PTX, global memory)
    for case in cases:
        kernel, mode, *rest = case.split(":")
        seed = int(rest[0]) if rest and rest[0].isdigit() else 0
        defect = next((r for r in rest if not r.isdigit()), None)
        if kernel not in ready:
            built = (build_splitk if kernel == "splitk" else build_barrier)()
            driver.take_launches()
            built.compiled(*built.args)
            (launch,) = driver.take_launches()
            memory = GlobalMemory()
            for t in built.tensors:
                memory.register(t.data_ptr(), t.numel() * t.element_size(), "tensor")
            ready[kernel] = (built, launch, driver.kernel_ptx(built.compiled, launch.kernel_name), memory)
        built, launch, ptx, memory = ready[kernel]
        for t in built.zeroed:
            t.zero_()
        record = {"case": case}
        try:
            stats = execute(launch, edit(ptx, defect), memory, mode=mode, seed=seed, races=True,
                            step_budget=2_000_000)
            record.update(result="ok", match=bool((built.output == built.expected).all()),
                          instructions=stats.instructions, flag=int(built.flag[0]))
            if stats.timing is not None:
                record["kernel_us"] = stats.timing["kernel_us"]
        except EmulatorError as e:
            record.update(result=e.kind, text=str(e))
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
