"""Launch limits (emulator/limits.py): a launch a B200's driver refuses is an error naming the limit, and the
cubin figures it uses are the ones cuobjdump reports. Pair allocation: a 2-CTA kernel whose odd CTA skips its
`tcgen05.alloc.cta_group::2` (tests/emulator/ptx_pair_defects.py) hangs at the pair's allocation, named as such.

Each limit is tried on a launch one step over it (refused, the limit named) and at it (accepted), on a small
ELF made here with the records ptxas writes (EIATTR_REGCOUNT in .nv.info, the .nv.shared.<kernel> section).
A real kernel's cubin, taken from the stub driver, is read as `cuobjdump -res-usage` reads it; NVIDIA's and
FlashInfer's kernels and ours pass the checks in their own tests (test_emulator_nvidia.py, ..._flashinfer.py,
..._submission.py).
"""

import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from emulator.driver import Launch  # noqa: E402  (no cutlass import: the stub is not needed here)
from emulator.limits import B200, CubinResources, LaunchLimitError, check_launch, cubin_resources  # noqa: E402

KERNEL = "k"


def cubin(registers: int, static_shared: int) -> bytes:
    """An ELF64 image with the sections the checks read: .shstrtab, .nv.info (EIATTR_REGCOUNT for symbol 5),
    .text.k (sh_info = symbol 5) and .nv.shared.k of `static_shared` bytes."""
    names = [b"", b".shstrtab", b".nv.info", f".text.{KERNEL}".encode(), f".nv.shared.{KERNEL}".encode()]
    strtab = b"\0".join(names) + b"\0"
    name_at = [strtab.index(n + b"\0") if n else 0 for n in names]
    nv_info = bytes([4, 0x2F]) + struct.pack("<HII", 8, 5, registers)
    data = strtab + nv_info
    shoff = 64 + len(data)
    # (name, type, offset, size, info): null, .shstrtab, .nv.info, .text.k, .nv.shared.k (NOBITS)
    headers = [(0, 0, 0, 0, 0), (name_at[1], 3, 64, len(strtab), 0), (name_at[2], 0x70000000, 64 + len(strtab),
               len(nv_info), 0), (name_at[3], 1, shoff, 0, 5), (name_at[4], 8, 0, static_shared, 0)]
    elf = bytearray(b"\x7fELF" + bytes(60))
    struct.pack_into("<Q", elf, 0x28, shoff)
    struct.pack_into("<HHH", elf, 0x3A, 64, len(headers), 1)
    elf += data
    for name, kind, offset, size, info in headers:
        elf += struct.pack("<IIQQQQIIQQ", name, kind, 0, 0, offset, size, 0, info, 0, 0)
    return bytes(elf)


def launch(*, grid=(4, 1, 1), block=(192, 1, 1), cluster=(1, 1, 1), shared=200_000, max_dynamic=232_448,
           nonportable=1, registers=40, static_shared=0) -> Launch:
    return Launch(KERNEL, grid, block, cluster, shared, {}, (), 0, max_dynamic, nonportable,
                  cubin(registers, static_shared))


def refused(reason: str, **kwargs) -> None:
    with pytest.raises(LaunchLimitError) as caught:
        check_launch(launch(**kwargs))
    assert "launch-limit: B200 refuses the launch" in str(caught.value)
    assert re.search(reason, str(caught.value)), str(caught.value)


def test_the_small_elf_reads_back():
    assert cubin_resources(cubin(47, 1024), KERNEL) == CubinResources(47, 1024)


def test_a_launch_within_every_limit_is_accepted():
    check_launch(launch())
    # shared memory: exactly the opt-in maximum, the cubin's static 1024 B being the driver's reserve
    check_launch(launch(shared=232_448, static_shared=1024))
    check_launch(launch(shared=232_448 - 64, static_shared=1024 + 64))
    check_launch(launch(cluster=(4, 4, 1), grid=(4, 4, 1)))  # 16 with the non-portable attribute
    check_launch(launch(block=(1024, 1, 1), registers=64))  # 64 x 1024 = the register file
    check_launch(launch(shared=49_152, max_dynamic=None))  # the default dynamic limit, no attribute set


def test_shared_memory_beyond_the_opt_in_maximum_is_refused():
    refused(r"232449 B of dynamic \+ 0 B of static shared memory .* > 232448 B per block", shared=232_449,
            max_dynamic=240_000)
    refused(r"232385 B of dynamic \+ 64 B of static shared memory \(the cubin's 1088 less the driver's 1024 B "
            r"reserve\)", shared=232_385, static_shared=1088)


