"""PTX text -> instructions: the parser of the emulator.

Reads the PTX module that CuTe DSL emits (one `.entry` per kernel, ISA 8.8+): the entry's parameters with
their alignment and size (ISA 5.1.6.1 "Kernel Function Parameters"), `.shared` declarations (5.1.5), and
the body as a flat list of instructions. Inline-asm blocks arrive as nested `{ }` scopes that declare
their own registers and labels (the DSL's mbarrier spin loops repeat `LAB_WAIT:`/`DONE:` in every copy):
names declared inside a scope are renamed `name@scope` so that each copy is distinct (ISA 11.2, scoping
of `.reg` and labels inside `{ }`).

An instruction keeps its PTX line number (1-based, in the text the emulator read) for every report.
Operands are parsed once into small tuples (see `Operand`); the interpreter compiles them to accessors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


class PtxParseError(Exception):
    pass


@dataclass(frozen=True)
class Operand:
    """One parsed operand.

    kind: 'reg' (name), 'imm' (value: int, or float for 0f/0d literals), 'sym' (name: a parameter or a
    `.shared` variable), 'vec' (items: operands), 'addr' (items: base operand or None, offset int; for a
    tensor address `[map, {c0, c1}]` items[2] is the coordinate vector), 'pair' (items: two register
    operands, as in `%r1|%p1`), 'label' (name), 'sink' (`_`).
    """

    kind: str
    name: str = ""
    value: object = None
    items: tuple = ()

    def __str__(self) -> str:
        if self.kind in ("reg", "sym", "label"):
            return self.name
        if self.kind == "imm":
            return str(self.value)
        if self.kind == "sink":
            return "_"
        if self.kind == "vec":
            return "{" + ", ".join(map(str, self.items)) + "}"
        if self.kind == "pair":
            return f"{self.items[0]}|{self.items[1]}"
        base, offset = self.items[0], self.items[1]
        text = (str(base) if base is not None else "") + (f"+{offset}" if offset else "")
        if len(self.items) > 2:
            text += f", {self.items[2]}"
        return f"[{text}]"


@dataclass
class Instruction:
    """One PTX instruction: `[@guard] opcode operands;`. `opcode` is the full dotted form
    (`mbarrier.try_wait.parity.shared.b64`); `family` its first word (`mbarrier`)."""

    index: int
    line: int
    text: str
    opcode: str
    operands: tuple
    guard: tuple | None = None  # (register name, negated)

    @property
    def family(self) -> str:
        return self.opcode.split(".", 1)[0]

    @property
    def modifiers(self) -> tuple:
        return tuple(self.opcode.split(".")[1:])


@dataclass
class Param:
    name: str
    offset: int
    size: int
    align: int


@dataclass
class SharedVariable:
    name: str
    align: int
    size: int  # 0 for the dynamic (extern) array
    extern: bool


@dataclass
class Kernel:
    name: str
    params: list
    instructions: list
    labels: dict  # label name -> instruction index
    shared: list  # SharedVariable, in declaration order (module scope and entry scope)
    reqntid: tuple | None = None
    source: str = ""
    # performance-tuning directives (ISA 11.4): `.maxntid` (at most this many threads per CTA) and
    # `.reqnctapercluster` (the cluster shape fixed at compile time, CUDA's `__cluster_dims__`)
    maxntid: tuple | None = None
    reqnctapercluster: tuple | None = None
    registers: set = field(default_factory=set)

    @property
    def param_bytes(self) -> int:
        return max((p.offset + p.size for p in self.params), default=0)

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)


# --------------------------------------------------------------------------------------------------
# Lexing helpers
# --------------------------------------------------------------------------------------------------

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_TYPE_BYTES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "b32": 4, "u32": 4,
               "s32": 4, "f32": 4, "b64": 8, "u64": 8, "s64": 8, "f64": 8, "pred": 1}


def _strip_comments(text: str) -> str:
    # keep line structure so that line numbers stay right
    return _COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def _split_top(text: str, sep: str = ",") -> list:
    """Split at `sep` outside of braces and brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _parse_int(token: str):
    t = token.strip()
    if re.fullmatch(r"0[fF][0-9a-fA-F]{8}", t):
        import struct

        return struct.unpack("<f", int(t[2:], 16).to_bytes(4, "little"))[0]
    if re.fullmatch(r"0[dD][0-9a-fA-F]{16}", t):
        import struct

        return struct.unpack("<d", int(t[2:], 16).to_bytes(8, "little"))[0]
    if re.fullmatch(r"-?0[xX][0-9a-fA-F]+U?", t):
        return int(t.rstrip("U"), 16)
    if re.fullmatch(r"-?\d+U?", t):
        return int(t.rstrip("U"))
    if re.fullmatch(r"-?\d+\.\d*(?:[eE][+-]?\d+)?", t):
        return float(t)
    return None


