"""A peer's CUDA C++ entry (torch's `load_inline`), run in the emulator: nvcc's PTX, a Python twin of its host code.

The best public entries of the board are CUDA C++ compiled at import by `torch.utils.cpp_extension.load_inline`:
a `CUDA_SRC` string holding the kernel and its host code (tensor maps encoded once with cuTensorMapEncodeTiled,
then patched per call: address and M written into a `__grid_constant__` struct; a `LAUNCH(G, BM, N, K,
CTA_GROUP)` table picking a template instance per shape). Running that host code needs a CUDA torch, so this
route splits the entry in two:

- **The device code** is the peer's own source, compiled by nvcc from PyPI (groundtruth/cuda_toolkit.py) to
  sm_100a PTX exactly as `load_inline` would compile it (torch's include paths and COMMON_NVCC_FLAGS, the
  `extra_cuda_cflags` it names, `-arch=sm_100a` for its `-gencode`), and assembled by ptxas into the cubin
  the stub driver reads (parameter layout, registers). A shape outside the source's LAUNCH table gets an
  explicit instance of the same kernel template (one line appended: the kernel's address taken at namespace
  scope), with the template arguments the host code would compute for such a row.
- **The host code** is a twin: a few lines of data per version (`Twin`: the kernel template, its LAUNCH
  table, the struct's fields, block and tile sizes, the shared-memory budget, the grid rule, the warp roles)
  and one function per host design (`host_v5e`) that does per call what the C++ does, through the stub
  driver's C API (ctypes): cuTensorMapEncodeTiled for the map templates (the stub writes the hardware's
  format, emulator/tma.py), the per-call patches of address and size words, the struct packed as the C++
  compiler lays it out (natural alignment, CUtensorMap 128-byte aligned as CUDA 13's cuda.h declares it),
  cuFuncSetAttribute and cuLaunchKernel. The launch is then queued like the DSL's, and the emulator's
  execute / execute_stream run it (timed, streams of calls).

The twin is checked against the source it mirrors (`Twin.check`: the LAUNCH rows, the struct's fields and
types, BLOCK_N, BLOCK_K, the warp count, the patched words, the grid's SM budget, read from the source by
regular expressions) and against what nvcc made of it (`check_compiled`: every LAUNCH row's instance exists
with the stage count the twin computes; the struct's size is the PTX parameter's). A source no twin matches is
refused, naming the first mismatch.

The peers' sources carry no license: none is in this repository. `SOURCES` says where each comes from (a git
clone at a named commit); the tools take the file's path.

    case = PeerCudaCase(Path("submission_v6b.py").read_text(), "m: [40, 96]; n: [256, 256]; k: [512, 512]; g: 2; seed: 1")
    case.register(emu); emu.call(case.compiled, *case.args); case.compare()
"""

from __future__ import annotations

import ast
import copy
import ctypes
import re
from dataclasses import dataclass, field

import numpy as np
import torch

from . import cuda_toolkit

SOURCES = {
    "gau-nernst": "git clone https://github.com/gau-nernst/gpu-mode-kernels && git -C gpu-mode-kernels checkout "
                  "aee9cda; files nvidia/nvfp4_group_gemm/submission_v*.py (board times: README.md at dcf43d7)",
}

KIND = "a CUDA C++ entry compiled with torch's load_inline"  # what recognizes() accepts (groundtruth/peers.py)
ARCH = "sm_100a"
SM_COUNT = 148  # a B200's
WARP = 32
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class PeerRefused(ValueError):
    """The source is not one this route runs (not load_inline CUDA, no twin matches it, a shape its host code
    does not send to its kernel): the message says why in one line."""


# --------------------------------------------------------------------------------------------------
# The source: load_inline's arguments
# --------------------------------------------------------------------------------------------------