def test_dynamic_shared_memory_beyond_the_kernel_attribute_is_refused():
    refused(r"49153 B of dynamic shared memory > 49152 B, the kernel's default", shared=49_153, max_dynamic=None)
    refused(r"100001 B .* > 100000 B, the kernel's CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES",
            shared=100_001, max_dynamic=100_000)


def test_cluster_beyond_the_portable_size_without_the_attribute_is_refused():
    refused(r"cluster size 16 .* > 8, the portable maximum, .*NON_PORTABLE_CLUSTER_SIZE_ALLOWED is not set",
            cluster=(4, 4, 1), grid=(4, 4, 1), nonportable=None)


def test_cluster_beyond_sixteen_is_refused():
    refused(r"cluster size 32 .* > 16, the non-portable maximum", cluster=(8, 4, 1), grid=(8, 4, 1))


def test_cluster_that_does_not_divide_the_grid_is_refused():
    refused(r"cluster dimension x = 2 does not divide the grid's 3", cluster=(2, 1, 1), grid=(3, 1, 1))


def test_threads_per_block_beyond_1024_are_refused():
    refused(r"1056 threads per block .* > 1024", block=(1056, 1, 1))
    refused(r"block dimension z = 65 > 64", block=(1, 1, 65))


def test_registers_beyond_the_register_file_are_refused():
    # 65 registers round up to 72 per thread (units of 256 per warp): 2304 x 32 warps > 65536
    refused(r"65 registers per thread x 1024 threads \(2304 per warp x 32 warps = 73728\) > 65536",
            block=(1024, 1, 1), registers=65)
    refused(r"256 registers per thread > 255", registers=256)


CUBIN_SCRIPT = """
import sys
sys.path.insert(0, {root!r})
from emulator import driver
driver.install()
from groundtruth.nvidia import NvidiaExample
from emulator.limits import cubin_resources
example = NvidiaExample((256, 128), (2, 1), 256, 256, 256, max_active_clusters=1)
driver.take_launches()
example.compiled(*example.args)
launch = driver.take_launches()[0]
open(sys.argv[1], "wb").write(launch.cubin)
resources = cubin_resources(launch.cubin, launch.kernel_name)
print(resources.registers, resources.static_shared, launch.shared_bytes, launch.max_dynamic_shared,
      launch.cluster_nonportable)
"""


@pytest.mark.skipif(sys.version_info < (3, 10), reason="the DSL needs Python 3.10+")
def test_a_real_cubin_reads_as_cuobjdump_reads_it(tmp_path, nvidia_example):
    nvidia_bin = None
    try:
        import nvidia

        for folder in nvidia.__path__:
            found = list(Path(folder).glob("*/bin/cuobjdump"))
            nvidia_bin = nvidia_bin or (found[0] if found else None)
    except ImportError:
        pass
    cuobjdump = shutil.which("cuobjdump") or nvidia_bin
    if cuobjdump is None:
        pytest.skip("no cuobjdump (requirements.txt's nvidia-cuda-cuobjdump)")
    path = tmp_path / "kernel.cubin"
    done = subprocess.run([sys.executable, "-c", CUBIN_SCRIPT.format(root=str(ROOT)), str(path)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    registers, static_shared, dynamic, attribute, nonportable = (int(x) for x in done.stdout.split()[-5:])
    usage = subprocess.run([str(cuobjdump), "-res-usage", str(path)], capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+) .*SHARED:(\d+)", usage)
    assert m, usage
    assert (registers, static_shared) == (int(m.group(1)), int(m.group(2)))
    # the DSL's host code opts in to the whole maximum and allows non-portable clusters
    assert attribute == B200.shared_per_block_optin and nonportable == 1
    assert dynamic + static_shared <= B200.shared_per_block_optin


@pytest.mark.skipif(sys.version_info < (3, 10), reason="the DSL needs Python 3.10+")
def test_a_pair_allocation_the_peer_cta_skips_is_named_in_the_hang_report(nvidia_example):
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "emulate.py"), "nvidia", "--mnk", "256,256,256",
                           "--mma-tiler", "256,128", "--cluster", "2,1", "--clusters", "1", "--ptx-filter",
                           f"{sys.executable} {ROOT / 'tests' / 'emulator' / 'ptx_pair_defects.py'} odd-cta-skips-alloc"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 3 and done.stdout.strip().splitlines()[-1].startswith("HANG"), done.stdout[-3000:]
    assert re.search(r"CTA \(0, 0, 0\) \(rank 0\):\n  warp \d \(epilogue\) at PTX line \d+ `tcgen05\.alloc\.cta_group::2"
                     r"[^`]*`: tcgen05\.alloc\.cta_group::2 of 512 columns: waiting for a warp of the peer CTA \(rank 1\)",
                     done.stdout), done.stdout[-3000:]
