"""Defects in a 2-CTA kernel's tensor-memory management, planted in its PTX text (--ptx-filter):

    python tests/emulator/ptx_pair_defects.py DEFECT < kernel.ptx > defective.ptx

DEFECT (each fails loudly when the PTX has nothing to change):
  odd-cta-skips-alloc  the odd CTA of each pair branches over its `tcgen05.alloc.cta_group::2`: the even
                       CTA's warp is left alone at the pair's allocation (ISA 9.7.16.5: both take part)
  dealloc-barrier-reinit  the allocator warp initializes the teardown mbarrier (the one the peer CTA arrives
                       on before the pair's dealloc) again right after its `tcgen05.alloc.cta_group::2`, with
                       its fence.mbarrier_init: DSL 4.3.5's TmemAllocator did so just before the alloc. The
                       pair's allocation orders nothing between the two CTAs (ISA 9.7.16.5: the first warp
                       "could block", and a program relying on it is non-deterministic), so with no other
                       chain (a worker of two tiles or fewer) the peer's arrive is unordered with the init
  no-dealloc-wait      the allocator warp no longer waits on the teardown mbarrier before its
                       `tcgen05.dealloc.cta_group::2`: the pair's deallocation may free the peer CTA's tensor
                       memory while the peer's epilogue still reads it (ISA 9.7.16.5, Table 47: before the
                       dealloc, no concurrent tensor memory access from the peer CTA)
"""

from __future__ import annotations

import re
import sys


class NothingToPlant(Exception):
    pass


def odd_cta_skips_alloc(ptx: str) -> str:
    m = re.search(r"\n(\s*)(tcgen05\.alloc\.cta_group::2\S*\s+[^;]+;)", ptx)
    if not m:
        raise NothingToPlant("no tcgen05.alloc.cta_group::2")
    indent, alloc = m.group(1), m.group(2)
    guarded = (f"\n{indent}{{\n{indent}.reg .b32 %rank_planted;\n{indent}.reg .pred %odd_planted;\n"
               f"{indent}mov.u32 %rank_planted, %cluster_ctarank;\n"
               f"{indent}and.b32 %rank_planted, %rank_planted, 1;\n"
               f"{indent}setp.ne.u32 %odd_planted, %rank_planted, 0;\n"
               f"{indent}@%odd_planted bra $L__planted_skip_alloc;\n{indent}{alloc}\n"
               f"$L__planted_skip_alloc:\n{indent}}}")
    return ptx[:m.start()] + guarded + ptx[m.end():]


SPIN = re.compile(r"mbarrier\.try_wait\.parity\S*\s+(P1),\s*\[(%r\d+)\],\s*[^;]+;")


def _teardown_wait(lines: list) -> tuple:
    """(line of the spin wait just before the pair's dealloc, the shared offset of its mbarrier from
    __dynamic_shmem__0): the teardown barrier."""
    dealloc = next((i for i, line in enumerate(lines) if "tcgen05.dealloc.cta_group::2" in line), None)
    if dealloc is None:
        raise NothingToPlant("no tcgen05.dealloc.cta_group::2")
    wait = next((i for i in range(dealloc, max(dealloc - 16, -1), -1) if SPIN.search(lines[i])), None)
    if wait is None:
        raise NothingToPlant("no spin wait just before the tcgen05.dealloc.cta_group::2")
    reg = re.escape(SPIN.search(lines[wait]).group(2))
    for j in range(wait - 1, max(wait - 40, -1), -1):
        m = re.match(rf"\s*add\.s32\s+{reg},\s*(%r\d+),\s*(\d+);", lines[j])
        if m:
            base = re.escape(m.group(1))
            if any(re.match(rf"\s*mov\.u32\s+{base},\s*__dynamic_shmem__0;", lines[k])
                   for k in range(j - 1, max(j - 8, -1), -1)):
                return wait, int(m.group(2))
    raise NothingToPlant("the teardown wait's mbarrier is not __dynamic_shmem__0 + a constant")


def dealloc_barrier_reinit(ptx: str) -> str:
    lines = ptx.split("\n")
    _, offset = _teardown_wait(lines)
    init = re.search(rf"add\.s32\s+(%r\d+),\s*%r\d+,\s*{offset};\s*\n\s*mov\.b32\s+(%r\d+),\s*(\d+);\s*\n"
                     r"\s*mbarrier\.init\.shared\.b64\s+\[\1\],\s*\2;", ptx)
    if init is None:
        raise NothingToPlant(f"no mbarrier.init of the teardown barrier (__dynamic_shmem__0 + {offset})")
    alloc = next((i for i, line in enumerate(lines) if "tcgen05.alloc.cta_group::2" in line), None)
    if alloc is None:
        raise NothingToPlant("no tcgen05.alloc.cta_group::2")
    indent = re.match(r"\s*", lines[alloc]).group(0)
    lines[alloc + 1:alloc + 1] = [f"{indent}{{", f"{indent}.reg .b32 %planted<2>;",
                                  f"{indent}mov.u32 %planted0, __dynamic_shmem__0;",
                                  f"{indent}add.s32 %planted1, %planted0, {offset};",
                                  f"{indent}mbarrier.init.shared.b64 [%planted1], {init.group(3)};",
                                  f"{indent}fence.mbarrier_init.release.cluster;", f"{indent}}}"]
    return "\n".join(lines)


def no_dealloc_wait(ptx: str) -> str:
    lines = ptx.split("\n")
    wait, _ = _teardown_wait(lines)
    m = SPIN.search(lines[wait])
    lines[wait] = lines[wait][:m.start()] + "setp.eq.s32 P1, 0, 0;" + lines[wait][m.end():]
    return "\n".join(lines)


DEFECTS = {"odd-cta-skips-alloc": odd_cta_skips_alloc, "dealloc-barrier-reinit": dealloc_barrier_reinit,
           "no-dealloc-wait": no_dealloc_wait}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] not in DEFECTS:
        print(f"usage: ptx_pair_defects.py {{{','.join(DEFECTS)}}} < in.ptx > out.ptx", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(DEFECTS[argv[1]](sys.stdin.read()))
    except NothingToPlant as e:
        print(f"ptx_pair_defects.py {argv[1]}: nothing to plant: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
