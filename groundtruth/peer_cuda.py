"""A peer's CUDA C++ entry (torch's `load_inline`), run in the emulator: nvcc's PTX, a Python twin of its host code.

The best public entries of the board are CUDA C++ compiled at import by `torch.utils.cpp_extension.load_inline`:
a `CUDA_SRC` string holding the kernel and its host code (tensor maps encoded once with cuTensorMapEncodeTiled,
then patched per call, or encoded at every call: address and M written into a `__grid_constant__` struct; a
`LAUNCH(G, BM, N, K, CTA_GROUP)` table picking a template instance per shape). Running that host code needs a CUDA torch, so this
route splits the entry in two:

- **The device code** is the peer's own source, compiled by nvcc from PyPI (groundtruth/cuda_toolkit.py) to
  sm_100a PTX exactly as `load_inline` would compile it (torch's include paths and COMMON_NVCC_FLAGS, the
  `extra_cuda_cflags` it names, `-arch=sm_100a` for its `-gencode`), and assembled by ptxas into the cubin
  the stub driver reads (parameter layout, registers). A shape outside the source's LAUNCH table gets an
  explicit instance of the same kernel template (one line appended: the kernel's address taken at namespace
  scope), with the template arguments the host code would compute for such a row.
- **The host code** is a twin: a version's launch as data (`Twin`: the file's constants, the struct's members,
  the kernel template, its cluster shape and warp roles, the LAUNCH macro and table, the map encodes and their
  helpers, what the per-group loop stores and patches, the stage and grid arithmetic, the launch's arguments,
  what custom_kernel hands the kernel as C), with its C++ expressions kept as the source writes them and
  evaluated as the C++ would (`cxx_eval`). One `Host` runs any twin per call through the stub driver's C API
  (ctypes): cuTensorMapEncodeTiled (the stub writes the hardware's format, emulator/tma.py) once for a static
  struct template or at every call with the groups' addresses, the per-call patches of address and size words,
  the struct packed as the C++ compiler lays it out (natural alignment, CUtensorMap 128-byte aligned as CUDA
  13's cuda.h declares it), cuFuncSetAttribute and cuLaunchKernel. The launch is then queued like the DSL's,
  and the emulator's execute / execute_stream run it (timed, streams of calls). gau-nernst's host designs:
  v1 encodes every map per call into a struct with each group's M, N and K and launches a 3-D grid; v2 and
  v2d encode per call and launch a persistent 1-D grid; v2e, v5 and v5c build a static template once and
  patch it, groups sorted by descending M; v5e to v6b the same with a 2-D grid.

The twin is checked against the source it mirrors (`Twin.check`: `host_facts` reads every fact the twin states
from the source by regular expressions, a statement of the per-group loop it cannot read included, and each
difference is one line) and against what nvcc made of it (`check_compiled`: every LAUNCH row's instance exists
with the stage count the twin computes; the struct's size is the PTX parameter's). A source no twin matches is
refused, naming each twin's first mismatch.

The peers' sources carry no license: none is in this repository. `SOURCES` says where each comes from (a git
clone at a named commit); the tools take the file's path.

    case = PeerCudaCase(Path("submission_v6b.py").read_text(), "m: [40, 96]; n: [256, 256]; k: [512, 512]; g: 2; seed: 1")
    case.register(emu); emu.call(case.compiled, *case.args); case.compare()
"""

from __future__ import annotations

import ast
import copy
import ctypes
import dataclasses
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
# The host code's facts, read from the source: what a twin states and Twin.check compares
# --------------------------------------------------------------------------------------------------


def squeeze(expr) -> str:
    """A C++ expression with its white space removed: the form a twin's expressions and the source's are
    compared in."""
    return re.sub(r"\s+", "", str(expr))


def _strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", text)


