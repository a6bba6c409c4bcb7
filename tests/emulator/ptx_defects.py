"""Plant one defect in a kernel's PTX text: the negative controls of the emulator (--ptx-filter).

    python tests/emulator/ptx_defects.py DEFECT < kernel.ptx > defective.ptx

DEFECT (each fails loudly when the PTX has nothing to change):
  expect-tx          every `mbarrier.arrive.expect_tx` announces 16 bytes more than the copies deliver
  no-empty-wait      the TMA producer never waits for a stage's empty barrier: its waits (peeks and spin
                     loops) followed by a TMA load are replaced by "the phase is complete"
  no-full-wait       the MMA warp never waits for a stage's full barrier: its waits followed by a
                     tcgen05.mma or tcgen05.cp (the first use of the stage) are replaced likewise
  no-acc-full-wait   the epilogue never waits for the accumulator-full barrier: its waits followed by a
                     tcgen05.ld are replaced likewise
  early-acc-release  the epilogue arrives on the accumulator-empty barrier (the elected arrive after its
                     last tcgen05.ld) right after its accumulator-full wait, before its tcgen05.ld's
  no-proxy-fence     every `fence.proxy.async` is removed (e.g. the one between the epilogue's st.shared of
                     C and the TMA store that reads it)
  no-mbarrier-init-fence  every `fence.mbarrier_init` is removed
  no-store-read-wait every `cp.async.bulk.wait_group.read N` with N > 0 is removed: the C staging buffer is
                     rewritten before the TMA store that reads it is known to have read it
  no-exit-store-wait every `cp.async.bulk.wait_group{.read} 0` is removed: the CTA may exit, and its shared
                     memory end, while a TMA store still reads the C staging buffer
  sf-column          the scale-factor-A tensor-memory address of every tcgen05.mma is one column further
  oob-global         the first instruction of the kernel body loads 4 bytes from global address 16
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


WAIT = re.compile(r"mbarrier\.try_wait\.parity\S*\s+(P1|%p\d+),\s*\[[^\]]+\],\s*[^;]+;")
NEXT_USE = re.compile(r"\b(tcgen05\.mma|tcgen05\.cp|cp\.async\.bulk\.tensor|tcgen05\.ld|mbarrier\.try_wait)\b")


def _waits_before(lines, uses) -> list:
    """Line numbers of the waits whose next synchronizing or tensor instruction is one of `uses`: a spin
    loop (`try_wait P1` in inline asm) directly, a peek (`try_wait %pN`) through the spin its predicate
    skips (`@%pN bra` just before the spin)."""
    def next_use(i):
        for j in range(i + 1, len(lines)):
            m = NEXT_USE.search(lines[j])
            if m:
                return m.group(1)
        return None

    spins = [i for i, line in enumerate(lines) if (m := WAIT.search(line)) and m.group(1) == "P1"]
    chosen = [i for i in spins if next_use(i) in uses]
    guards = set()
    for i in chosen:
        for j in range(i - 1, max(i - 12, -1), -1):
            m = re.match(r"\s*@(%p\d+) bra", lines[j])
            if m:
                guards.add(m.group(1))
                break
    peeks = [i for i, line in enumerate(lines) if (m := WAIT.search(line)) and m.group(1) in guards]
    return sorted(chosen + peeks)


def _skip_waits(ptx: str, uses, what: str) -> str:
    lines = ptx.split("\n")
    sites = _waits_before(lines, uses)
    if not sites:
        raise NothingToPlant(f"no wait before {what}")
    for i in sites:
        m = WAIT.search(lines[i])
        lines[i] = lines[i][:m.start()] + f"setp.eq.s32 {m.group(1)}, 0, 0;" + lines[i][m.end():]
    return "\n".join(lines)


def no_empty_wait(ptx: str) -> str:
    return _skip_waits(ptx, ("cp.async.bulk.tensor",), "a TMA load")


def no_full_wait(ptx: str) -> str:
    return _skip_waits(ptx, ("tcgen05.mma", "tcgen05.cp"), "a tcgen05.mma or tcgen05.cp")


def no_acc_full_wait(ptx: str) -> str:
    return _skip_waits(ptx, ("tcgen05.ld",), "a tcgen05.ld")


def early_acc_release(ptx: str) -> str:
    """Move the elected accumulator-empty arrive (from its `elect.sync` to the label after the arrive) up to
    just after the accumulator-full wait that precedes the epilogue's tcgen05.ld's."""
    lines = ptx.split("\n")
    loads = [i for i, line in enumerate(lines) if "tcgen05.ld." in line]
    if not loads:
        raise NothingToPlant("no tcgen05.ld")
    arrive = next((i for i in range(loads[-1], len(lines)) if "mbarrier.arrive." in lines[i]
                   and "expect_tx" not in lines[i]), None)
    if arrive is None or not re.match(r"\$L__BB\w+:", lines[arrive + 1].strip()):
        raise NothingToPlant("no elected mbarrier.arrive after the last tcgen05.ld")
    elect = next((i for i in range(arrive, loads[-1], -1) if "elect.sync" in lines[i]), None)
    wait = next((i for i in range(arrive, 0, -1) if WAIT.search(lines[i])), None)
    if elect is None or wait is None or wait > loads[-1]:
        raise NothingToPlant("no elect.sync before the arrive, or no wait before the tcgen05.ld's")
    end_asm = next(i for i in range(wait, len(lines)) if "// end inline asm" in lines[i])
    block = lines[elect:arrive + 2]
    rest = lines[:elect] + lines[arrive + 2:]
    return "\n".join(rest[:end_asm + 1] + block + rest[end_asm + 1:])


def _remove(ptx: str, pattern: str, what: str) -> str:
    out, removed = [], 0
    for line in ptx.split("\n"):
        if re.search(pattern, line):
            removed += 1
        else:
            out.append(line)
    if not removed:
        raise NothingToPlant(f"no {what}")
    return "\n".join(out)


def no_proxy_fence(ptx: str) -> str:
    return _remove(ptx, r"^\s*fence\.proxy\.async\b", "fence.proxy.async")


def no_mbarrier_init_fence(ptx: str) -> str:
    return _remove(ptx, r"^\s*fence\.mbarrier_init\b", "fence.mbarrier_init")


def no_store_read_wait(ptx: str) -> str:
    return _remove(ptx, r"^\s*cp\.async\.bulk\.wait_group\.read\s+[1-9]\d*;", "cp.async.bulk.wait_group.read N > 0")


def no_exit_store_wait(ptx: str) -> str:
    return _remove(ptx, r"^\s*cp\.async\.bulk\.wait_group(\.read)?\s+0;", "cp.async.bulk.wait_group{.read} 0")


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


DEFECTS = {"expect-tx": expect_tx, "no-empty-wait": no_empty_wait, "no-full-wait": no_full_wait,
           "no-acc-full-wait": no_acc_full_wait, "early-acc-release": early_acc_release,
           "no-proxy-fence": no_proxy_fence, "no-mbarrier-init-fence": no_mbarrier_init_fence,
           "no-store-read-wait": no_store_read_wait, "no-exit-store-wait": no_exit_store_wait,
           "sf-column": sf_column, "oob-global": oob_global}


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
