"""The stub driver route: how the DSL's own host code "launches" a kernel on a machine without a GPU.

- cuda-python's driver bindings find `libcuda.so.1` by soname; the stub (driver/custub.c) is loaded first
  with RTLD_GLOBAL, so that every later `dlopen("libcuda.so.1")` in the process gets it. It answers as the
  GPU `install(gpu=...)` names from DEVICES (a B200 by default: sm_100, 148 SMs, 227 KiB of shared memory
  per block; or an H200: sm_90, 132 SMs), serves device memory from host memory, encodes tensor maps in the
  hardware's format (cuTensorMapEncodeTiled, as tma.encode_tiled), and queues each launch (grid, block, cluster,
  shared memory, attributes, a copy of the parameter bytes laid out from the cubin's `.nv.info`) instead of
  running it. `library()` hands the stub to host code written in Python (groundtruth/peer_cuda.py's twins).
- The DSL's generated host code calls `_cuda*` wrappers in the wheel's runtime library, whose static cudart
  needs the driver's private export tables, which no stub has. `CUTE_DSL_LIBS` replaces that library with
  driver/cdrt_shim.c, whose wrappers forward to the driver API (the stub).
- Both are C, built on first use with the system compiler (`CC`, else cc, gcc or clang) into
  `$XDG_CACHE_HOME/nvfp4-emulator/<hash of sources and compiler>` (default ~/.cache), never into the
  repository.
- `install()` must run before cutlass or cuda.bindings is imported; `take_launches()` hands the queued
  launches to the emulator; `kernel_ptx()` finds a kernel's PTX in the DSL's compiled function.
- On a GPU machine a process may already hold the real driver (torch loads it), and a process cannot swap
  it. `real_driver_loaded()` says so; the entry points then run the emulated part in a fresh process with
  `stub_environment()`: the stub preloaded (LD_PRELOAD), so that whatever loads `libcuda.so.1` there,
  torch included, gets the stub, and no GPU visible.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import EmulatorError

SOURCES = Path(__file__).resolve().parent / "driver"
_lib = None


@dataclass(frozen=True)
class DeviceIdentity:
    """What the stub driver answers about its GPU (cuDeviceGetName, cuDeviceComputeCapability and the
    cuDeviceGetAttribute queries the DSL and cutlass.utils.HardwareInfo make)."""

    name: str
    capability: tuple  # (major, minor)
    arch: str  # what CUTE_DSL_ARCH compiles for
    sm_count: int
    clock_khz: int
    memory_clock_khz: int
    bus_width_bits: int
    l2_bytes: int
    smem_per_sm: int
    smem_per_block_optin: int
    total_memory: int


DEVICES = {
    # the stub's figures before the GPU became selectable (custub.c's defaults)
    "B200": DeviceIdentity("NVIDIA B200", (10, 0), "sm_100a", sm_count=148, clock_khz=1965000,
                           memory_clock_khz=3996000, bus_width_bits=8192, l2_bytes=126 << 20,
                           smem_per_sm=233472, smem_per_block_optin=232448, total_memory=180 << 30),
    # ../shared/MACHINE-FACTS.md, table 2 (cudaDeviceProp on the lent H200, 2026-11-24): 132 SMs, 1980 MHz,
    # 60 MiB L2, 228 KiB shared memory per SM and 227 KiB opt-in per block, HBM3e 3201 MHz x 6016 bit, 141 GB
    "H200": DeviceIdentity("NVIDIA H200", (9, 0), "sm_90a", sm_count=132, clock_khz=1980000,
                           memory_clock_khz=3201000, bus_width_bits=6016, l2_bytes=62914560,
                           smem_per_sm=233472, smem_per_block_optin=232448, total_memory=141 * 10**9),
}
_device = None  # the DeviceIdentity install() set


class EmulatorSetupError(EmulatorError):
    def __init__(self, message: str):
        super().__init__("setup", message)


@dataclass(frozen=True)
class Launch:
    kernel_name: str
    grid: tuple
    block: tuple
    cluster: tuple
    shared_bytes: int
    attributes: dict  # CUlaunchAttributeID -> value (the first 4 bytes of the value union)
    params: tuple  # raw bytes of each kernel parameter, in ordinal order
    stream: int
    # the kernel's attributes as the host code set them (None: never set) and its cubin (the ELF image)
    max_dynamic_shared: int | None = None  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    cluster_nonportable: int | None = None  # CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
    cubin: bytes = b""

    @property
    def pdl(self) -> bool:
        return bool(self.attributes.get(6))  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


def _compiler() -> str:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    raise EmulatorSetupError("no C compiler (set CC, or install cc/gcc/clang): the emulator's stub driver is "
                             "C, built on first use")


def build() -> Path:
    """Build libcuda.so.1 and the runtime shim once per source and compiler version; return their folder."""
    cc = _compiler()
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    digest = hashlib.sha256(version.encode())
    for name in ("custub.c", "cdrt_shim.c"):
        digest.update((SOURCES / name).read_bytes())
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "nvfp4-emulator"
    folder = cache / digest.hexdigest()[:16]
    if (folder / "libcuda_dialect_runtime.so").exists():
        return folder
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=cache))
    flags = ["-O1", "-g", "-Wall", "-Wno-unused-parameter", "-shared", "-fPIC"]
    steps = [
        [cc, *flags, "-Wl,-soname,libcuda.so.1", "-o", str(work / "libcuda.so.1"), str(SOURCES / "custub.c")],
        [cc, *flags, "-o", str(work / "libcuda_dialect_runtime.so"), str(SOURCES / "cdrt_shim.c"),
         f"-L{work}", "-l:libcuda.so.1", "-Wl,-rpath,$ORIGIN"],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            shutil.rmtree(work, ignore_errors=True)
            first = (done.stderr.strip().splitlines() or ["?"])[0]
            raise EmulatorSetupError(f"building the stub driver failed ({Path(step[0]).name}): {first}")
    (work / "libcuda.so").symlink_to("libcuda.so.1")
    try:
        work.rename(folder)  # atomic: a concurrent build that finished first wins
    except OSError:
        shutil.rmtree(work, ignore_errors=True)
    return folder


def install(sm_count: int | None = None, gpu: str = "B200") -> None:
    """Make this process's CUDA driver the stub, answering as `gpu` (a DEVICES key; `sm_count` overrides
    its SM count). Call before importing cutlass or cuda.bindings. CUTE_DSL_ARCH defaults to the GPU's."""
    global _lib, _device
    if gpu not in DEVICES:
        raise EmulatorSetupError(f"GPU {gpu!r}: one of {sorted(DEVICES)}")
    if _lib is not None:
        if DEVICES[gpu] != _device:
            raise EmulatorSetupError(f"the stub driver already answers as {_device.name}, not {DEVICES[gpu].name}")
        return
    if "cutlass" in sys.modules:
        raise EmulatorSetupError("emulator.driver.install() must run before cutlass is imported")
    driver = _loaded_libcuda()
    if driver:  # cuda-python loads the driver at its first call, not at import (torch imports it)
        raise EmulatorSetupError(f"a CUDA driver is already loaded in this process ({driver})")
    folder = build()
    _lib = ctypes.CDLL(str(folder / "libcuda.so.1"), mode=ctypes.RTLD_GLOBAL)
    os.environ["CUTE_DSL_LIBS"] = str(folder / "libcuda_dialect_runtime.so")
    _device = DEVICES[gpu]
    os.environ.setdefault("CUTE_DSL_ARCH", _device.arch)
    # the emulator reads each kernel's PTX from the compiled function (JitCompiledFunction.__ptx__), which
    # the DSL fills only when asked to keep it; the files it then writes go to a folder of their own
    os.environ["CUTE_DSL_KEEP_PTX"] = "1"
    os.environ.setdefault("CUTE_DSL_DUMP_DIR", tempfile.mkdtemp(prefix="nvfp4-emulator-dump-"))
    os.environ["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "")  # keep torch on the CPU
    _declare(_lib)
    d = _device
    _lib.custub_set_device(d.name.encode(), *d.capability, d.sm_count, d.clock_khz, d.memory_clock_khz,
                           d.bus_width_bits, d.l2_bytes, d.smem_per_sm, d.smem_per_block_optin, d.total_memory)
    if sm_count is not None:
        _lib.custub_set_sm_count(sm_count)
    import cuda.bindings.runtime as cudart

    # cuda-python's runtime bindings embed a static cudart, which needs the driver's private export
    # tables: the DSL's device count (JitCompiledFunction's executor) comes from here instead.
    cudart.cudaGetDeviceCount = lambda: (cudart.cudaError_t.cudaSuccess, 1)


def real_driver_loaded() -> str | None:
    """The path of a CUDA driver other than the stub that this process has loaded, else None."""
    return _loaded_libcuda()


STUB_PROCESS = "NVFP4_EMULATOR_STUB_PROCESS"  # set in the fresh process, so that it never starts another


def stub_environment(environ=None) -> dict:
    """An environment for a fresh process whose CUDA driver is the stub however early it is loaded."""
    env = dict(os.environ if environ is None else environ)
    stub = str(build() / "libcuda.so.1")
    env["LD_PRELOAD"] = " ".join(filter(None, [stub, env.get("LD_PRELOAD", "")]))
    env["CUDA_VISIBLE_DEVICES"] = ""
    env[STUB_PROCESS] = "1"
    return env


def rerun_with_stub(script, argv) -> int | None:
    """Where this process holds a real driver: `python SCRIPT ARGV` in a fresh process whose driver is the
    stub, its exit status returned (its output is this process's). None where the stub can be installed here."""
    driver = real_driver_loaded()
    if driver is None:
        return None
    if os.environ.get(STUB_PROCESS):
        raise EmulatorSetupError(f"a CUDA driver ({driver}) was loaded even with the stub preloaded")
    sys.stdout.flush()
    sys.stderr.flush()
    return subprocess.run([sys.executable, str(script), *argv], env=stub_environment()).returncode


def _loaded_libcuda() -> str | None:
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        if "libcuda.so" in line and "nvfp4-emulator" not in line:
            return line.split()[-1]
    return None


def _declare(lib) -> None:
    u64 = ctypes.c_uint64
    lib.custub_set_sm_count.argtypes = [ctypes.c_int]
    lib.custub_set_device.argtypes = [ctypes.c_char_p] + [ctypes.c_int] * 9 + [u64]
    lib.custub_launch_count.restype = ctypes.c_int
    lib.custub_launch_get.restype = ctypes.c_char_p
    lib.custub_launch_get.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint),
                                      ctypes.POINTER(u64), ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int),
                                      ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_int)]
    lib.custub_launch_param.restype = ctypes.POINTER(ctypes.c_ubyte)
    lib.custub_launch_param.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    lib.custub_launch_kernel.restype = ctypes.POINTER(ctypes.c_ubyte)
    lib.custub_launch_kernel.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int),
                                         ctypes.POINTER(u64)]
    lib.custub_allocation_count.restype = ctypes.c_int
    lib.custub_allocation_get.argtypes = [ctypes.c_int, ctypes.POINTER(u64), ctypes.POINTER(u64)]


