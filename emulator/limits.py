"""Launch limits: a launch the impersonated GPU's driver would refuse is an error naming the limit.

The stub driver answers as a B200 (driver.py) and hands each launch over with the kernel's attributes as the
host code set them and its cubin; `check_launch` refuses what a B200's driver refuses at cuLaunchKernelEx:

| limit | B200 | source |
|---|---|---|
| threads per block; block x, y, z | 1024; 1024, 1024, 64 | CUDA C++ Programming Guide, "Technical Specifications per Compute Capability" (10.0) |
| grid x, y, z | 2^31 - 1, 65535, 65535 | the same table |
| shared memory per block (static + dynamic, less the driver's 1 KiB reserve the cubin's static count includes) | 232448 B (227 KiB, opt-in) | cudaDevAttrMaxSharedMemoryPerBlockOptin; MACHINE-FACTS.md; the reserve: below |
| dynamic shared memory without the opt-in | 49152 B; above it, at most CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES | CUDA driver API, cuFuncSetAttribute |
| cluster size | 8 (portable); 16 with CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED; each dimension divides the grid's | CUDA Programming Guide, "Thread Block Clusters"; MACHINE-FACTS.md |
| registers | 255 per thread; 65536 per block and per SM, allocated per warp in units of 256 | the Technical Specifications table; the guide's occupancy rules |

The kernel's registers and static shared memory are the cubin's: EIATTR_REGCOUNT (0x2f) in `.nv.info`
(symbol index, count) and the size of the `.nv.shared.<kernel>` section, the figures `cuobjdump -res-usage`
prints (REG, SHARED; checked on FlashInfer's kernel: REG:47 SHARED:1024). Every sm_100a cubin the DSL makes
counts 1024 B of static shared memory with no `.shared` variable in its PTX (`.nv.shared.reserved.0` lies in
it): the 1 KiB the driver reserves at the start of each CTA's window (228 KiB per SM = 227 KiB opt-in + 1 KiB),
which the emulator's shared window reserves too (memory.SHARED_RESERVED_BYTES). It is not counted against the
opt-in maximum: teelaitila's final entry launched 232448 B of dynamic shared memory with SHARED:1024 on the
board's B200s (benchmark 2, 28.3 us published; groundtruth/peer_dsl.py), which a check of dynamic + 1024 <=
232448 refused.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import EmulatorError


@dataclass(frozen=True)
class GpuLimits:
    name: str
    threads_per_block: int = 1024
    block_dims: tuple = (1024, 1024, 64)
    grid_dims: tuple = (2**31 - 1, 65535, 65535)
    shared_per_block_optin: int = 232448
    dynamic_shared_default: int = 49152
    cluster_portable: int = 8
    cluster_nonportable: int = 16
    registers_per_thread: int = 255
    registers_per_block: int = 65536
    register_unit: int = 256  # registers are allocated per warp in units of this many
    reserved_shared: int = 1024  # the driver's reserve per CTA, inside the cubin's static count (docstring)


B200 = GpuLimits("B200")


class LaunchLimitError(EmulatorError):
    def __init__(self, message: str):
        super().__init__("launch-limit", message)


@dataclass(frozen=True)
class CubinResources:
    registers: int | None  # per thread, None if the cubin does not say
    static_shared: int


def _sections(elf: bytes) -> dict:
    """{name: (type, offset, size, info)} of an ELF64 image."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)

    def header(i):
        name, kind, _flags, _addr, offset, size, _link, info = struct.unpack_from("<IIQQQQII", elf, shoff + i * shentsize)
        return name, kind, offset, size, info

    names_at = header(shstrndx)[2]
    out = {}
    for i in range(shnum):
        name, kind, offset, size, info = header(i)
        end = elf.index(b"\0", names_at + name)
        out[elf[names_at + name:end].decode()] = (kind, offset, size, info)
    return out


def _nv_info(elf: bytes, offset: int, size: int):
    """The (attribute, payload) records of an .nv.info section (format byte, attribute byte, then a 16-bit
    value (format 3) or a 16-bit length and that many bytes (format 4))."""
    p, end = offset, offset + size
    while p + 4 <= end:
        fmt, attribute, half = elf[p], elf[p + 1], struct.unpack_from("<H", elf, p + 2)[0]
        length = half if fmt == 4 else 0
        yield attribute, elf[p + 4:p + 4 + length]
        p += 4 + length