def _load_inline_call(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "load_inline":
                return node
    return None


def _module_strings(tree) -> dict:
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = node.value.value
    return out


@dataclass(frozen=True)
class InlineSource:
    """What `load_inline(...)` is given: the CUDA source text, its extra nvcc flags, `no_implicit_headers`."""

    cuda: str
    cuda_flags: tuple
    no_implicit_headers: bool
    name: str


def inline_source(text: str) -> InlineSource | None:
    """The load_inline call of a Python source, resolved (its cuda_sources a string or a module-level string
    constant, its extra_cuda_cflags a literal list), or None."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    call = _load_inline_call(tree)
    if call is None:
        return None
    strings = _module_strings(tree)
    kwargs = {k.arg: k.value for k in call.keywords if k.arg}
    positional = ("name", "cpp_sources", "cuda_sources")
    for key, value in zip(positional, call.args):
        kwargs.setdefault(key, value)

    def value_of(node):
        if node is None:
            return None
        if isinstance(node, ast.Name):
            return strings.get(node.id)
        try:
            return ast.literal_eval(node)
        except ValueError:
            return None

    cuda = value_of(kwargs.get("cuda_sources"))
    if isinstance(cuda, list):
        cuda = "\n".join(cuda)
    if not isinstance(cuda, str) or "__global__" not in cuda:
        return None
    flags = value_of(kwargs.get("extra_cuda_cflags")) or []
    return InlineSource(cuda, tuple(f for f in flags if isinstance(f, str)),
                        bool(value_of(kwargs.get("no_implicit_headers"))), str(value_of(kwargs.get("name")) or "peer"))


def recognizes(source_text: str) -> bool:
    """A Python source that compiles CUDA C++ with torch's load_inline (a `__global__` in its cuda_sources)."""
    return inline_source(source_text) is not None


def nvcc_flags(src: InlineSource) -> list:
    """The flags load_inline gives nvcc (torch's COMMON_NVCC_FLAGS, the extension defines, C++17, the source's
    extra_cuda_cflags), for -ptx: -gencode/-arch become the route's -arch, and what only shapes a binary or a
    report (-lineinfo, -Xptxas, --keep, -rdc) is left out."""
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

    flags = list(COMMON_NVCC_FLAGS) + [f"-DTORCH_EXTENSION_NAME={src.name}", "-DTORCH_API_INCLUDE_EXTENSION_H",
                                       "-std=c++17"]
    for f in src.cuda_flags:
        if f.startswith(("-gencode", "-arch", "--gpu-architecture", "-code", "-Xptxas", "--keep", "-lineinfo",
                         "--relocatable-device-code", "-rdc", "--resource-usage")):
            continue
        flags.append(f)
    return flags


def cuda_text(src: InlineSource, extra: str = "") -> str:
    """The .cu file load_inline writes (its implicit headers first unless no_implicit_headers), plus `extra`."""
    head = "" if src.no_implicit_headers else "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
    return head + src.cuda + ("\n" + extra if extra else "")


# --------------------------------------------------------------------------------------------------
# The twin: a version's launch as data
# --------------------------------------------------------------------------------------------------


CTYPES = {"CUtensorMap": (128, 128), "half *": (8, 8), "int": (4, 4)}  # C type -> (size, alignment) on x86-64


def struct_layout(fields) -> tuple:
    """({field: (offset, size)}, struct size) of a C struct of (name, C type, array length) members as x86-64's
    C++ compilers lay it out: each member at its type's alignment, the size rounded up to the largest."""
    offset, align_max, out = 0, 1, {}
    for name, ctype, count in fields:
        size, align = CTYPES[ctype]
        offset = -(-offset // align) * align
        out[name] = (offset, size * count)
        offset += size * count
        align_max = max(align_max, align)
    return out, -(-offset // align_max) * align_max


@dataclass(frozen=True)
class Twin:
    """One version's host code, as data. `fields`: the `__grid_constant__` struct's members in order, (name,
    C type, count as a function of the group count); `launch_table`: its LAUNCH rows as (G, BLOCK_M, N, K,
    CTA_GROUP); `template`: the kernel template's parameters, in order; `smem_budget`: the bytes its stage count
    is computed from; `sm_budget`: the SMs its grid may use; `roles`: warp -> role; `host`: the design of the
    per-call code (HOSTS). `check(source)` lists what in a source contradicts it."""

    version: str
    author: str
    kernel: str
    template: tuple
    struct: str
    fields: tuple
    launch_table: tuple
    block_n: int
    block_k: int
    warps: int
    smem_budget: int
    sm_budget: int
    roles: dict
    host: str  # the host design (HOSTS)
    board_us: tuple = ()  # the author's B200 times, benchmarks 1-4 (README)
    patches: dict = field(default_factory=dict)  # map list -> the int words the host writes per call
    default_row: tuple = (128, 2)  # (BLOCK_M, CTA_GROUP) for a shape outside the table
    a_box_rows: str = "128 / CTA_GROUP"  # the rows of A's box, in BLOCK_M and CTA_GROUP (create_args_template)
    # the LAUNCH macro's parameters (`launch_table` rows are always (G, BLOCK_M, N, K, CTA_GROUP)), and BLOCK_M
    # where the source fixes it as a constant instead of taking it per row
    launch_params: tuple = ("G", "BLOCK_M", "N", "K", "CTA_GROUP")
    block_m_fixed: int | None = None

    def a_rows(self, row) -> int:
        _, block_m, _, _, cta_group = row
        return int(eval(self.a_box_rows, {}, {"BLOCK_M": block_m, "CTA_GROUP": cta_group}))  # noqa: S307

    def layout(self, groups: int) -> tuple:
        """({field: (offset, size)}, struct size) as the C++ compiler lays the struct out for `groups`."""
        return struct_layout([(name, ctype, count(groups)) for name, ctype, count in self.fields])

    def row(self, groups: int, n: int, k: int, override: tuple | None = None) -> tuple:
        """The LAUNCH row for a shape: the table's, else (`override` or `default_row`) for an instance of the
        same template that the table lacks."""
        for row in self.launch_table:
            if row[0] == groups and row[2] == n and row[3] == k and override is None:
                return row
        block_m, cta_group = override or self.default_row
        if self.block_m_fixed is not None and block_m != self.block_m_fixed:
            raise PeerRefused(f"{self.author} {self.version}: BLOCK_M is {self.block_m_fixed} in this version "
                              f"(--row {block_m},{cta_group})")
        return (groups, block_m, n, k, cta_group)

    def in_table(self, row: tuple) -> bool:
        return tuple(row) in {tuple(r) for r in self.launch_table}

    # ---- the host's arithmetic (group_gemm_launch) ----

    def stages(self, row) -> int:
        """Every stage that fits the shared-memory budget (NUM_STAGES)."""
        dynamic, static = self._stage_bytes(row)
        return (self.smem_budget - static) // dynamic

    def _stage_bytes(self, row) -> tuple:
        """(bytes per stage with its two mbarriers, fixed bytes: accumulator and epilogue mbarriers, tmem address)."""
        _, block_m, _, _, cta_group = row
        ab = (block_m // cta_group + self.block_n) * (self.block_k // 2)
        sf = 128 * (self.block_k // 16) * (1 + block_m // 128)
        return ab + sf + 2 * 8, 2 * (1 + block_m // 128) * 8 + 4

    def shared_bytes(self, row) -> int:
        dynamic, static = self._stage_bytes(row)
        return dynamic * self.stages(row) + static

    def grid(self, row, m_tiles: int) -> tuple:
        grid_n = row[2] // self.block_n
        return (grid_n, min(self.sm_budget // grid_n, m_tiles), 1)

    def template_args(self, row) -> tuple:
        """The kernel template's arguments for a row, in the template's order."""
        groups, block_m, n, k, cta_group = row
        values = {"NUM_GROUPS": groups, "BLOCK_M": block_m, "N": n, "K": k, "NUM_STAGES": self.stages(row),
                  "CTA_GROUP": cta_group}
        return tuple(values[p] for p in self.template)

    # ---- the twin against its source ----

    def check(self, cuda: str) -> list:
        """What in the CUDA source contradicts this twin: [] when every fact the twin relies on is there."""
        wrong = []
        rows = tuple(tuple(int(x) for x in m.split(",")) for m in
                     re.findall(r"^\s*LAUNCH\(\s*(\d+(?:\s*,\s*\d+)*)\s*\)", cuda, re.M))
        names = ("G", "BLOCK_M", "N", "K", "CTA_GROUP")
        table = tuple(tuple(r[names.index(p)] for p in self.launch_params) for r in self.launch_table)
        if rows != table:
            wrong.append(f"LAUNCH table {rows} (twin: {table})")
        struct = re.search(r"struct\s+" + self.struct + r"\s*\{(.*?)\};", cuda, re.S)
        members = [] if struct is None else re.findall(r"^\s*([\w ]+?\s*\*?)\s*(\w+)\s*\[([^\]]+)\]\s*;",
                                                        struct.group(1), re.M)
        found = [(name, " ".join(ctype.split()).replace(" *", " *"), count.replace(" ", "")) for ctype, name, count in
                 members]
        want = [(name, ctype, count(8)) for name, ctype, count in self.fields]
        have = [(name, ctype, eval(count.replace("NUM_GROUPS", "8"))) for name, ctype, count in found]  # noqa: S307
        if have != want:
            wrong.append(f"struct {self.struct} members {have} (twin, for 8 groups: {want})")
        constants = (("BLOCK_N", self.block_n), ("BLOCK_K", self.block_k), ("NUM_WARPS", self.warps))
        if self.block_m_fixed is not None:
            constants += (("BLOCK_M", self.block_m_fixed),)
        for name, value in constants:
            m = re.search(rf"constexpr\s+int\s+{name}\s*=\s*(\d+)\s*;", cuda)
            if not m or int(m.group(1)) != value:
                wrong.append(f"{name} {m and m.group(1)} (twin: {value})")
        signature = re.search(r"template\s*<([^>]*)>\s*__global__[^{]*?\b" + self.kernel + r"\s*\(", cuda, re.S)
        params = () if signature is None else tuple(p.split()[-1] for p in signature.group(1).split(","))
        if params != self.template:
            wrong.append(f"kernel {self.kernel} template parameters {params} (twin: {self.template})")
        m = re.search(r"sm100_size\s*=\s*(\d+)\s*\*\s*1024", cuda)
        if not m or int(m.group(1)) * 1024 != self.smem_budget:
            wrong.append(f"shared-memory budget {m and m.group(0)} (twin: {self.smem_budget})")
        m = re.search(r"dim3\s+grid\s*\(\s*grid_n\s*,\s*std::min\(\s*(\d+)\s*/\s*grid_n", cuda)
        if not m or int(m.group(1)) != self.sm_budget:
            wrong.append(f"grid's SM budget {m and m.group(1)} (twin: {self.sm_budget})")
        m = re.search(r"init_AB_tmap\(\s*args\.A_tmap_list\s*\+\s*i\s*,\s*nullptr\s*,\s*1\s*,\s*K\s*,([^,]+),", cuda)
        if not m or m.group(1).replace(" ", "") != self.a_box_rows.replace(" ", ""):
            wrong.append(f"A's box rows {m and m.group(1).strip()} (twin: {self.a_box_rows})")
        for tmap, patched in self.patches.items():
            indices = {int(i) for i in re.findall(r"reinterpret_cast<int\s*\*>\(args\." + tmap + r"\s*\+\s*i\)\[(\d+)\]",
                                                 cuda)}
            if indices != set(patched):
                wrong.append(f"{tmap}: int words {sorted(indices)} patched per call (twin: {sorted(patched)})")
        return wrong


def check_compiled(twin: Twin, ptx: str) -> list:
    """What in nvcc's PTX contradicts the twin: every LAUNCH row's kernel instance with the twin's stage count,
    and the struct parameter's size."""
    wrong = []
    instances = entries(ptx, twin.kernel)
    for row in twin.launch_table:
        args = twin.template_args(row)
        if args not in instances:
            wrong.append(f"no instance {twin.kernel}<{', '.join(map(str, args))}> in the PTX "
                         f"(instances: {sorted(instances)})")
            continue
        size = param_sizes(ptx, instances[args])[0]
        if size != twin.layout(row[0])[1]:
            wrong.append(f"{twin.struct}<{row[0]}> is {size} B in the PTX, {twin.layout(row[0])[1]} B in the twin")
    return wrong


def entries(ptx: str, kernel: str) -> dict:
    """{template arguments: mangled entry name} of the instances of `kernel` in a PTX module (Itanium mangling
    of integer template arguments: `Li8E`, negative `Lin8E`)."""
    out = {}
    for name in re.findall(r"\.entry\s+([\w$]+)\s*\(", ptx):
        m = re.match(rf"_Z{len(kernel)}{kernel}I((?:Lin?\d+E)+)E", name)
        if m:
            args = tuple(int(v.replace("n", "-")) for v in re.findall(r"Li(n?\d+)E", m.group(1)))
            out[args] = name
    return out


def param_sizes(ptx: str, entry: str) -> list:
    """The byte size of each parameter of an entry."""
    from emulator.ptx import parse_module

    return [p.size for p in parse_module(ptx)[entry].params]


def _count(expr: str):
    return eval(f"lambda G: {expr}")  # noqa: S307 - the twin's own expressions below


# gau-nernst's versions that share v5e's host design (one launch per call, maps encoded once and patched,
# groups sorted by descending M). The LAUNCH tables and struct are read from each file by Twin.check.
_GAU_FIELDS = (("A_tmap_list", "CUtensorMap", _count("G")), ("B_tmap_list", "CUtensorMap", _count("G")),
               ("SFA_tmap_list", "CUtensorMap", _count("G")), ("SFB_tmap_list", "CUtensorMap", _count("G")),
               ("C_ptr_list", "half *", _count("G")), ("M_list", "int", _count("G")),
               ("grid_m_cu", "int", _count("G + 1")))
_GAU_COMMON = dict(author="gau-nernst", kernel="kernel_cutlass",
                   template=("NUM_GROUPS", "BLOCK_M", "N", "K", "NUM_STAGES", "CTA_GROUP"), struct="Arguments",
                   fields=_GAU_FIELDS, block_n=128, block_k=256, warps=6, smem_budget=227 * 1024, sm_budget=148,
                   roles={0: "epilogue", 1: "epilogue", 2: "epilogue", 3: "epilogue", 4: "TMA", 5: "MMA"},
                   host="v5e", patches={"A_tmap_list": (9,), "SFA_tmap_list": (8,)})
_GAU_TABLE = ((8, 128, 4096, 7168, 2), (8, 256, 7168, 2048, 2), (2, 128, 3072, 4096, 2), (2, 128, 4096, 1536, 2))
TWINS = {
    # v5g: BLOCK_M a constant 128 (no template parameter, LAUNCH(G, N, K, CTA_GROUP)), A loaded only where in bounds
    "gau-nernst v5g": Twin(version="v5g", launch_table=tuple((g, 128, n, k, cg) for g, _, n, k, cg in _GAU_TABLE),
                           board_us=(28.5, 20.3, 8.51, 6.49), a_box_rows="BLOCK_M / CTA_GROUP",
                           launch_params=("G", "N", "K", "CTA_GROUP"), block_m_fixed=128,
                           **dict(_GAU_COMMON, template=("NUM_GROUPS", "N", "K", "NUM_STAGES", "CTA_GROUP"))),
    # v6: BLOCK_M 256 as one MMA with N = 256 (A's box: BLOCK_M / CTA_GROUP rows)
    "gau-nernst v6": Twin(version="v6", launch_table=_GAU_TABLE, board_us=(27.9, 19.7, 8.5, 6.43),
                          a_box_rows="BLOCK_M / CTA_GROUP", **_GAU_COMMON),
    # v6b: BLOCK_M 256 as two MMAs with N = 128 (A's box: 128 / CTA_GROUP rows, two loads per stage)
    "gau-nernst v6b": Twin(version="v6b", launch_table=_GAU_TABLE, board_us=(27.9, 19.4, 8.48, 6.43), **_GAU_COMMON),
}


def identify(cuda: str) -> tuple:
    """(name, twin) of the twin whose facts the CUDA source bears out; PeerRefused naming each twin's first
    mismatch otherwise."""
    reasons = []
    for name, twin in TWINS.items():
        wrong = twin.check(cuda)
        if not wrong:
            return name, twin
        reasons.append(f"{name}: {wrong[0]}")
    raise PeerRefused("no twin of this source's host code (" + "; ".join(reasons) + ")")


# --------------------------------------------------------------------------------------------------
# Host designs: what the C++ does per call, through the stub driver
# --------------------------------------------------------------------------------------------------


class _Driver:
    """The stub libcuda's entry points a CUDA C++ host calls, with their C signatures."""

    def __init__(self):
        from emulator import driver

        lib = driver.library()
        u64, c_void_p, c_int, c_uint = ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint
        lib.cuTensorMapEncodeTiled.argtypes = [c_void_p, c_int, c_uint, c_void_p, ctypes.POINTER(u64),
                                               ctypes.POINTER(u64), ctypes.POINTER(c_uint), ctypes.POINTER(c_uint),
                                               c_int, c_int, c_int, c_int]
        lib.cuModuleLoadData.argtypes = [ctypes.POINTER(c_void_p), c_void_p]
        lib.cuModuleGetFunction.argtypes = [ctypes.POINTER(c_void_p), c_void_p, ctypes.c_char_p]
        lib.cuFuncSetAttribute.argtypes = [c_void_p, c_int, c_int]
        lib.cuLaunchKernel.argtypes = [c_void_p] + [c_uint] * 7 + [c_void_p, ctypes.POINTER(c_void_p), c_void_p]
        self.lib = lib

    def check(self, result: int, what: str) -> None:
        if result:
            raise PeerRefused(f"{what} returned CUresult {result}")

    def encode_tiled(self, data_type, rank, address, dims, strides, box, estrides, interleave, swizzle, l2, oob):
        """cuTensorMapEncodeTiled into a fresh 128-byte map (returned as bytes); the host code ignores the
        result (gau-nernst's check_cu is commented out), so a refusal leaves the map as it was: zeros here."""
        out = (ctypes.c_uint8 * 128)()
        u64s = lambda xs: (ctypes.c_uint64 * max(len(xs), 1))(*xs)  # noqa: E731
        u32s = lambda xs: (ctypes.c_uint * max(len(xs), 1))(*xs)  # noqa: E731
        self.lib.cuTensorMapEncodeTiled(out, data_type, rank, address, u64s(dims), u64s(strides), u32s(box),
                                        u32s(estrides), interleave, swizzle, l2, oob)
        return bytes(out)

    def load(self, cubin: bytes, entry: str):
        module, function = ctypes.c_void_p(), ctypes.c_void_p()
        self._image = ctypes.create_string_buffer(cubin, len(cubin))  # the stub copies it
        self.check(self.lib.cuModuleLoadData(ctypes.byref(module), self._image), "cuModuleLoadData")
        self.check(self.lib.cuModuleGetFunction(ctypes.byref(function), module, entry.encode()), "cuModuleGetFunction")
        return function

    def launch(self, function, grid, block, shared: int, params: list) -> None:
        """cuLaunchKernel with the kernel's parameters given as byte strings, in order (a `<<<grid, block,
        shared>>>` launch: no cluster attribute, so a kernel compiled with __cluster_dims__ gets its own)."""
        buffers = [ctypes.create_string_buffer(p, len(p)) for p in params]
        pointers = (ctypes.c_void_p * len(buffers))(*[ctypes.cast(b, ctypes.c_void_p) for b in buffers])
        self.check(self.lib.cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared),
                   "cuFuncSetAttribute")
        self.check(self.lib.cuLaunchKernel(function, *grid, *block, shared, None, pointers, None), "cuLaunchKernel")


CU_TENSOR_MAP_DATA_TYPE_INT64, CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B = 5, 13
CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_SWIZZLE_128B = 0, 3


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class HostV5e:
    """gau-nernst's host design from v5e on (group_gemm_launch): a static struct built on the first call of a
    row (create_args_template: per group, A and B maps of 4-bit elements in three dims (128 bytes of K, rows,
    K / 256 blocks of 128 bytes) with a 128-byte swizzle, and 1-D maps of 8-byte elements over each scale
    buffer, every map encoded with a null address and M = 1); per call the groups sorted by descending M
    (std::sort: ties in an unspecified order; here in index order), and for each the maps' address word
    written, A's dim-1 size word (int 9) set to M - 1 and SFA's dim-0 size word (int 8) to its scale bytes - 1,
    the C pointer, M and the running sum of M tiles stored; grid (N / BLOCK_N, min(148 / grid_n, M tiles)),
    BLOCK threads, every stage that fits 227 KiB; cudaFuncSetAttribute then `<<<grid, block, smem>>>(args, K)`.

    Nothing in a repeated call blocks the host or synchronizes: custom_kernel allocates each group's output with
    torch.empty (the caching allocator, which reuses its blocks once warm), the C++ reads sizes and data_ptr()s,
    patches the static struct (8 groups: 4352 bytes, past the classic 4 KiB of kernel parameters, which CUDA 12.1
    and later allow), calls cudaFuncSetAttribute (every call) and launches; its torch.cuda.synchronize() is
    commented out. Groups of different N or K go to torch._scaled_mm instead (not modelled: refused)."""

    def __init__(self, twin: Twin):
        self.twin = twin
        self.templates = {}  # row -> the struct bytes after create_args_template (the C++'s `static args`)

    def template(self, driver: _Driver, row) -> bytearray:
        if row not in self.templates:
            groups, block_m, n, k, cta_group = row
            t = self.twin
            layout, size = t.layout(groups)
            args = bytearray(size)

            def ab_map(height, box_rows):
                return driver.encode_tiled(CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B, 3, 0, (256, height, k // 256),
                                           (k // 2, 128), (256, box_rows, t.block_k // 256), (1, 1, 1), 0,
                                           CU_TENSOR_MAP_SWIZZLE_128B, 0, 0)

            def sf_map(mn, box_bytes):
                total = _cdiv(mn, 128) * 128 * k // 16
                return driver.encode_tiled(CU_TENSOR_MAP_DATA_TYPE_INT64, 1, 0, (total // 8,), (), (box_bytes // 8,),
                                           (1,), 0, CU_TENSOR_MAP_SWIZZLE_NONE, 0, 0)

            maps = {"A_tmap_list": ab_map(1, t.a_rows(row)), "B_tmap_list": ab_map(n, t.block_n),
                    "SFA_tmap_list": sf_map(1, block_m * t.block_k // 16 // cta_group),
                    "SFB_tmap_list": sf_map(n, t.block_n * t.block_k // 16)}
            for name, encoded in maps.items():
                offset = layout[name][0]
                for i in range(groups):
                    args[offset + 128 * i:offset + 128 * (i + 1)] = encoded
            # grid_m_cu[0] = 0; the rest of the struct is what the C++ leaves: zero here
            self.templates[row] = args
        return self.templates[row]

    def call(self, driver: _Driver, function, row, groups: list) -> dict:
        """One call: `groups` is [(a, b, sfa, sfb, c, M)] in the caller's order (tensors with data_ptr()).
        Returns what it launched (grid, block, shared bytes, the struct bytes)."""
        t = self.twin
        g, block_m, n, k, cta_group = row
        args = self.template(driver, row)  # static: patched in place call after call, as the C++'s
        layout, _ = t.layout(g)
        order = sorted(range(g), key=lambda i: -groups[i][5])
        cu = [0]
        for i, idx in enumerate(order):
            a, b, sfa, sfb, c, m = groups[idx]

            def put(name, index, fmt, value):
                """Member `name`'s element i (a 128-byte map, or a scalar), its `index`-th word of type `fmt`."""
                width = np.dtype(fmt).itemsize
                offset = layout[name][0] + (128 * i if name.endswith("tmap_list") else width * i) + width * index
                np.frombuffer(args, dtype=fmt, count=1, offset=offset)[...] = value

            (a_rows_word,), (sfa_size_word,) = t.patches["A_tmap_list"], t.patches["SFA_tmap_list"]
            put("A_tmap_list", 0, np.uint64, a.data_ptr())
            put("A_tmap_list", a_rows_word, np.int32, m - 1)  # dim 1's size - 1 (word 4's high half)
            put("B_tmap_list", 0, np.uint64, b.data_ptr())
            put("SFA_tmap_list", 0, np.uint64, sfa.data_ptr())
            put("SFA_tmap_list", sfa_size_word, np.int32, _cdiv(m, 128) * 128 * k // 16 - 1)  # dim 0's (word 4)
            put("SFB_tmap_list", 0, np.uint64, sfb.data_ptr())
            put("C_ptr_list", 0, np.uint64, c.data_ptr())
            put("M_list", 0, np.int32, m)
            cu.append(cu[-1] + _cdiv(m, block_m))
        start = layout["grid_m_cu"][0]
        args[start:start + 4 * (g + 1)] = np.array(cu, np.int32).tobytes()
        grid = t.grid(row, cu[-1])
        block = (t.warps * WARP, 1, 1)
        shared = t.shared_bytes(row)
        driver.launch(function, grid, block, shared, [bytes(args), np.int32(k).tobytes()])
        return {"grid": grid, "block": block, "shared": shared, "args": bytes(args), "order": order}


HOSTS = {"v5e": HostV5e}


# --------------------------------------------------------------------------------------------------
# The case: compiled kernel + twin + the board's inputs
# --------------------------------------------------------------------------------------------------


class PeerLaunch:
    """The peer's entry as the emulator's `compiled`: calling it with a case does what the peer's custom_kernel
    does for that case's inputs (the twin's host code, one launch through the stub driver); `__ptx__` is nvcc's
    PTX of the whole translation unit, as a DSL compiled function carries its own."""

    def __init__(self, twin: Twin, ptx: str, cubin: bytes, entry: str, row: tuple):
        self.twin, self.__ptx__, self.cubin, self.entry, self.row = twin, ptx, cubin, entry, row
        self.host = HOSTS[twin.host](twin)
        self.driver = _Driver()
        self.function = self.driver.load(cubin, entry)
        self.last = None

    def __call__(self, case) -> None:
        self.last = self.host.call(self.driver, self.function, self.row, case.host_groups())


def compile_source(src: InlineSource, extra: str = "") -> tuple:
    """(PTX, cubin) of the peer's CUDA source (plus `extra` lines) for sm_100a."""
    from torch.utils.cpp_extension import include_paths

    text = cuda_text(src, extra)
    ptx = cuda_toolkit.compile_ptx(text, ARCH, nvcc_flags(src), include_paths())
    return ptx, cuda_toolkit.assemble(ptx, ARCH)


def instantiation(twin: Twin, args: tuple) -> str:
    """One line that makes the translation unit instantiate `kernel<args>` (taking its address at namespace
    scope, so no signature is restated)."""
    return (f"static void *nvfp4_emulator_instance_{'_'.join(str(a) for a in args)} = "
            f"(void *)&{twin.kernel}<{', '.join(str(a) for a in args)}>;")


POISON = float("nan")


class PeerCudaCase:
    """A peer's CUDA entry on the board's inputs for one spec (tools/emulate.py's run_example_calls protocol:
    `compiled`, `args`, `register`, `with_inputs`, `compare`, `warp_roles`, `seed`).

    The spec's groups must share N and K (the peers' host code sends other shapes to torch._scaled_mm, which is
    no kernel). C: the peer's custom_kernel allocates each call's outputs (M-major, M padded to 16); the case
    allocates them with its inputs instead (poisoned with NaN), so that they can be registered before the
    call, and the twin's call hands them to the kernel as the C++ would."""

    def __init__(self, source_text: str, spec: str, *, row: tuple | None = None, seed_shift: int = 0,
                 twin: Twin | None = None):
        src = inline_source(source_text)
        if src is None:
            raise PeerRefused("not a load_inline CUDA source (no load_inline call whose cuda_sources hold a __global__)")
        # `twin`: this one instead of the one the source bears out (a test's planted defect)
        self.name, self.twin = identify(src.cuda) if twin is None else (f"{twin.author} {twin.version} (given)", twin)
        self.spec = spec
        values = _spec_values(spec)
        ns, ks = set(values["n"]), set(values["k"])
        if len(ns) != 1 or len(ks) != 1:
            raise PeerRefused(f"{self.name}: groups of different N or K ({values['n']}, {values['k']}) go to "
                              "torch._scaled_mm in its custom_kernel, not to its kernel")
        g, n, k = values["g"], ns.pop(), ks.pop()
        self.row = self.twin.row(g, n, k, row)
        args = self.twin.template_args(self.row)
        extra = "" if self.twin.in_table(self.row) else instantiation(self.twin, args)
        ptx, cubin = compile_source(src, extra)
        wrong = check_compiled(self.twin, ptx) if twin is None else []
        if wrong:
            raise PeerRefused(f"{self.name}: {wrong[0]}")
        entry = entries(ptx, self.twin.kernel).get(args)
        if entry is None:
            raise PeerRefused(f"{self.name}: nvcc made no instance {self.twin.kernel}<{args}>")
        self.compiled = PeerLaunch(self.twin, ptx, cubin, entry, self.row)
        self.warp_roles = dict(self.twin.roles)
        self.values = values
        self._inputs(values["seed"] + seed_shift)

    @property
    def note(self) -> str:
        """One line: the twin, the row and whether the source's LAUNCH table has it."""
        g, bm, n, k, cg = self.row
        where = "a row of its LAUNCH table" if self.twin.in_table(self.row) else \
            "an instance added: its LAUNCH table has no row for this shape"
        return (f"{self.name}: G={g} BLOCK_M={bm} N={n} K={k} CTA_GROUP={cg}, {self.twin.stages(self.row)} stages, "
                f"{self.twin.shared_bytes(self.row)} B of shared memory ({where})")

    @property
    def args(self) -> tuple:
        return (self,)

    def _inputs(self, seed: int) -> None:
        from reference import generate_input

        self.seed = seed
        values = dict(self.values, seed=seed)
        self.data = generate_input(**values)
        self.outputs = []
        self.buffers = []
        for (m, n, _, _) in self.data[3]:
            padded = _cdiv(m, 16) * 16
            buffer = torch.full((padded * n,), POISON, dtype=torch.float16)
            self.buffers.append(buffer)
            self.outputs.append(buffer.as_strided((m, n, 1), (1, padded, 0)))

    def with_inputs(self, seed: int) -> "PeerCudaCase":
        """The same compiled kernel on the board's inputs drawn with `seed` (another call of a stream)."""
        other = copy.copy(self)
        other._inputs(seed)
        return other

    def host_groups(self) -> list:
        """[(a, b, sfa_reordered, sfb_reordered, c, M)] per group, as custom_kernel unpacks the board's tuple."""
        abc, _, sf, sizes = self.data
        return [(a, b, sfa, sfb, c, m) for (a, b, _), (sfa, sfb), c, (m, _, _, _) in zip(abc, sf, self.outputs, sizes)]

    def register(self, emu) -> None:
        abc, _, sf, _ = self.data
        for i, ((a, b, _), (sfa, sfb)) in enumerate(zip(abc, sf)):
            emu.register(a, name=f"A[{i}]")
            emu.register(b, name=f"B[{i}]")
            emu.register(sfa, name=f"SFA[{i}]")
            emu.register(sfb, name=f"SFB[{i}]")
        for i, buffer in enumerate(self.buffers):
            emu.register(buffer, name=f"C[{i}]")

    def compare(self, atol: float = 1e-3, rtol: float = 1e-3) -> tuple:
        """(verdict, (worst error / tolerance, worst absolute error), message) against the exact reference
        (reference.ref_kernel on copies of c), every cell of every group's M x N."""
        from reference import ref_kernel

        abc, sfs, sfr, sizes = self.data
        reference = ref_kernel(([(a, b, torch.empty_like(c)) for a, b, c in abc], sfs, sfr, sizes))
        worst = worst_ratio = 0.0
        for g, (out, ref) in enumerate(zip(self.outputs, reference)):
            out, ref = out.to(torch.float64), ref.to(torch.float64)
            err = (out - ref).abs()
            tolerance = atol + rtol * ref.abs()
            worst = max(worst, float(torch.nan_to_num(err, nan=float("inf")).max()))
            worst_ratio = max(worst_ratio, float(torch.nan_to_num(err / tolerance, nan=float("inf")).max()))
            bad = ~(err <= tolerance)
            if bad.any():
                idx = tuple(int(i) for i in bad.nonzero()[0])
                return "FAIL", (worst_ratio, worst), (f"group {g}: {int(bad.sum())} of {bad.numel()} outputs wrong, "
                                                      f"first at {idx}: {float(out[idx])} vs {float(ref[idx])}")
        return "PASS", (worst_ratio, worst), ""


def make_case(path, source_text: str, spec: str, *, repairs: tuple = (), **options) -> PeerCudaCase:
    """The route's case (groundtruth/peers.py): `row` (BLOCK_M, CTA_GROUP) for a shape outside the LAUNCH
    table, `seed_shift` added to the spec's seed. No repair is known for a CUDA entry."""
    if repairs:
        raise ValueError(f"no repair is known for a CUDA entry (asked: {', '.join(repairs)})")
    return PeerCudaCase(source_text, spec, **options)


def _spec_values(spec: str) -> dict:
    import eval as harness

    values = harness.parse_spec_line(spec)
    harness.check_spec_values(values, spec)
    return values
