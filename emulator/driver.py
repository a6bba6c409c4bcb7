"""The stub driver route: how the DSL's own host code "launches" a kernel on a machine without a GPU.

- cuda-python's driver bindings find `libcuda.so.1` by soname; the stub (driver/custub.c) is loaded first
  with RTLD_GLOBAL, so that every later `dlopen("libcuda.so.1")` in the process gets it. It answers as a
  B200 (sm_100, 148 SMs, 227 KiB of shared memory per block, clusters), serves device memory from host
  memory, and queues each launch (grid, block, cluster, shared memory, attributes, a copy of the parameter
  bytes laid out from the cubin's `.nv.info`) instead of running it.
- The DSL's generated host code calls `_cuda*` wrappers in the wheel's runtime library, whose static cudart
  needs the driver's private export tables, which no stub has. `CUTE_DSL_LIBS` replaces that library with
  driver/cdrt_shim.c, whose wrappers forward to the driver API (the stub).
- Both are C, built on first use with the system compiler (`CC`, else cc, gcc or clang) into
  `$XDG_CACHE_HOME/nvfp4-emulator/<hash of sources and compiler>` (default ~/.cache), never into the
  repository.
- `install()` must run before cutlass or cuda.bindings is imported; `take_launches()` hands the queued
  launches to the emulator; `kernel_ptx()` finds a kernel's PTX in the DSL's compiled function.
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


def install(sm_count: int = 148) -> None:
    """Make this process's CUDA driver the stub. Call before importing cutlass or cuda.bindings."""
    global _lib
    if _lib is not None:
        return
    if "cutlass" in sys.modules:
        raise EmulatorSetupError("emulator.driver.install() must run before cutlass is imported")
    driver = _loaded_libcuda()
    if driver:  # cuda-python loads the driver at its first call, not at import (torch imports it)
        raise EmulatorSetupError(f"a CUDA driver is already loaded in this process ({driver})")
    folder = build()
    _lib = ctypes.CDLL(str(folder / "libcuda.so.1"), mode=ctypes.RTLD_GLOBAL)
    os.environ["CUTE_DSL_LIBS"] = str(folder / "libcuda_dialect_runtime.so")
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_100a")
    # the emulator reads each kernel's PTX from the compiled function (JitCompiledFunction.__ptx__), which
    # the DSL fills only when asked to keep it; the files it then writes go to a folder of their own
    os.environ["CUTE_DSL_KEEP_PTX"] = "1"
    os.environ.setdefault("CUTE_DSL_DUMP_DIR", tempfile.mkdtemp(prefix="nvfp4-emulator-dump-"))
    os.environ["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "")  # keep torch on the CPU
    _declare(_lib)
    _lib.custub_set_sm_count(sm_count)
    import cuda.bindings.runtime as cudart

    # cuda-python's runtime bindings embed a static cudart, which needs the driver's private export
    # tables: the DSL's device count (JitCompiledFunction's executor) comes from here instead.
    cudart.cudaGetDeviceCount = lambda: (cudart.cudaError_t.cudaSuccess, 1)


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