def _split_top(text: str) -> list:
    """`text` split at the commas outside (), [], {} and template <>, each part stripped."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{" or (ch == "<" and re.match(r"\w", text[i - 1:i] or " ")):
            depth += 1
        elif ch in ")]}" or (ch == ">" and depth and text[i - 1:i] != "-"):
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    return parts + [tail] if tail or parts else parts


def _function(cuda: str, name: str):
    """(parameter text, body) of the first definition of function `name` (the body up to the first closing
    brace in column 0), or None."""
    m = re.search(r"\b" + name + r"\s*\(([^)]*)\)\s*\{", cuda)
    if m is None:
        return None
    end = cuda.find("\n}", m.end())
    return m.group(1), cuda[m.end():end if end >= 0 else len(cuda)]


def _blocks(body: str, head: str) -> tuple:
    """([the bodies of the brace blocks opened by `head`], `body` without those blocks)."""
    out, rest, pos = [], [], 0
    for m in re.finditer(head + r"\s*\{", body):
        if m.start() < pos:
            continue
        depth, i = 1, m.end()
        while depth and i < len(body):
            depth += {"{": 1, "}": -1}.get(body[i], 0)
            i += 1
        out.append(body[m.end():i - 1])
        rest.append(body[pos:m.start()])
        pos = i
    rest.append(body[pos:])
    return out, "".join(rest)


_DECLARATION = re.compile(r"^\s*(?:static\s+)?(?:const\s+|constexpr\s+)?(?:int|dim3|u?int\d+_t)\s+(\w+)\s*"
                          r"(?:=\s*([^;]+)|\(([^;]*)\));", re.M)


def _helper_facts(cuda: str, name: str):
    """A map-encoding helper of the host (init_AB_tmap, init_SF_tmap) as MapHelper, or None."""
    found = _function(cuda, name)
    if found is None:
        return None
    params, body = found
    head = body[:body.find("cuTensorMapEncodeTiled")]
    statements = tuple((m.group(1), squeeze(m.group(2))) for m in
                       re.finditer(r"^\s*(?:(?:const|constexpr)\s+)?(?:u?int\w*\s+)?(\w+)\s*=\s*([^;{]+);", head, re.M))
    arrays = {m.group(1): tuple(squeeze(x) for x in _split_top(m.group(2)))
              for m in re.finditer(r"(\w+)\[[^\]]*\]\s*=\s*\{([^}]*)\};", head)}
    enum = lambda kind: (re.search(r"CU_TENSOR_MAP_" + kind + r"_(\w+)", body) or [None, None])[1]  # noqa: E731
    return MapHelper(params=tuple(p.split()[-1].lstrip("*") for p in _split_top(params))[2:], statements=statements,
                     dims=arrays.get("globalDim"), strides=arrays.get("globalStrides"), box=arrays.get("boxDim"),
                     element_strides=arrays.get("elementStrides"), data_type=enum("DATA_TYPE"),
                     swizzle=enum("SWIZZLE"), interleave=enum("INTERLEAVE"), l2=enum("L2_PROMOTION"),
                     oob=enum("FLOAT_OOB_FILL"))


def host_facts(cuda: str, python: str = "", kernel: str = "kernel_cutlass", struct: str = "Arguments") -> dict:
    """Every fact a twin states, read from a source: the file's constants, the struct, the kernel's template,
    cluster shape and warp roles, the LAUNCH macro and table, group_gemm_launch's per-group loop (maps encoded,
    words patched, members stored), its arithmetic (stages, grid) and launch, and, from the Python around the
    CUDA (when given), what custom_kernel hands the kernel as C and where it sends groups of mixed N or K."""
    raw, cuda = cuda, _strip_comments(cuda)
    facts = {"constants": {m.group(1): int(m.group(2)) for m in
                           re.finditer(r"^constexpr\s+int\s+(\w+)\s*=\s*(\d+)\s*;", cuda, re.M)},
             "enums": {m.group(1): tuple(x.strip() for x in m.group(2).split(",") if x.strip())
                       for m in re.finditer(r"enum\s+class\s+(\w+)\s*\{([^}]*)\}", cuda)}}
    st = re.search(r"struct\s+" + struct + r"\s*\{(.*?)\};", cuda, re.S)
    members = [] if st is None else re.findall(r"^\s*([\w ]+?\s*\*?)\s*(\w+)\s*\[([^\]]+)\]\s*;", st.group(1), re.M)
    facts["fields"] = tuple((name, " ".join(ctype.split()).replace(" *", " *"), squeeze(count))
                            for ctype, name, count in members)
    sig = re.search(r"template\s*<([^>]*)>\s*__global__(.*?)\b" + kernel + r"\s*\(", cuda, re.S)
    facts["template"] = () if sig is None else tuple(p.split()[-1] for p in _split_top(sig.group(1)))
    cluster = None if sig is None else re.search(r"__cluster_dims__\s*\(([^)]*)\)", sig.group(2))
    facts["cluster_dims"] = None if cluster is None else squeeze(cluster.group(1))
    kbody = (_function(raw, kernel) or ("", ""))[1]  # the roles are named in comments
    roles = {squeeze(m.group(1)): m.group(2)
             for m in re.finditer(r"warp_id\s*==\s*([\w\s+\-*]+?)\)\s*\{\s*//\s*(\w+) warp", kbody)}
    if re.search(r"else\s*\{\s*//\s*epilogue warps", kbody):
        roles["else"] = "epilogue"
    facts["roles"] = roles
    macro = re.search(r"#define\s+LAUNCH\(([^)]*)\)\s*\\\s*else if\s*\((.*?)\)\s*\{\s*\\\s*group_gemm_launch\s*<([^>]*)>",
                      cuda, re.S)
    launch = re.search(r"template\s*<([^>]*)>\s*void\s+group_gemm_launch\s*\(", cuda)
    facts["launch_params"] = () if launch is None else tuple(p.split()[-1] for p in _split_top(launch.group(1)))
    dispatch = {}
    if macro is not None:
        passed = [squeeze(x) for x in _split_top(macro.group(3))]
        for runtime, param in re.findall(r"(\w+)\s*==\s*(\w+)", macro.group(2)):
            j = passed.index(param) if param in passed else -1
            dispatch[runtime] = facts["launch_params"][j] if 0 <= j < len(facts["launch_params"]) else param
        if [x.strip() for x in macro.group(1).split(",")] != passed:
            dispatch["(LAUNCH passes its parameters in another order)"] = ",".join(passed)
    facts["dispatch"] = dispatch
    facts["launch_table"] = tuple(
        tuple(int(x) if re.fullmatch(r"-?\d+", x) else x for x in (squeeze(y) for y in m.group(1).split(",")))
        for m in re.finditer(r"^\s*LAUNCH\(([^)]*)\)\s*$", cuda, re.M))
    body = (_function(cuda, "group_gemm_launch") or ("", ""))[1]
    loops, top = _blocks(body, r"for\s*\(\s*int\s+i\s*=\s*0\s*;\s*i\s*<\s*NUM_GROUPS\s*;\s*i\+\+\s*\)")
    loop = next((b for b in loops if "args." in b), "")
    facts["sort"] = bool(re.search(r"argsort_desc\s*<\s*NUM_GROUPS\s*>\s*\(\s*values\s*,\s*indices\s*\)", top)
                         and any(re.search(r"values\[i\]\s*=\s*A_list\[i\]\.size\(0\)", b) for b in loops))
    facts["static_args"] = bool(re.search(r"static\s+" + struct + r"\s*<\s*NUM_GROUPS\s*>\s*args\s*=", top))
    group_values, reductions, unread = [], [], []
    pointers, scalars, addresses, patches, cumulative = {}, {}, {}, {}, None
    for s in (x.strip() + ";" for x in loop.split(";") if x.strip()):
        if m := re.fullmatch(r"const\s+int\s+(\w+)\s*=\s*(.+);", s, re.S):
            group_values.append((m.group(1), squeeze(m.group(2))))
        elif m := re.fullmatch(r"reinterpret_cast<void\s*\*\*>\(args\.(\w+)\s*\+\s*i\)\[0\]\s*=\s*(.+);", s, re.S):
            addresses[m.group(1)] = squeeze(m.group(2))
        elif m := re.fullmatch(r"reinterpret_cast<int\s*\*>\(args\.(\w+)\s*\+\s*i\)\[(\d+)\]\s*=\s*(.+);", s, re.S):
            patches.setdefault(m.group(1), {})[int(m.group(2))] = squeeze(m.group(3))
        elif m := re.fullmatch(r"args\.(\w+)\[i\]\s*=\s*reinterpret_cast<[\w\s*]+>\((.+)\);", s, re.S):
            pointers[m.group(1)] = squeeze(m.group(2))
        elif m := re.fullmatch(r"args\.(\w+)\[i\s*\+\s*1\]\s*=\s*args\.(\w+)\[i\]\s*\+\s*(.+);", s, re.S):
            cumulative = (m.group(1), squeeze(m.group(3))) if m.group(1) == m.group(2) else ("?", squeeze(s))
        elif m := re.fullmatch(r"args\.(\w+)\[i\]\s*=\s*(.+);", s, re.S):
            scalars[m.group(1)] = squeeze(m.group(2))
        elif m := re.fullmatch(r"(\w+)\s*=\s*(.+);", s, re.S):
            reductions.append((m.group(1), squeeze(m.group(2))))
        elif not s.startswith("init_"):
            unread.append(squeeze(s))
    facts.update(group_values=tuple(group_values), reductions=tuple(reductions), pointers=pointers, scalars=scalars,
                 addresses=addresses, patches=patches, cumulative=cumulative, unread=tuple(unread))
    maps = []
    for m in re.finditer(r"^\s*(init_\w+_tmap)\(\s*args\.(\w+)\s*\+\s*i\s*,(.*)\);\s*$", cuda, re.M):
        pointer, *arguments = _split_top(m.group(3))
        maps.append(MapInit(m.group(2), m.group(1), squeeze(pointer), tuple(squeeze(x) for x in arguments)))
    facts["maps"] = tuple(maps)
    facts["helpers"] = {name: _helper_facts(cuda, name) for name in sorted({m.helper for m in facts["maps"]})}
    arithmetic, grid = [], None
    for m in _DECLARATION.finditer(top):
        if m.group(1) == "grid":
            grid = tuple(squeeze(x) for x in (_split_top(m.group(3)) if m.group(3) is not None else [m.group(2)]))
        elif m.group(2) is not None:
            arithmetic.append((m.group(1), squeeze(m.group(2))))
    facts["arithmetic"], facts["grid"] = tuple(arithmetic), grid
    inst = re.search(r"auto\s+this_kernel\s*=\s*" + kernel + r"\s*<([^;]*)>\s*;", top)
    facts["instance"] = () if inst is None else tuple(squeeze(x) for x in _split_top(inst.group(1)))
    call = re.search(r"this_kernel\s*<<<\s*([^>]*)>>>\s*\(([^)]*)\)\s*;", top)
    facts["launch"] = () if call is None else tuple(squeeze(x) for x in _split_top(call.group(1)))
    facts["kernel_args"] = () if call is None else tuple(squeeze(x) for x in _split_top(call.group(2)))
    tb = re.search(r"constexpr\s+int\s+TB_SIZE\s*=\s*([^;]+);", cuda)
    facts["block"] = tb and squeeze(tb.group(1))
    if python:
        facts["output"] = "m_major16" if re.search(r"as_strided\(\(M,\s*N,\s*1\),\s*\(1,\s*new_M,\s*0\)\)", python) \
            else "board"
        facts["mixed_nk"] = "scaled_mm" if re.search(r"if\s+N\s*!=\s*N0\s+or\s+K\s*!=\s*K0\s*:\s*\n\s*ref\(", python) \
            else "kernel"
    return facts


# --------------------------------------------------------------------------------------------------
# C++ integer expressions, evaluated as the host's C++ would (every value here is a non-negative int)
# --------------------------------------------------------------------------------------------------


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _python(expr: str) -> str:
    e = squeeze(expr).replace("std::min", "min").replace("std::max", "max").replace("nullptr", "0")
    e = re.sub(r"\bargs\.(\w+)", r"args_\1", e)
    e = re.sub(r"\b(\w+)_list\[(\w+)\]\.size\((\d)\)", r"size_('\1',\2,\3)", e)
    e = re.sub(r"\b(\w+)_list\[(\w+)\]\.data_ptr\(\)", r"ptr_('\1',\2)", e)
    e = re.sub(r"\(\s*(?:char|half|void)\s*\*\s*\)", "", e)
    return re.sub(r"(?<!/)/(?!/)", "//", e)


def cxx_eval(expr: str, env: dict) -> int:
    """A C++ integer expression of the host (a twin's) in `env`: / truncates, cdiv rounds up, std::min/max,
    `args.member[...]` reads the struct's scalar members, `X_list[i].size(d)` / `.data_ptr()` the group's
    tensors (env's size_ and ptr_)."""
    return eval(_python(expr), {"__builtins__": {}, "min": min, "max": max, "cdiv": _cdiv}, env)  # noqa: S307


# --------------------------------------------------------------------------------------------------
# The twin: a version's launch as data
# --------------------------------------------------------------------------------------------------


CTYPES = {"CUtensorMap": (128, 128), "half *": (8, 8), "char *": (8, 8), "int": (4, 4)}  # size, alignment (x86-64)
# the driver API's enumerators (cuda.h) the hosts name, by their suffix
DATA_TYPES = {"UINT8": 0, "UINT16": 1, "UINT32": 2, "INT32": 3, "UINT64": 4, "INT64": 5, "FLOAT16": 6, "FLOAT32": 7,
              "FLOAT64": 8, "BFLOAT16": 9, "FLOAT32_FTZ": 10, "TFLOAT32": 11, "TFLOAT32_FTZ": 12, "16U4_ALIGN8B": 13,
              "16U4_ALIGN16B": 14, "16U6_ALIGN16B": 15}
SWIZZLES = {"NONE": 0, "32B": 1, "64B": 2, "128B": 3}
INTERLEAVES, L2_PROMOTIONS, OOB_FILLS = {"NONE": 0, "16B": 1, "32B": 2}, {"NONE": 0, "L2_64B": 1, "L2_128B": 2,
                                                                          "L2_256B": 3}, {"NONE": 0,
                                                                                          "NAN_REQUEST_ZERO_FMA": 1}
CU_TENSOR_MAP_DATA_TYPE_INT64, CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B = DATA_TYPES["INT64"], DATA_TYPES["16U4_ALIGN8B"]
CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_SWIZZLE_128B = SWIZZLES["NONE"], SWIZZLES["128B"]


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
class MapHelper:
    """A host function that encodes one tensor map (`init_AB_tmap(tmap, ptr, ...)`): its parameters after
    (tmap, ptr), its statements before cuTensorMapEncodeTiled in order ((name, C++ expression): locals and
    parameters reassigned), the arrays it passes (globalDim, globalStrides, boxDim, elementStrides) and the
    enumerators it names (CU_TENSOR_MAP_DATA_TYPE_..., _SWIZZLE_..., by suffix)."""

    params: tuple
    statements: tuple
    dims: tuple
    strides: tuple
    box: tuple
    element_strides: tuple
    data_type: str
    swizzle: str
    interleave: str = "NONE"
    l2: str = "NONE"
    oob: str = "NONE"

    def encode(self, driver, address: int, args: tuple, constants: dict) -> bytes:
        env = dict(constants, **dict(zip(self.params, args)))
        for name, expr in self.statements:
            env[name] = cxx_eval(expr, env)
        values = lambda exprs: tuple(cxx_eval(e, env) for e in exprs)  # noqa: E731
        return driver.encode_tiled(DATA_TYPES[self.data_type], env["rank"], address, values(self.dims),
                                   values(self.strides), values(self.box), values(self.element_strides),
                                   INTERLEAVES[self.interleave], SWIZZLES[self.swizzle], L2_PROMOTIONS[self.l2],
                                   OOB_FILLS[self.oob])

    def squeezed(self):
        return dataclasses.replace(self, statements=tuple((n, squeeze(e)) for n, e in self.statements),
                                   **{k: tuple(squeeze(e) for e in getattr(self, k))
                                      for k in ("dims", "strides", "box", "element_strides")})


@dataclass(frozen=True)
class MapInit:
    """One `init_X_tmap(args.member + i, pointer, args...)` of the host: with a null pointer it encodes the
    map of the struct template once (create_args_template), with a group's data_ptr() at every call."""

    member: str
    helper: str
    pointer: str
    args: tuple

    def squeezed(self):
        return MapInit(self.member, self.helper, squeeze(self.pointer), tuple(squeeze(a) for a in self.args))


@dataclass(frozen=True)
class Twin:
    """One version's host code, as data: every fact of its launch that the emulated call depends on, stated in
    the vocabulary host_facts reads from a source, so that `check(source)` lists each one the source
    contradicts. The C++ expressions (sizes, the grid, words patched) are evaluated by cxx_eval.

    `constants`: file-scope constexpr ints (BLOCK_K, NUM_WARPS, BLOCK_M or BLOCK_N where not a template
    parameter); `fields`: the `__grid_constant__` struct's members (name, C type, count in NUM_GROUPS);
    `template`: the kernel template's parameters; `cluster_dims`: its `__cluster_dims__` (None: none);
    `roles`: {warp_id expression: role} as the kernel's branches name them ("else": the rest);
    `launch_params`: group_gemm_launch's template parameters (the LAUNCH macro's, in order); `dispatch`: {the
    call's G/N/K: the launch parameter the macro compares it with}; `launch_table`: the LAUNCH rows;
    `default_row`: the other launch parameters for a shape outside the table; `maps`, `helpers`: the map
    encodes and their helpers; `static_args`: the struct is a static template built once per row, patched per
    call (else built at every call); `sort`: groups sorted by descending M; `group_values`: the per-group
    loop's locals; `addresses`/`patches`: words written per call into a template's maps (address word 0;
    int words); `pointers`, `scalars`: members stored per group; `cumulative`: (member, increment) of the
    running sum; `reductions`: loop variables folded over the groups; `arithmetic`: group_gemm_launch's other
    declarations in order (stages, grid inputs); `grid`; `instance`: the kernel's template arguments;
    `launch`: <<<grid, block, shared>>>; `kernel_args`; `block`: TB_SIZE; `output`: what custom_kernel hands
    the kernel as C ("board": the board's M x N row-major c; "m_major16": its own M-major buffer, M padded
    to 16); `mixed_nk`: where groups of different N or K go ("scaled_mm": torch._scaled_mm, not the kernel)."""

    version: str
    author: str
    constants: dict
    fields: tuple
    template: tuple
    cluster_dims: str | None
    roles: dict
    launch_params: tuple
    dispatch: dict
    launch_table: tuple
    default_row: dict
    maps: tuple
    helpers: dict
    static_args: bool
    sort: bool
    group_values: tuple
    addresses: dict
    patches: dict
    pointers: dict
    scalars: dict
    cumulative: tuple | None
    reductions: tuple
    arithmetic: tuple
    grid: tuple
    instance: tuple
    kernel_args: tuple
    output: str
    mixed_nk: str
    enums: dict = field(default_factory=dict)
    launch: tuple = ("grid", "TB_SIZE", "smem_size")
    block: str = "NUM_WARPS * WARP_SIZE"
    kernel: str = "kernel_cutlass"
    struct: str = "Arguments"
    board_us: tuple = ()  # the author's B200 times, benchmarks 1-4 (README)

    # ---- the twin's facts, in host_facts' vocabulary ----

    def facts(self) -> dict:
        sq = lambda pairs: tuple((n, squeeze(e)) for n, e in pairs)  # noqa: E731
        return {"constants": dict(self.constants), "enums": dict(self.enums),
                "fields": tuple((n, t, squeeze(c)) for n, t, c in self.fields), "template": tuple(self.template),
                "cluster_dims": None if self.cluster_dims is None else squeeze(self.cluster_dims),
                "roles": {squeeze(k): v for k, v in self.roles.items()}, "launch_params": tuple(self.launch_params),
                "dispatch": dict(self.dispatch), "launch_table": tuple(tuple(r) for r in self.launch_table),
                "sort": self.sort, "static_args": self.static_args, "group_values": sq(self.group_values),
                "reductions": sq(self.reductions), "pointers": {k: squeeze(v) for k, v in self.pointers.items()},
                "scalars": {k: squeeze(v) for k, v in self.scalars.items()},
                "addresses": {k: squeeze(v) for k, v in self.addresses.items()},
                "patches": {k: {w: squeeze(e) for w, e in v.items()} for k, v in self.patches.items()},
                "cumulative": None if self.cumulative is None else (self.cumulative[0], squeeze(self.cumulative[1])),
                "unread": (), "maps": tuple(m.squeezed() for m in self.maps),
                "helpers": {k: v.squeezed() for k, v in self.helpers.items()}, "arithmetic": sq(self.arithmetic),
                "grid": tuple(squeeze(g) for g in self.grid), "instance": tuple(squeeze(x) for x in self.instance),
                "launch": tuple(squeeze(x) for x in self.launch), "kernel_args": tuple(self.kernel_args),
                "block": squeeze(self.block), "output": self.output, "mixed_nk": self.mixed_nk}

    def check(self, cuda: str, python: str = "") -> list:
        """What in the source contradicts this twin, one line per fact: [] when every fact the twin states is
        the source's. `python`: the whole file (custom_kernel's facts); without it those are not checked."""
        have, want = host_facts(cuda, python, self.kernel, self.struct), self.facts()
        wrong = []
        for key, value in want.items():
            if key not in have:
                continue
            if key == "constants":
                wrong += [f"constant {name} {have[key].get(name)} (twin: {v})" for name, v in value.items()
                          if have[key].get(name) != v]
            elif key == "arithmetic":
                got = dict(have[key])
                if [n for n, _ in have[key]] != [n for n, _ in value]:
                    wrong.append(f"host arithmetic declares {[n for n, _ in have[key]]} (twin: {[n for n, _ in value]})")
                wrong += [f"host arithmetic {name} = {got.get(name)} (twin: {expr})" for name, expr in value
                          if got.get(name) != expr]
            elif key == "patches":
                for member in sorted(set(value) | set(have[key])):
                    if have[key].get(member) != value.get(member):
                        wrong.append(f"{member}: int words patched per call {have[key].get(member)} "
                                     f"(twin: {value.get(member)})")
            elif key == "unread" and have[key]:
                wrong.append(f"host statements no twin reads: {list(have[key])}")
            elif have[key] != value:
                wrong.append(f"{_LABELS.get(key, key)} {have[key]} (twin: {value})")
        return wrong

    # ---- rows: the template instance a call's shape gets ----

    def row(self, groups: int, n: int, k: int, override: dict | None = None) -> dict:
        """{launch parameter: value} for a call of `groups` groups of N x K: the LAUNCH row the host's dispatch
        picks, else (`override` over `default_row`) for an instance of the same template the table lacks."""
        shape = {"G": groups, "N": n, "K": k}
        key = {param: shape[runtime] for runtime, param in self.dispatch.items()}
        if not override:
            for r in self.launch_table:
                row = dict(zip(self.launch_params, r))
                if all(row[p] == v for p, v in key.items()):
                    return row
        row = dict(key, **self.default_row)
        for name, value in (override or {}).items():
            if name in row and name not in key:
                row[name] = value
            elif self.constants.get(name, value) != value or (name not in row and name not in self.constants):
                raise PeerRefused(f"{self.author} {self.version}: {name} is "
                                  f"{self.constants.get(name, 'no launch parameter')} in this version "
                                  f"(its launch parameters: {', '.join(p for p in self.launch_params if p not in key)})")
        return {p: row[p] for p in self.launch_params}

    def in_table(self, row: dict) -> bool:
        return tuple(row[p] for p in self.launch_params) in {tuple(r) for r in self.launch_table}

    def env(self, row: dict) -> dict:
        """The names the host's arithmetic sees for a row before the per-group loop: the file's constants, the
        row, and every declaration of group_gemm_launch that does not wait for the loop (stages, grid_n)."""
        env = dict(self.constants, **row, WARP_SIZE=self.constants.get("WARP_SIZE", WARP))
        for name, expr in self.arithmetic:
            try:
                env[name] = cxx_eval(expr, env)
            except (NameError, TypeError, KeyError):
                pass  # reads the struct or a loop result: evaluated after the loop
        return env

    def stages(self, row: dict) -> int:
        return self.env(row)["NUM_STAGES"]

    def shared_bytes(self, row: dict) -> int:
        return self.env(row)[self.launch[2]]

    def template_args(self, row: dict) -> tuple:
        """The kernel's template arguments for a row, as the source writes them (enumerators by name)."""
        env = self.env(row)
        return tuple(env[a] if isinstance(env.get(a), (int, str)) else cxx_eval(a, env) for a in self.instance)

    def mangled(self, args: tuple) -> tuple:
        """Template arguments as the mangled name holds them (an enumerator by its value)."""
        return tuple(self.enums[a.split("::")[0]].index(a.split("::")[1]) if isinstance(a, str) else a for a in args)

    def layout(self, groups: int) -> tuple:
        """({field: (offset, size)}, struct size) as the C++ compiler lays the struct out for `groups`."""
        return struct_layout([(name, ctype, cxx_eval(count, {"NUM_GROUPS": groups}))
                              for name, ctype, count in self.fields])

    @property
    def warp_roles(self) -> dict:
        """{warp index: role} (the emulator's labels)."""
        warps = self.constants["NUM_WARPS"]
        named = {cxx_eval(k, dict(self.constants)): v for k, v in self.roles.items() if k != "else"}
        rest = self.roles.get("else")
        return {w: named.get(w, rest or f"warp {w}") for w in range(warps)}

    def describe(self, row: dict) -> str:
        return " ".join(f"{'G' if p == 'NUM_GROUPS' else p}={v}" for p, v in row.items())


_LABELS = {"fields": "struct members", "template": "kernel template parameters", "cluster_dims": "kernel's "
           "__cluster_dims__", "roles": "warp roles", "launch_params": "group_gemm_launch template parameters",
           "dispatch": "LAUNCH dispatch", "launch_table": "LAUNCH table", "enums": "enums", "sort": "groups sorted "
           "by M", "static_args": "static struct template", "group_values": "per-group values", "reductions":
           "values folded over the groups", "pointers": "pointer members", "scalars": "scalar members",
           "addresses": "map addresses patched per call", "cumulative": "running sum", "maps": "map encodes",
           "helpers": "map helpers", "grid": "grid", "instance": "kernel instance", "launch": "launch",
           "kernel_args": "kernel arguments", "block": "TB_SIZE", "output": "custom_kernel's C",
           "mixed_nk": "groups of mixed N or K go to"}


def check_compiled(twin: Twin, ptx: str) -> list:
    """What in nvcc's PTX contradicts the twin: every LAUNCH row's kernel instance with the twin's stage count,
    and the struct parameter's size."""
    wrong = []
    instances = entries(ptx, twin.kernel)
    for r in twin.launch_table:
        row = dict(zip(twin.launch_params, r))
        args = twin.mangled(twin.template_args(row))
        if args not in instances:
            wrong.append(f"no instance {twin.kernel}<{', '.join(map(str, args))}> in the PTX "
                         f"(instances: {sorted(instances)})")
            continue
        size = param_sizes(ptx, instances[args])[0]
        if size != twin.layout(row["NUM_GROUPS"])[1]:
            wrong.append(f"{twin.struct}<{row['NUM_GROUPS']}> is {size} B in the PTX, "
                         f"{twin.layout(row['NUM_GROUPS'])[1]} B in the twin")
    return wrong


def entries(ptx: str, kernel: str) -> dict:
    """{template arguments: mangled entry name} of the instances of `kernel` in a PTX module (Itanium mangling
    of integer template arguments, `Li8E`, negative `Lin8E`, and of enumerators, `L6Raster1E`: by value)."""
    out = {}
    for name in re.findall(r"\.entry\s+([\w$]+)\s*\(", ptx):
        m = re.match(rf"_Z{len(kernel)}{kernel}I((?:L(?:i|\d+[A-Za-z_]\w*?)n?\d+E)+)E", name)
        if m:
            args = tuple(int(v.replace("n", "-")) for v in re.findall(r"L(?:i|\d+[A-Za-z_]\w*?)(n?\d+)E", m.group(1)))
            out[args] = name
    return out


def param_sizes(ptx: str, entry: str) -> list:
    """The byte size of each parameter of an entry."""
    from emulator.ptx import parse_module

    return [p.size for p in parse_module(ptx)[entry].params]


# gau-nernst's versions (gpu-mode-kernels@aee9cda, nvidia/nvfp4_group_gemm/submission_*.py). Every fact below is
# compared with the file by Twin.check; what the versions share is stated once.
_AB_MAP = MapHelper(params=("global_height", "global_width", "shared_height", "shared_width"),
                    statements=(("rank", "3"),), dims=("256", "global_height", "global_width / 256"),
                    strides=("global_width / 2", "128"), box=("256", "shared_height", "shared_width / 256"),
                    element_strides=("1", "1", "1"), data_type="16U4_ALIGN8B", swizzle="128B")
# the scale maps: 1-D over 8-byte elements (the box may then exceed 256 bytes); the helper's signature changed
_SF_BYTES = MapHelper(params=("global_size", "shared_size"), statements=(("rank", "1"),), dims=("global_size / 8",),
                      strides=(), box=("shared_size / 8",), element_strides=("1",), data_type="INT64", swizzle="NONE")
_SF_MN = dataclasses.replace(_SF_BYTES, params=("MN", "K"), box=("SF_size / 8",), statements=(
    ("MN", "cdiv(MN, 128) * 128"), ("global_size", "MN * K / 16"), ("SF_size", "128 * BLOCK_K / 16"), ("rank", "1")))
_SF_MN_CTA = dataclasses.replace(_SF_MN, params=("MN", "K", "CTA_GROUP"), box=("SF_size / 8 / CTA_GROUP",))
_SF_MN_BOX = dataclasses.replace(_SF_MN, params=("MN", "K", "SF_size"), statements=(
    ("MN", "cdiv(MN, 128) * 128"), ("global_size", "MN * K / 16"), ("rank", "1")))


def _fields(*members) -> tuple:
    """Struct members from "type name" (an array of NUM_GROUPS; grid_cu and grid_m_cu: NUM_GROUPS + 1)."""
    out = []
    for member in members:
        ctype, name = member.rsplit(" ", 1)
        if name.startswith("*"):
            ctype, name = ctype + " *", name[1:]
        out.append((name, ctype, "NUM_GROUPS + 1" if name.startswith("grid_") else "NUM_GROUPS"))
    return tuple(out)


def _stage_arithmetic(ab: str, sf: str, static: str, before=(), after=()) -> tuple:
    """group_gemm_launch's declarations: the stage count from 227 KiB, each stage its A, B, SFA, SFB and two
    mbarriers, `static` the bytes outside the stages."""
    return tuple(before) + (("AB_size", ab), ("SF_size", sf), ("sm100_size", "227 * 1024"),
                            ("dynamic_size", "AB_size + SF_size + 2 * 8"), ("static_size", static),
                            ("NUM_STAGES", "(sm100_size - static_size) / dynamic_size"),
                            ("smem_size", "dynamic_size * NUM_STAGES + static_size")) + tuple(after)


_ROLES = {"NUM_WARPS - 1": "MMA", "NUM_WARPS - 2": "TMA", "else": "epilogue"}
_TMAPS_AB = _fields("CUtensorMap A_tmap_list", "CUtensorMap B_tmap_list")
_TMAPS_ABSF = _TMAPS_AB + _fields("CUtensorMap SFA_tmap_list", "CUtensorMap SFB_tmap_list")
_SF_POINTERS = _fields("char *SFA_ptr_list", "char *SFB_ptr_list")
_NK = {"G": "NUM_GROUPS", "N": "N", "K": "K"}
_BENCH = ((8, 4096, 7168), (8, 7168, 2048), (2, 3072, 4096), (2, 4096, 1536))  # task.yml's benchmarks 1-4
_SORTED = dict(sort=True, static_args=True, group_values=(("idx", "indices[i]"), ("M", "A_list[idx].size(0)")))
_TEMPLATE_MAPS = {"A_tmap_list": "A_list[idx].data_ptr()", "B_tmap_list": "B_list[idx].data_ptr()",
                  "SFA_tmap_list": "SFA_list[idx].data_ptr()", "SFB_tmap_list": "SFB_list[idx].data_ptr()"}
_PATCH_A, _PATCH_SFA = {9: "M - 1"}, {8: "(cdiv(M, 128) * 128 * K / 16) - 1"}
_GAU = dict(author="gau-nernst", roles=_ROLES, default_row={}, enums={}, reductions=(), kernel_args=("args", "K"),
            mixed_nk="scaled_mm", output="board")


def _gau(version, **facts) -> Twin:
    return Twin(version=version, **dict(_GAU, **facts))


# v5e's host (and v5g's, v6's, v6b's): the struct a static template (maps encoded once with a null address and
# M = 1), groups sorted by descending M, per call each map's address and A's rows / SFA's bytes patched; grid
# (N / 128, min(148 / grid_n, M tiles)).
_V5E = dict(
    _SORTED, constants={"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 256, "NUM_WARPS": 6},
    fields=_TMAPS_ABSF + _fields("half *C_ptr_list", "int M_list", "int grid_m_cu"),
    template=("NUM_GROUPS", "N", "K", "NUM_STAGES", "CTA_GROUP"), cluster_dims="CTA_GROUP, 1, 1",
    launch_params=("NUM_GROUPS", "N", "K", "CTA_GROUP"), dispatch=_NK,
    launch_table=tuple(b + (2,) for b in _BENCH), default_row={"CTA_GROUP": 2},
    maps=(MapInit("A_tmap_list", "init_AB_tmap", "nullptr", ("1", "K", "BLOCK_M / CTA_GROUP", "BLOCK_K")),
          MapInit("B_tmap_list", "init_AB_tmap", "nullptr", ("N", "K", "BLOCK_N", "BLOCK_K")),
          MapInit("SFA_tmap_list", "init_SF_tmap", "nullptr", ("1", "K", "CTA_GROUP")),
          MapInit("SFB_tmap_list", "init_SF_tmap", "nullptr", ("N", "K", "1"))),
    helpers={"init_AB_tmap": _AB_MAP, "init_SF_tmap": _SF_MN_CTA}, addresses=_TEMPLATE_MAPS,
    patches={"A_tmap_list": _PATCH_A, "SFA_tmap_list": _PATCH_SFA}, pointers={"C_ptr_list": "C_list[idx].data_ptr()"},
    scalars={"M_list": "M"}, cumulative=("grid_m_cu", "cdiv(M, BLOCK_M)"),
    arithmetic=_stage_arithmetic("((BLOCK_M / CTA_GROUP) + BLOCK_N) * (BLOCK_K / 2)", "128 * (BLOCK_K / 16) * 2",
                                 "2 * 2 * 8 + 4", before=(("grid_n", "N / BLOCK_N"),)),
    grid=("grid_n", "std::min(148 / grid_n, args.grid_m_cu[NUM_GROUPS])"),
    instance=("NUM_GROUPS", "N", "K", "NUM_STAGES", "CTA_GROUP"), output="m_major16",
    enums={"L2_MOD": ("NONE", "EVICT_NORMAL", "EVICT_FIRST", "EVICT_LAST")})
# v6's and v6b's: BLOCK_M a launch parameter (256 on benchmark 2), the SF helper given the box's bytes
_V6 = dict(
    _V5E, constants={"BLOCK_N": 128, "BLOCK_K": 256, "NUM_WARPS": 6},
    template=("NUM_GROUPS", "BLOCK_M", "N", "K", "NUM_STAGES", "CTA_GROUP"),
    launch_params=("NUM_GROUPS", "BLOCK_M", "N", "K", "CTA_GROUP"),
    launch_table=tuple(b[:1] + (256 if b[1] == 7168 else 128,) + b[1:] + (2,) for b in _BENCH),
    default_row={"BLOCK_M": 128, "CTA_GROUP": 2}, helpers={"init_AB_tmap": _AB_MAP, "init_SF_tmap": _SF_MN_BOX},
    maps=(MapInit("A_tmap_list", "init_AB_tmap", "nullptr", ("1", "K", "BLOCK_M / CTA_GROUP", "BLOCK_K")),
          MapInit("B_tmap_list", "init_AB_tmap", "nullptr", ("N", "K", "BLOCK_N", "BLOCK_K")),
          MapInit("SFA_tmap_list", "init_SF_tmap", "nullptr", ("1", "K", "BLOCK_M * BLOCK_K / 16 / CTA_GROUP")),
          MapInit("SFB_tmap_list", "init_SF_tmap", "nullptr", ("N", "K", "BLOCK_N * BLOCK_K / 16"))),
    arithmetic=_stage_arithmetic("((BLOCK_M / CTA_GROUP) + BLOCK_N) * (BLOCK_K / 2)",
                                 "128 * (BLOCK_K / 16) * (1 + BLOCK_M / 128)", "2 * (1 + BLOCK_M / 128) * 8 + 4",
                                 before=(("grid_n", "N / BLOCK_N"),)),
    instance=("NUM_GROUPS", "BLOCK_M", "N", "K", "NUM_STAGES", "CTA_GROUP"))
# v5's and v5c's: a 1-D grid over every (M tile, N tile) of all groups, raster a launch parameter, the SF maps'
# box one 2 KiB block whatever CTA_GROUP
_V5 = dict(
    _V5E, fields=_TMAPS_ABSF + _fields("half *C_ptr_list", "int M_list", "int grid_cu"),
    template=("NUM_GROUPS", "N", "K", "NUM_STAGES", "CTA_GROUP", "raster"), cluster_dims="2, 1, 1",
    launch_params=("NUM_GROUPS", "N", "K", "CTA_GROUP", "raster"),
    launch_table=tuple(b + (1 if b[1:] == (4096, 1536) else 2, "Raster::N") for b in _BENCH),
    default_row={"CTA_GROUP": 2, "raster": "Raster::N"}, enums={"Raster": ("M", "N")},
    maps=(MapInit("A_tmap_list", "init_AB_tmap", "nullptr", ("1", "K", "BLOCK_M / CTA_GROUP", "BLOCK_K")),
          MapInit("B_tmap_list", "init_AB_tmap", "nullptr", ("N", "K", "BLOCK_N", "BLOCK_K")),
          MapInit("SFA_tmap_list", "init_SF_tmap", "nullptr", ("1", "K")),
          MapInit("SFB_tmap_list", "init_SF_tmap", "nullptr", ("N", "K"))),
    helpers={"init_AB_tmap": _AB_MAP, "init_SF_tmap": _SF_MN}, cumulative=("grid_cu", "cdiv(M, BLOCK_M) * grid_n"),
    grid=("std::min(148 / grid_n * grid_n, args.grid_cu[NUM_GROUPS])",),
    instance=("NUM_GROUPS", "N", "K", "NUM_STAGES", "CTA_GROUP", "raster"))
# v1's, v2's, v2e's: 1-SM MMA, tokens on MMA M, scale factors copied by address (cp.async.bulk), the board's C
_V2E = dict(
    _SORTED, constants={"BLOCK_M": 128, "BLOCK_K": 256, "NUM_WARPS": 6},
    fields=_TMAPS_AB + _SF_POINTERS + _fields("half *C_ptr_list", "int M_list", "int grid_cu"),
    template=("NUM_GROUPS", "BLOCK_N", "N", "K", "NUM_STAGES", "raster"), cluster_dims="2, 1, 1",
    launch_params=("NUM_GROUPS", "BLOCK_N", "N", "K", "raster"), dispatch=_NK, enums={"Raster": ("M", "N")},
    launch_table=((8, 128, 4096, 7168, "Raster::N"), (8, 256, 7168, 2048, "Raster::M"),
                  (2, 128, 3072, 4096, "Raster::N"), (2, 128, 4096, 1536, "Raster::N")),
    default_row={"BLOCK_N": 128, "raster": "Raster::N"},
    maps=(MapInit("A_tmap_list", "init_AB_tmap", "nullptr", ("1", "K", "BLOCK_M", "BLOCK_K")),
          MapInit("B_tmap_list", "init_AB_tmap", "nullptr", ("N", "K", "BLOCK_N", "BLOCK_K"))),
    helpers={"init_AB_tmap": _AB_MAP},
    addresses={"A_tmap_list": "A_list[idx].data_ptr()", "B_tmap_list": "B_list[idx].data_ptr()"},
    patches={"A_tmap_list": _PATCH_A},
    pointers={"SFA_ptr_list": "SFA_list[idx].data_ptr()", "SFB_ptr_list": "SFB_list[idx].data_ptr()",
              "C_ptr_list": "C_list[idx].data_ptr()"},
    scalars={"M_list": "M"}, cumulative=("grid_cu", "cdiv(M, BLOCK_M) * grid_n"),
    arithmetic=_stage_arithmetic("(BLOCK_M + BLOCK_N) * (BLOCK_K / 2)", "128 * (BLOCK_K / 16) * (1 + BLOCK_N / 128)",
                                 "(1 + BLOCK_N / 128) * 2 * 8 + 4", before=(("grid_n", "N / BLOCK_N"),)),
    grid=("std::min(128, args.grid_cu[NUM_GROUPS])",),
    instance=("NUM_GROUPS", "BLOCK_N", "N", "K", "NUM_STAGES", "raster"))
# per call, unsorted: every map encoded afresh with the group's address and M
_PER_CALL = dict(sort=False, static_args=False, addresses={}, patches={}, group_values=(("M", "A_list[i].size(0)"),))
_V2 = dict(
    _PER_CALL, constants={"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 256, "NUM_WARPS": 6},
    fields=_TMAPS_AB + _SF_POINTERS + _fields("half *C_ptr_list", "int M_list", "int grid_m_cu"),
    template=("NUM_GROUPS", "N", "K", "NUM_STAGES"), cluster_dims=None,
    launch_params=("NUM_GROUPS", "N", "K"), dispatch=_NK, launch_table=_BENCH,
    maps=(MapInit("A_tmap_list", "init_AB_tmap", "A_list[i].data_ptr()", ("M", "K", "BLOCK_M", "BLOCK_K")),
          MapInit("B_tmap_list", "init_AB_tmap", "B_list[i].data_ptr()", ("N", "K", "BLOCK_N", "BLOCK_K"))),
    helpers={"init_AB_tmap": _AB_MAP},
    pointers={"SFA_ptr_list": "SFA_list[i].data_ptr()", "SFB_ptr_list": "SFB_list[i].data_ptr()",
              "C_ptr_list": "C_list[i].data_ptr()"},
    scalars={"M_list": "M"}, cumulative=("grid_m_cu", "cdiv(M, BLOCK_M)"),
    arithmetic=_stage_arithmetic("(BLOCK_M + BLOCK_N) * (BLOCK_K / 2)", "128 * (BLOCK_K / 16) * 2", "4 * 8 + 4",
                                 before=(("grid_n", "N / BLOCK_N"), ("num_tiles", "args.grid_m_cu[NUM_GROUPS] * grid_n"))),
    grid=("std::min(128, num_tiles)",), instance=("NUM_GROUPS", "N", "K", "NUM_STAGES"), kernel_args=("args",))

TWINS = {
    # v1: a 3-D grid (N tiles of the widest group, M tiles of the tallest, groups) with early exit; M, N, K per
    # group in the struct (groups of mixed N or K run in the kernel); one instance per group count
    "gau-nernst v1": _gau("v1", **dict(
        _V2, group_values=(("M", "A_list[i].size(0)"), ("N", "B_list[i].size(0)"), ("K", "A_list[i].size(1) * 2")),
        fields=_TMAPS_AB + _SF_POINTERS + _fields("half *C_ptr_list", "int M_list", "int N_list", "int K_list"),
        template=("NUM_GROUPS", "NUM_STAGES"), launch_params=("NUM_GROUPS",), dispatch={"G": "NUM_GROUPS"},
        launch_table=((2,), (3,), (4,), (8,)), scalars={"M_list": "M", "N_list": "N", "K_list": "K"}, cumulative=None,
        reductions=(("max_M", "std::max(max_M, M)"), ("max_N", "std::max(max_N, N)")),
        arithmetic=_stage_arithmetic("(BLOCK_M + BLOCK_N) * (BLOCK_K / 2)", "128 * (BLOCK_K / 16) * 2", "8 + 4",
                                     before=(("max_M", "0"), ("max_N", "0"))),
        grid=("max_N / BLOCK_N", "cdiv(max_M, BLOCK_M)", "NUM_GROUPS"), instance=("NUM_GROUPS", "NUM_STAGES"),
        mixed_nk="kernel"), board_us=(37.8, 33, 10.8, 8.44)),
    # v2: persistent, a 1-D grid of min(128, tiles) CTAs walking (M tile, N tile) of all groups in order
    "gau-nernst v2": _gau("v2", **_V2, board_us=(32.5, 22.9, 10.4, 8.4)),
    # v2d: SFA/SFB by 1-D tensor maps; 2-SM MMA (B split over the pair) on benchmark 3 only, on all 148 SMs
    "gau-nernst v2d": _gau("v2d", **dict(
        _PER_CALL, constants={"BLOCK_M": 128, "BLOCK_K": 256, "NUM_WARPS": 6},
        fields=_TMAPS_ABSF + _fields("half *C_ptr_list", "int M_list", "int grid_cu"),
        template=("NUM_GROUPS", "BLOCK_N", "N", "K", "NUM_STAGES", "CTA_GROUP", "raster"), cluster_dims="CTA_GROUP, 1, 1",
        launch_params=("NUM_GROUPS", "BLOCK_N", "N", "K", "CTA_GROUP", "NUM_BLOCKS", "raster"), dispatch=_NK,
        enums={"Raster": ("M", "N")},
        launch_table=((8, 128, 4096, 7168, 1, 128, "Raster::N"), (8, 256, 7168, 2048, 1, 128, "Raster::M"),
                      (2, 128, 3072, 4096, 2, 148, "Raster::M"), (2, 128, 4096, 1536, 1, 128, "Raster::M")),
        default_row={"BLOCK_N": 128, "CTA_GROUP": 1, "NUM_BLOCKS": 128, "raster": "Raster::M"},
        group_values=(("M", "A_list[i].size(0)"), ("grid_m", "cdiv(M, BLOCK_M * CTA_GROUP) * CTA_GROUP")),
        maps=(MapInit("A_tmap_list", "init_AB_tmap", "A_list[i].data_ptr()", ("M", "K", "BLOCK_M", "BLOCK_K")),
              MapInit("B_tmap_list", "init_AB_tmap", "B_list[i].data_ptr()", ("N", "K", "BLOCK_N / CTA_GROUP", "BLOCK_K")),
              MapInit("SFA_tmap_list", "init_SF_tmap", "SFA_list[i].data_ptr()",
                      ("cdiv(M, 128) * 128 * K / 16", "128 * BLOCK_K / 16")),
              MapInit("SFB_tmap_list", "init_SF_tmap", "SFB_list[i].data_ptr()", ("N * K / 16", "128 * BLOCK_K / 16"))),
        helpers={"init_AB_tmap": _AB_MAP, "init_SF_tmap": _SF_BYTES}, pointers={"C_ptr_list": "C_list[i].data_ptr()"},
        scalars={"M_list": "M"}, cumulative=("grid_cu", "grid_m * grid_n"),
        arithmetic=_stage_arithmetic("(BLOCK_M + (BLOCK_N / CTA_GROUP)) * (BLOCK_K / 2)",
                                     "128 * (BLOCK_K / 16) * (1 + BLOCK_N / 128)", "4 * 8 + 4",
                                     before=(("grid_n", "N / BLOCK_N"),)),
        grid=("std::min(NUM_BLOCKS, args.grid_cu[NUM_GROUPS])",),
        instance=("NUM_GROUPS", "BLOCK_N", "N", "K", "NUM_STAGES", "CTA_GROUP", "raster")), board_us=(32.4, 21.5, 10.4, 8.4)),
    # v2e: v2c's kernel (BLOCK_N 256 with 48 overlapping TMEM columns, raster along M) and a static template
    # patched per call, groups sorted by descending M
    "gau-nernst v2e": _gau("v2e", **_V2E, board_us=(31.4, 20.8, 10.4, 8.39)),
    # v5: A and B swapped (weights on MMA M, 2-SM on benchmarks 1-3), v5e's host but a 1-D grid
    "gau-nernst v5": _gau("v5", **_V5, board_us=(29, 20.8, 10.3, 8.4)),
    # v5c: v5 with cluster launch control (a scheduler warp, 7 warps), a grid of every tile, 2-SM on all four
    "gau-nernst v5c": _gau("v5c", **dict(
        _V5, constants={"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 256, "NUM_WARPS": 7},
        roles={"4": "scheduler", "5": "TMA", "6": "MMA", "else": "epilogue"}, cluster_dims="CTA_GROUP, 1, 1",
        launch_table=tuple(b + (2, "Raster::N") for b in _BENCH),
        arithmetic=_stage_arithmetic("((BLOCK_M / CTA_GROUP) + BLOCK_N) * (BLOCK_K / 2)", "128 * (BLOCK_K / 16) * 2",
                                     "2 * 2 * 8 + 16 + 2 * 8 + 4", before=(("grid_n", "N / BLOCK_N"),)),
        grid=("args.grid_cu[NUM_GROUPS]",)), board_us=(31, 20.9, 10.4, 8.4)),
    # v5e: v5's kernel reworked (unrolled first stages, SFA multicast, ...) under the 2-D grid host; compiled
    # for clusters of 2 whatever CTA_GROUP (v5g's clusters are CTA_GROUP)
    "gau-nernst v5e": _gau("v5e", **dict(_V5E, cluster_dims="2, 1, 1"), board_us=(28.4, 20.6, 8.71, 6.54)),
    # v5g: BLOCK_M a constant 128 (LAUNCH(G, N, K, CTA_GROUP)), A loaded only where in bounds
    "gau-nernst v5g": _gau("v5g", **_V5E, board_us=(28.5, 20.3, 8.51, 6.49)),
    # v6: BLOCK_M 256 as one MMA with N = 256 (A's box: BLOCK_M / CTA_GROUP rows)
    "gau-nernst v6": _gau("v6", **_V6, board_us=(27.9, 19.7, 8.5, 6.43)),
    # v6b: BLOCK_M 256 as two MMAs with N = 128 (A's box: 128 / CTA_GROUP rows, two loads per stage)
    "gau-nernst v6b": _gau("v6b", **dict(_V6, maps=(
        MapInit("A_tmap_list", "init_AB_tmap", "nullptr", ("1", "K", "128 / CTA_GROUP", "BLOCK_K")),) + _V6["maps"][1:]),
        board_us=(27.9, 19.4, 8.48, 6.43)),
}


def identify(cuda: str, python: str = "") -> tuple:
    """(name, twin) of the twin whose facts the source bears out; PeerRefused naming each twin's first
    mismatch otherwise."""
    reasons = []
    for name, twin in TWINS.items():
        wrong = twin.check(cuda, python)
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


class Host:
    """A twin's host code run per call through the stub driver (group_gemm_launch): the struct built from its
    template (`static_args`: encoded once per row, kept and patched call after call, as the C++'s `static`) or
    afresh; the groups in the caller's order or sorted by descending M (std::sort: ties in an unspecified order,
    here in index order); for each, the loop's values, the maps encoded with the group's address or the
    template's words patched, the members stored, the running sum; then the arithmetic after the loop, the grid,
    cudaFuncSetAttribute and `<<<grid, block, smem>>>(args, ...)`.

    Nothing in a repeated call of these hosts blocks or synchronizes (custom_kernel allocates C with torch.empty
    from the caching allocator, or uses the board's; torch.cuda.synchronize() is commented out); 8 groups make
    structs past the classic 4 KiB of kernel parameters, which CUDA 12.1 and later allow."""

    def __init__(self, twin: Twin):
        self.twin = twin
        self.templates = {}  # row -> the struct bytes after create_args_template (the C++'s `static args`)

    def _put(self, args: bytearray, layout: dict, member: str, i: int, fmt, value, word: int = 0) -> None:
        """Member `member`'s element i (a 128-byte map, or a scalar), its `word`-th word of type `fmt`."""
        width = np.dtype(fmt).itemsize
        ctype = next(t for n, t, _ in self.twin.fields if n == member)
        offset = layout[member][0] + CTYPES[ctype][0] * i + width * word
        np.frombuffer(args, dtype=fmt, count=1, offset=offset)[...] = value

    def _encode(self, driver, args, layout, init: MapInit, i: int, env: dict) -> None:
        helper = self.twin.helpers[init.helper]
        encoded = helper.encode(driver, cxx_eval(init.pointer, env), tuple(cxx_eval(a, env) for a in init.args),
                                self.twin.constants)
        offset = layout[init.member][0] + 128 * i
        args[offset:offset + 128] = encoded

    def template(self, driver, row: dict, env: dict) -> bytearray:
        key = tuple(row.items())
        if key not in self.templates:
            t = self.twin
            layout, size = t.layout(row["NUM_GROUPS"])
            args = bytearray(size)
            for i in range(row["NUM_GROUPS"]):
                for init in t.maps:
                    if squeeze(init.pointer) == "nullptr":
                        self._encode(driver, args, layout, init, i, dict(env, i=i))
            self.templates[key] = args
        return self.templates[key]

    def call(self, driver, function, row: dict, groups: list) -> dict:
        """One call: `groups` is [{"A": a, "B": b, "SFA": sfa, "SFB": sfb, "C": c}] in the caller's order
        (tensors with size() and data_ptr()). Returns what it launched (grid, block, shared bytes, the struct
        bytes, the groups' order)."""
        t = self.twin
        g = len(groups)
        env = t.env(row)
        later = [name for name, _ in t.arithmetic if name not in env]
        layout, size = t.layout(g)
        args = self.template(driver, row, env) if t.static_args else bytearray(size)
        order = sorted(range(g), key=lambda j: -groups[j]["A"].size(0)) if t.sort else list(range(g))
        members = {name: [0] * cxx_eval(count, {"NUM_GROUPS": g}) for name, ctype, count in t.fields if ctype == "int"}
        env.update(indices=order, size_=lambda name, j, d: int(groups[j][name].size(d)),
                   ptr_=lambda name, j: int(groups[j][name].data_ptr()),
                   **{f"args_{name}": values for name, values in members.items()})
        for i in range(g):
            env["i"] = i
            for name, expr in t.group_values:
                env[name] = cxx_eval(expr, env)
            for name, expr in t.reductions:
                env[name] = cxx_eval(expr, env)
            for init in t.maps:
                if squeeze(init.pointer) != "nullptr":
                    self._encode(driver, args, layout, init, i, env)
            for member, expr in t.addresses.items():
                self._put(args, layout, member, i, np.uint64, cxx_eval(expr, env))
            for member, words in t.patches.items():
                for word, expr in words.items():
                    self._put(args, layout, member, i, np.int32, cxx_eval(expr, env), word)
            for member, expr in t.pointers.items():
                self._put(args, layout, member, i, np.uint64, cxx_eval(expr, env))
            for member, expr in t.scalars.items():
                members[member][i] = cxx_eval(expr, env)
            if t.cumulative:
                member, expr = t.cumulative
                members[member][i + 1] = members[member][i] + cxx_eval(expr, env)
        for member, values in members.items():
            start = layout[member][0]
            if member in t.scalars or (t.cumulative and member == t.cumulative[0]):
                args[start:start + 4 * len(values)] = np.array(values, np.int32).tobytes()
        for name, expr in t.arithmetic:  # the declarations that waited for the loop (they read the struct)
            if name in later:
                env[name] = cxx_eval(expr, env)
        grid = tuple(cxx_eval(x, env) for x in t.grid) + (1,) * (3 - len(t.grid))
        block = (cxx_eval(t.block, env), 1, 1)
        shared = env[t.launch[2]]
        params = [bytes(args)] + [np.int32(cxx_eval(a, env)).tobytes() for a in t.kernel_args[1:]]
        driver.launch(function, grid, block, shared, params)
        return {"grid": grid, "block": block, "shared": shared, "args": bytes(args), "order": order}


# --------------------------------------------------------------------------------------------------
# The case: compiled kernel + twin + the board's inputs
# --------------------------------------------------------------------------------------------------


class PeerLaunch:
    """The peer's entry as the emulator's `compiled`: calling it with a case does what the peer's custom_kernel
    does for that case's inputs (the twin's host code, one launch through the stub driver); `__ptx__` is nvcc's
    PTX of the whole translation unit, as a DSL compiled function carries its own."""

    def __init__(self, twin: Twin, ptx: str, cubin: bytes, entry: str, row: dict):
        self.twin, self.__ptx__, self.cubin, self.entry, self.row = twin, ptx, cubin, entry, row
        self.host = Host(twin)
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
    scope, so no signature is restated); `args` as the source writes them (an enumerator by name)."""
    tag = "_".join(re.sub(r"\W+", "_", str(a)) for a in args)
    return f"static void *nvfp4_emulator_instance_{tag} = (void *)&{twin.kernel}<{', '.join(str(a) for a in args)}>;"


POISON = float("nan")


class PeerCudaCase:
    """A peer's CUDA entry on the board's inputs for one spec (tools/emulate.py's run_example_calls protocol:
    `compiled`, `args`, `register`, `with_inputs`, `compare`, `warp_roles`, `seed`).

    The spec's groups must share N and K where the twin's custom_kernel sends other shapes to torch._scaled_mm
    (no kernel; `mixed_nk`). C: the twin's `output` says what custom_kernel hands the kernel: the board's c
    (M x N, row-major) or its own buffers (M-major, M padded to 16); either way the case allocates them with
    its inputs (poisoned with NaN), so that they can be registered before the call, and the twin's call hands
    them to the kernel as the C++ would.

    `row`: the launch parameters for a shape outside the LAUNCH table ({name: value}; a pair is (BLOCK_M,
    CTA_GROUP), the older form)."""

    def __init__(self, source_text: str, spec: str, *, row=None, seed_shift: int = 0, twin: Twin | None = None):
        src = inline_source(source_text)
        if src is None:
            raise PeerRefused("not a load_inline CUDA source (no load_inline call whose cuda_sources hold a __global__)")
        # `twin`: this one instead of the one the source bears out (a test's planted defect)
        self.name, self.twin = identify(src.cuda, source_text) if twin is None else \
            (f"{twin.author} {twin.version} (given)", twin)
        self.spec = spec
        values = _spec_values(spec)
        ns, ks = set(values["n"]), set(values["k"])
        if (len(ns) != 1 or len(ks) != 1) and self.twin.mixed_nk == "scaled_mm":
            raise PeerRefused(f"{self.name}: groups of different N or K ({values['n']}, {values['k']}) go to "
                              "torch._scaled_mm in its custom_kernel, not to its kernel")
        g, n, k = values["g"], values["n"][0], values["k"][0]
        if isinstance(row, (tuple, list)):
            row = dict(zip(("BLOCK_M", "CTA_GROUP"), row))
        self.row = self.twin.row(g, n, k, row)
        args = self.twin.template_args(self.row)
        extra = "" if self.twin.in_table(self.row) else instantiation(self.twin, args)
        ptx, cubin = compile_source(src, extra)
        wrong = check_compiled(self.twin, ptx) if twin is None else []
        if wrong:
            raise PeerRefused(f"{self.name}: {wrong[0]}")
        entry = entries(ptx, self.twin.kernel).get(self.twin.mangled(args))
        if entry is None:
            raise PeerRefused(f"{self.name}: nvcc made no instance {self.twin.kernel}<{args}>")
        self.compiled = PeerLaunch(self.twin, ptx, cubin, entry, self.row)
        self.warp_roles = self.twin.warp_roles
        self.values = values
        self._inputs(values["seed"] + seed_shift)

    @property
    def note(self) -> str:
        """One line: the twin, the row and whether the source's LAUNCH table has it."""
        where = "a row of its LAUNCH table" if self.twin.in_table(self.row) else \
            "an instance added: its LAUNCH table has no row for this shape"
        return (f"{self.name}: {self.twin.describe(self.row)}, {self.twin.stages(self.row)} stages, "
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
            if self.twin.output == "m_major16":
                padded = _cdiv(m, 16) * 16
                buffer = torch.full((padded * n,), POISON, dtype=torch.float16)
                output = buffer.as_strided((m, n, 1), (1, padded, 0))
            else:  # the board's c: (M, N, 1), row-major
                buffer = torch.full((m * n,), POISON, dtype=torch.float16)
                output = buffer.as_strided((m, n, 1), (n, 1, m * n))
            self.buffers.append(buffer)
            self.outputs.append(output)

    def with_inputs(self, seed: int) -> "PeerCudaCase":
        """The same compiled kernel on the board's inputs drawn with `seed` (another call of a stream)."""
        other = copy.copy(self)
        other._inputs(seed)
        return other

    def host_groups(self) -> list:
        """[{"A": a, "B": b, "SFA": sfa_reordered, "SFB": sfb_reordered, "C": c}] per group, as custom_kernel
        unpacks the board's tuple (the host code's A_list[i], ..., C_list[i])."""
        abc, _, sf, _ = self.data
        return [{"A": a, "B": b, "SFA": sfa, "SFB": sfb, "C": c} for (a, b, _), (sfa, sfb), c in zip(abc, sf, self.outputs)]

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
    """The route's case (groundtruth/peers.py): `row` ({launch parameter: value}, or the pair (BLOCK_M,
    CTA_GROUP)) for a shape outside the LAUNCH table, `seed_shift` added to the spec's seed. No repair is known
    for a CUDA entry."""
    if repairs:
        raise ValueError(f"no repair is known for a CUDA entry (asked: {', '.join(repairs)})")
    return PeerCudaCase(source_text, spec, **options)


def _spec_values(spec: str) -> dict:
    import eval as harness

    values = harness.parse_spec_line(spec)
    harness.check_spec_values(values, spec)
    return values
