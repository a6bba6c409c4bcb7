"""Plant one defect in a kernel's PTX text: the negative controls of the emulator (--ptx-filter).

    python tests/ptx_defects.py DEFECT < kernel.ptx > defective.ptx

DEFECT (each fails loudly when the PTX has nothing to change):
  expect-tx     every `mbarrier.arrive.expect_tx` announces 16 bytes more than the copies deliver
  no-full-wait  the MMA warp's first full-barrier wait is skipped: its peek `try_wait` result is
                replaced by true, so the MMA may read a stage before its bytes landed
  sf-column     the scale-factor-A tensor-memory address of every tcgen05.mma is one column further
  oob-global    the first instruction of the kernel body loads 4 bytes from global address 16
"""

from __future__ import annotations

import re
import sys


class NothingToPlant(Exception):
    pass


def expect_tx(ptx: str) -> str:
    """The byte count register of each expect_tx is set by a `mov.b32 %rN, VALUE;` just before it."""
    lines = ptx.split("\n")
    changed = 0
    for i, line in enumerate(lines):
        m = re.search(r"mbarrier\.arrive\.expect_tx\S*\s+_,\s*\[[^\]]+\],\s*(%r\d+);", line)
        if not m:
            continue
        reg = re.escape(m.group(1))
        for j in range(i - 1, max(i - 8, -1), -1):
            mm = re.match(rf"(\s*mov\.b32\s+{reg},\s*)(\d+);", lines[j])
            if mm:
                lines[j] = f"{mm.group(1)}{int(mm.group(2)) + 16};"
                changed += 1
                break
    if not changed:
        raise NothingToPlant("no expect_tx with a constant byte count")
    return "\n".join(lines)


def no_full_wait(ptx: str) -> str:
    """The first `mbarrier.try_wait... %pN, [...]` peek whose predicate then skips a wait loop: force %pN."""
    # the MMA warp's peek is the one followed by a spin on the same barrier register after other waits;
    # the producer's peek (on the empty barrier) comes first in the text, so take the second peek
    peeks = list(re.finditer(r"\n(\s*)mbarrier\.try_wait\.parity\.acquire\S*\s+(%p\d+),\s*\[(%r\d+)\],\s*(%r\d+);",
                             ptx))
    if len(peeks) < 2:
        raise NothingToPlant("fewer than two try_wait peeks")
    peek = peeks[1]
    indent, pred = peek.group(1), peek.group(2)
    return ptx[:peek.end()] + f"\n{indent}setp.eq.s32 {pred}, 0, 0;" + ptx[peek.end():]


def sf_column(ptx: str) -> str:
    out, changed = [], 0
    for line in ptx.split("\n"):
        m = re.match(r"(\s*)tcgen05\.mma\S*\s+\[[^\]]+\],\s*[^,]+,\s*[^,]+,\s*[^,]+,\s*\[(%r\d+)\]", line)
        if m:
            indent, reg = m.group(1), m.group(2)
            out += [f"{indent}add.s32 {reg}, {reg}, 1;", line, f"{indent}add.s32 {reg}, {reg}, -1;"]
            changed += 1
        else:
            out.append(line)
    if not changed:
        raise NothingToPlant("no tcgen05.mma")
    return "\n".join(out)


def oob_global(ptx: str) -> str:
    m = re.search(r"\.reg \.b64\s+%rd<\d+>;\n", ptx)
    if not m:
        raise NothingToPlant("no .reg .b64 declaration")
    insert = "\tmov.u64 %rd1, 16;\n\tld.global.u32 %r1, [%rd1];\n"
    return ptx[:m.end()] + insert + ptx[m.end():]


DEFECTS = {"expect-tx": expect_tx, "no-full-wait": no_full_wait, "sf-column": sf_column, "oob-global": oob_global}


def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1] not in DEFECTS:
        print(f"usage: ptx_defects.py {{{'|'.join(DEFECTS)}}} < in.ptx > out.ptx", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(DEFECTS[sys.argv[1]](sys.stdin.read()))
    except NothingToPlant as e:
        print(f"ptx_defects.py {sys.argv[1]}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
