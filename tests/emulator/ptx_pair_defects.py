"""Defects in a 2-CTA kernel's tensor-memory management, planted in its PTX text (--ptx-filter):

    python tests/emulator/ptx_pair_defects.py DEFECT < kernel.ptx > defective.ptx

DEFECT (each fails loudly when the PTX has nothing to change):
  odd-cta-skips-alloc  the odd CTA of each pair branches over its `tcgen05.alloc.cta_group::2`: the even
                       CTA's warp is left alone at the pair's allocation (ISA 9.7.16.5: both take part)
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


DEFECTS = {"odd-cta-skips-alloc": odd_cta_skips_alloc}


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