def parse_operand(text: str, rename) -> Operand:
    t = text.strip()
    if t == "_":
        return Operand("sink")
    if t.startswith("{"):
        if not t.endswith("}"):
            raise PtxParseError(f"bad vector operand {t!r}")
        return Operand("vec", items=tuple(parse_operand(x, rename) for x in _split_top(t[1:-1])))
    if t.startswith("["):
        if not t.endswith("]"):
            raise PtxParseError(f"bad address operand {t!r}")
        inner = _split_top(t[1:-1])
        base, offset = _parse_address(inner[0], rename)
        if len(inner) == 1:
            return Operand("addr", items=(base, offset))
        return Operand("addr", items=(base, offset, parse_operand(inner[1], rename)))
    if "|" in t:
        a, b = t.split("|")
        return Operand("pair", items=(parse_operand(a, rename), parse_operand(b, rename)))
    value = _parse_int(t)
    if value is not None:
        return Operand("imm", value=value)
    if t.startswith("-") and t[1:].startswith("%"):
        raise PtxParseError(f"negated register operand {t!r} is not supported")
    if t.startswith("%") or re.fullmatch(r"[A-Za-z_][\w$]*", t) and rename(t) != t:
        return Operand("reg", name=rename(t))
    if re.fullmatch(r"[A-Za-z_$][\w$]*", t):
        return Operand("sym", name=t)
    raise PtxParseError(f"cannot parse operand {t!r}")


def _parse_address(text: str, rename):
    t = text.replace(" ", "")
    # `[reg+imm]` with a signed imm (PTX ISA 6.4.1): LLVM's NVPTX backend writes a negative one `+-24`
    m = re.fullmatch(r"([^+\-]+)(?:([+\-])(-?)(0[xX][0-9a-fA-F]+|\d+))?", t)
    if not m:
        raise PtxParseError(f"cannot parse address {text!r}")
    base_text, sign, negative, off = m.groups()
    offset = 0 if off is None else int(off, 0) * (-1 if (sign == "-") != (negative == "-") else 1)
    value = _parse_int(base_text)
    if value is not None:
        return None, value + offset
    return parse_operand(base_text, rename), offset


# --------------------------------------------------------------------------------------------------
# Module
# --------------------------------------------------------------------------------------------------

_ENTRY = re.compile(r"\.(?:visible\s+|weak\s+)?\.?entry\s+([\w$]+)\s*\(", re.S)
# `[.extern] .shared [.align A] .type name[N]`, `name[]` (the dynamic array) or a scalar `name` (nvcc's
# function-scope `__shared__` variables: ISA 5.1.5)
_SHARED = re.compile(r"(\.extern\s+)?\.shared\s+(?:\.align\s+(\d+)\s+)?\.(\w+)\s+([\w$]+)\s*(?:\[(\d*)\])?\s*;")
# `.param [.align A] .type [.ptr [.space] [.align N]] name[[count]]`: the `.ptr` attributes of a pointer
# parameter (ISA 5.1.6.1: the state space and alignment of what it points to) leave its own layout unchanged
_PARAM = re.compile(r"\.param\s+(?:\.align\s+(\d+)\s+)?\.(\w+)\s+(?:\.ptr\s+(?:\.(?:global|shared|const|local)\s+)?"
                    r"(?:\.align\s+\d+\s+)?)?([\w$]+)(?:\s*\[(\d+)\])?")


def parse_module(text: str) -> dict:
    """All `.entry` kernels of a PTX module, by name."""
    clean = _strip_comments(text)
    module_shared = []
    kernels = {}
    pos = 0
    for m in _ENTRY.finditer(clean):
        for s in _SHARED.finditer(clean, pos, m.start()):
            module_shared.append(_shared_variable(s))
        kernels[m.group(1)] = _parse_entry(clean, m, list(module_shared), text)
        pos = m.end()
    if not kernels:
        raise PtxParseError("no .entry in the PTX text")
    return kernels


def _shared_variable(m) -> SharedVariable:
    extern, align, typ, name, count = m.groups()
    elem = _TYPE_BYTES.get(typ, 1)
    return SharedVariable(name, int(align or elem), elem * (1 if count is None else int(count or 0)), bool(extern))


def _parse_entry(clean: str, m, shared: list, source: str) -> Kernel:
    name = m.group(1)
    close = clean.index(")", m.end())
    params, offset = [], 0
    for p in _split_top(clean[m.end():close]):
        pm = _PARAM.match(p)
        if not pm:
            raise PtxParseError(f"{name}: cannot parse parameter {p!r}")
        align, typ, pname, count = pm.groups()
        elem = _TYPE_BYTES[typ]
        size = elem * int(count or 1)
        align = int(align or elem)
        offset = (offset + align - 1) // align * align
        params.append(Param(pname, offset, size, align))
        offset += size
    body_start = clean.index("{", close)
    header = clean[close + 1:body_start]
    reqntid = None
    rq = re.search(r"\.reqntid\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?", header)
    if rq:
        reqntid = tuple(int(x or 1) for x in rq.groups())
    directives = {}
    for directive in ("maxntid", "reqnctapercluster"):
        found = re.search(rf"\.{directive}\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?", header)
        if found:
            directives[directive] = tuple(int(x or 1) for x in found.groups())
    kernel = Kernel(name, params, [], {}, shared, reqntid, source, **directives)
    _parse_body(clean, body_start, kernel)
    return kernel