def cubin_resources(elf: bytes, kernel_name: str) -> CubinResources:
    sections = _sections(elf)
    shared = sections.get(f".nv.shared.{kernel_name}")
    text = sections.get(f".text.{kernel_name}")
    registers = None
    if text is not None and ".nv.info" in sections:
        symbol = text[3] & 0xFFFFFF  # the .text section's sh_info: the kernel's symbol index
        _, offset, size, _ = sections[".nv.info"]
        for attribute, payload in _nv_info(elf, offset, size):
            if attribute == 0x2F and len(payload) == 8:  # EIATTR_REGCOUNT: symbol index, registers
                index, count = struct.unpack("<II", payload)
                if index == symbol:
                    registers = count
    return CubinResources(registers, shared[2] if shared else 0)


def check_launch(launch, limits: GpuLimits = B200) -> None:
    """Raise LaunchLimitError naming the first limit `launch` (driver.Launch) is beyond. A launch record
    without the kernel's facts (attributes as set, cubin) is taken as the driver's defaults, registers unknown."""
    cubin = getattr(launch, "cubin", b"")
    max_dynamic_shared = getattr(launch, "max_dynamic_shared", None)
    cluster_nonportable = getattr(launch, "cluster_nonportable", None)

    def refuse(what: str):
        raise LaunchLimitError(f"{limits.name} refuses the launch: {what}")

    threads = launch.block[0] * launch.block[1] * launch.block[2]
    if threads > limits.threads_per_block:
        refuse(f"{threads} threads per block (block {tuple(launch.block)}) > {limits.threads_per_block}")
    for axis, (n, most) in enumerate(zip(launch.block, limits.block_dims)):
        if n > most:
            refuse(f"block dimension {'xyz'[axis]} = {n} > {most}")
    for axis, (n, most) in enumerate(zip(launch.grid, limits.grid_dims)):
        if n > most:
            refuse(f"grid dimension {'xyz'[axis]} = {n} > {most}")

    cluster = tuple(launch.cluster)
    size = cluster[0] * cluster[1] * cluster[2]
    for axis, (g, c) in enumerate(zip(launch.grid, cluster)):
        if g % c:
            refuse(f"cluster dimension {'xyz'[axis]} = {c} does not divide the grid's {g}")
    if size > limits.cluster_nonportable:
        refuse(f"cluster size {size} (cluster {cluster}) > {limits.cluster_nonportable}, the non-portable maximum")
    if size > limits.cluster_portable and not cluster_nonportable:
        refuse(f"cluster size {size} (cluster {cluster}) > {limits.cluster_portable}, the portable maximum, and "
               "the kernel's CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED is not set")

    resources = cubin_resources(cubin, launch.kernel_name) if cubin else CubinResources(None, 0)
    dynamic = launch.shared_bytes
    allowed = limits.dynamic_shared_default if max_dynamic_shared is None else max_dynamic_shared
    if dynamic > allowed:
        refuse(f"{dynamic} B of dynamic shared memory > {allowed} B, the kernel's "
               f"{'default' if max_dynamic_shared is None else 'CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES'}")
    static = max(0, resources.static_shared - limits.reserved_shared)  # what the kernel itself declares
    if dynamic + static > limits.shared_per_block_optin:
        refuse(f"{dynamic} B of dynamic + {static} B of static shared memory (the cubin's {resources.static_shared} "
               f"less the driver's {limits.reserved_shared} B reserve) > {limits.shared_per_block_optin} B per block")

    if resources.registers is not None:
        if resources.registers > limits.registers_per_thread:
            refuse(f"{resources.registers} registers per thread > {limits.registers_per_thread}")
        per_warp = -(-resources.registers * 32 // limits.register_unit) * limits.register_unit
        warps = -(-threads // 32)
        if per_warp * warps > limits.registers_per_block:
            refuse(f"{resources.registers} registers per thread x {threads} threads ({per_warp} per warp x {warps} "
                   f"warps = {per_warp * warps}) > {limits.registers_per_block} registers per block")


def registers_per_cta(launch, limits: GpuLimits = B200) -> int | None:
    """The registers one CTA of `launch` takes from its SM (the cubin's per-thread count, allocated per warp in
    units of `register_unit`), None where the launch record carries no cubin or the cubin does not say."""
    cubin = getattr(launch, "cubin", b"")
    registers = cubin_resources(cubin, launch.kernel_name).registers if cubin else None
    if registers is None:
        return None
    per_warp = -(-registers * 32 // limits.register_unit) * limits.register_unit
    return per_warp * -(-(launch.block[0] * launch.block[1] * launch.block[2]) // 32)