def _require():
    if _lib is None:
        raise EmulatorSetupError("emulator.driver.install() was not called")
    return _lib


def library():
    """The stub libcuda itself (ctypes.CDLL), for a host program written in Python that calls the driver API as
    a C++ host would (cuModuleLoadData, cuTensorMapEncodeTiled, cuFuncSetAttribute, cuLaunchKernel...):
    groundtruth/peer_cuda.py's twins of the peers' CUDA host code. Their launches are queued as the DSL's are."""
    return _require()


def device() -> DeviceIdentity:
    """The GPU the stub answers as."""
    _require()
    return _device


def set_sm_count(sm_count: int) -> None:
    _require().custub_set_sm_count(sm_count)


def take_launches() -> list:
    """The launches queued since the last call, oldest first (the queue is emptied)."""
    lib = _require()
    launches = []
    for i in range(lib.custub_launch_count()):
        dims = (ctypes.c_uint * 9)()
        smem, stream = ctypes.c_uint(), ctypes.c_uint64()
        nparams, nattrs = ctypes.c_int(), ctypes.c_int()
        ids, values = (ctypes.c_uint * 16)(), (ctypes.c_int * 16)()
        name = lib.custub_launch_get(i, dims, ctypes.byref(smem), ctypes.byref(stream), ctypes.byref(nparams),
                                     ctypes.byref(nattrs), ids, values)
        params = []
        for p in range(nparams.value):
            size = ctypes.c_int()
            data = lib.custub_launch_param(i, p, ctypes.byref(size))
            params.append(ctypes.string_at(data, size.value))
        max_dynamic, nonportable, elf_size = ctypes.c_int(), ctypes.c_int(), ctypes.c_uint64()
        elf = lib.custub_launch_kernel(i, ctypes.byref(max_dynamic), ctypes.byref(nonportable), ctypes.byref(elf_size))
        launches.append(Launch(name.decode(), tuple(dims[0:3]), tuple(dims[3:6]), tuple(dims[6:9]), smem.value,
                               {ids[a]: values[a] for a in range(nattrs.value)}, tuple(params), stream.value,
                               None if max_dynamic.value < 0 else max_dynamic.value,
                               None if nonportable.value < 0 else nonportable.value,
                               ctypes.string_at(elf, elf_size.value) if elf else b""))
    lib.custub_launch_clear()
    return launches


def allocations() -> list:
    """(address, size) of the live device allocations (host memory) the stub has served."""
    lib = _require()
    out = []
    for i in range(lib.custub_allocation_count()):
        address, size = ctypes.c_uint64(), ctypes.c_uint64()
        lib.custub_allocation_get(i, ctypes.byref(address), ctypes.byref(size))
        out.append((address.value, size.value))
    return out


def kernel_ptx(compiled, kernel_name: str) -> str:
    """The PTX module holding `kernel_name`, from the DSL's compiled function (JitCompiledFunction.__ptx__)."""
    ptx = getattr(compiled, "__ptx__", None)
    if not ptx:
        raise EmulatorSetupError("the compiled function carries no PTX (compile with CUTE_DSL_KEEP_PTX=1)")
    if f".entry {kernel_name}(" not in ptx:
        raise EmulatorSetupError(f"kernel {kernel_name[:60]}... is not in the compiled function's PTX")
    return ptx