def _parse_body(clean: str, start: int, kernel: Kernel) -> None:
    """Statements from the `{` at `start` to its matching `}`; nested scopes rename their names."""
    line = clean.count("\n", 0, start) + 1
    scopes = [{}]  # stack of {declared name: renamed}
    scope_ids = [0]
    next_scope = 1
    unresolved = []  # (instruction, scope ids visible at the branch, innermost last)

    def rename(n: str) -> str:
        for scope in reversed(scopes):
            if n in scope:
                return scope[n]
        return n

    i = start + 1
    depth = 1
    n = len(clean)
    while i < n and depth > 0:
        ch = clean[i]
        if ch == "\n":
            line += 1
            i += 1
            continue
        if ch.isspace():
            i += 1
            continue
        if ch == "{":
            scopes.append({})
            scope_ids.append(next_scope)
            next_scope += 1
            depth += 1
            i += 1
            continue
        if ch == "}":
            scopes.pop()
            scope_ids.pop()
            depth -= 1
            i += 1
            continue
        # a label: NAME:
        lm = re.compile(r"([\w$]+)\s*:").match(clean, i)
        if lm:
            label = lm.group(1)
            renamed = label if len(scopes) == 1 else f"{label}@{scope_ids[-1]}"
            kernel.labels[renamed] = len(kernel.instructions)
            line += clean.count("\n", i, lm.end())
            i = lm.end()
            continue
        end = clean.index(";", i)
        stmt = clean[i:end]
        stmt_line = line
        line += stmt.count("\n")
        i = end + 1
        stmt = " ".join(stmt.split())
        if stmt.startswith(".reg"):
            rm = re.match(r"\.reg\s+\.(\w+)\s+(.*)", stmt)
            for decl in rm.group(2).split(","):
                decl = decl.strip()
                pm = re.fullmatch(r"([%\w$]+)<(\d+)>", decl)
                names = [f"{pm.group(1)}{k}" for k in range(int(pm.group(2)))] if pm else [decl]
                if len(scopes) > 1:
                    for nm in names:
                        scopes[-1][nm] = f"{nm}@{scope_ids[-1]}"
            continue
        if stmt.startswith("."):
            if stmt.startswith(".shared"):
                sm = _SHARED.match(stmt + ";")
                if sm:
                    kernel.shared.append(_shared_variable(sm))
                    continue
            if stmt.startswith((".pragma", ".loc", ".file")):
                continue
            raise PtxParseError(f"line {stmt_line}: unsupported directive {stmt!r}")
        instr = _parse_instruction(len(kernel.instructions), stmt_line, stmt, rename)
        kernel.instructions.append(instr)
        if instr.operands and instr.operands[0].kind == "label":
            unresolved.append((instr, tuple(scope_ids)))
    # a branch goes to the label of the innermost enclosing scope that declares it
    for instr, chain in unresolved:
        name = instr.operands[0].name
        for sid in reversed(chain):
            renamed = name if sid == 0 else f"{name}@{sid}"
            if renamed in kernel.labels:
                instr.operands = (Operand("label", name=renamed),)
                break
        else:
            raise PtxParseError(f"line {instr.line}: unknown label {name}")
    for instr in kernel.instructions:
        kernel.registers.update(_registers(instr.operands))


def _registers(operands):
    for op in operands:
        if op is None:
            continue
        if op.kind == "reg":
            yield op.name
        elif op.kind in ("vec", "pair", "addr"):
            yield from _registers(x for x in op.items if isinstance(x, Operand))


def _parse_instruction(index, line, stmt, rename) -> Instruction:
    guard = None
    gm = re.match(r"@(!?)([%\w$@]+)\s+", stmt)
    if gm:
        guard = (rename(gm.group(2)), gm.group(1) == "!")
        stmt = stmt[gm.end():]
    parts = stmt.split(None, 1)
    opcode = parts[0]
    operand_text = parts[1] if len(parts) > 1 else ""
    if opcode.startswith("bra") or opcode.startswith("call"):
        return Instruction(index, line, stmt, opcode, (Operand("label", name=operand_text.strip()),), guard)
    operands = tuple(parse_operand(t, rename) for t in _split_top(operand_text))
    return Instruction(index, line, stmt, opcode, operands, guard)


def branch_target(kernel: Kernel, instr: Instruction) -> int:
    return kernel.labels[instr.operands[0].name]
