"""Warpgroup MMA instructions of sm_90a: wgmma.mma_async, wgmma.fence, wgmma.commit_group, wgmma.wait_group.

PTX ISA 9.7.15 (wgmma): 9.7.15.5.2 wgmma.mma_async, 9.7.15.7.1 wgmma.fence, 9.7.15.7.2 wgmma.commit_group,
9.7.15.7.3 wgmma.wait_group; 9.7.15.4 "asynchronous warpgroup level matrix multiply-accumulate
operations". What one instruction computes is emulator/wgmma.py's; this module decides who executes what
and when.

- **The warpgroup's pipe.** The four warps of a warpgroup (warps 4i .. 4i + 3) issue each wgmma.mma_async
  together (`.sync.aligned`); here each warp runs on its own, so the k-th wgmma.mma_async each warp issues
  joins the warpgroup's k-th `WgmmaOp` (a warp issuing another shape there is an error). An operation's
  result rows belong to one warp each (D rows 16 w .. 16 w + 15 depend on A rows 16 w .. and B only), so
  each warp's part executes on its own: it reads that warp's A registers and B from shared memory and
  writes its accumulator registers.
- **Groups.** `wgmma.commit_group` closes, per warp, the operations issued since the previous commit into a
  wgmma-group (an empty group when there are none); `wgmma.wait_group N` returns once at most N of the
  warp's groups are pending, executing the warp's parts of the older ones.
- **When.** Eager mode executes each part at issue. Adversarial mode executes it as late as the ISA allows:
  at the `wgmma.wait_group` that retires its group. A kernel that reads its accumulator, rewrites its A
  registers or lets its B stage be refilled before that wait computes with the wrong values. Parts still
  pending when a warp exits are never executed (their results could not be observed).
- **Timed mode.** Each wgmma.mma_async enters the SM's tensor pipe once, when the last of the four warps
  issues it (the operation is the warpgroup's: its rows come from all four warps' registers, so it cannot
  start before the slowest warp has issued it); each warp's `wgmma.commit_group` becomes an asynchronous
  operation (unit 'wgmma.commit') that the clock completes when everything issued to the pipe before it
  has completed (a commit whose operations have not all entered the pipe is issued to the clock when the
  last of them enters), and `wgmma.wait_group N` blocks the
  warp until the groups it retires are complete (their arithmetic runs at that instruction, as in
  adversarial mode: only the warp itself can read the registers it writes). The timed mode's fast path
  (`timing_only`) times each operation the same and skips its arithmetic: the accumulators keep their
  values, as tcgen05.mma's tensor memory does there.
- `wgmma.fence` orders the warp's register accesses before later wgmma.mma_async: registers are read at
  execution here, so it has no effect and its absence is not caught.

Each WgmmaOp carries what a timed scheduler needs to time it (DESIGN.md, "sm_90a"): unit 'wgmma', shape
(M, N, K), dtypes (A, B, accumulator), the CTA's label, the warpgroup, its sequence number in the
warpgroup, the issuing PTX line, and per warp the group it was committed in.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .. import wgmma
from ..async_ops import AsyncOp, issue
from ..errors import EmulatorError
from ..machine import AsyncOpsWait
from ..warp import instruction


@dataclass
class WgmmaOp:
    """One warpgroup MMA instruction: its description and, per warp of the warpgroup, the part it runs."""

    unit: str
    shape: tuple  # (M, N, K)
    dtypes: tuple  # (A, B, accumulator)
    cta: str
    warpgroup: int
    sequence: int  # issue order within the warpgroup
    issuer: str  # PTX line
    parts: dict = field(default_factory=dict)  # warp index in the warpgroup -> its part, until it runs
    groups: dict = field(default_factory=dict)  # warp index in the warpgroup -> its wgmma-group number
    executed: set = field(default_factory=set)  # warps whose part has run
    joined: int = 0  # warps that have issued it (timed mode: it enters the tensor pipe at the fourth)
    commits: list = field(default_factory=list)  # timed mode: commits waiting for it to enter the pipe

    def execute(self, warp_in_group: int) -> bool:
        """Run one warp's part, once (eager mode ran it at issue; its wait_group finds it done). True when
        this call ran the last of the four parts."""
        if warp_in_group in self.executed:
            return False
        self.executed.add(warp_in_group)
        self.parts.pop(warp_in_group)()
        return len(self.executed) == 4


class WarpgroupPipe:
    """The wgmma operations of one warpgroup of a CTA and each warp's view of them (issued, open, groups)."""

    def __init__(self, cta, index: int):
        self.cta = cta
        self.index = index
        self.ops: dict[int, WgmmaOp] = {}  # in flight: issued by a warp, not yet executed by all four
        self.issued = [0, 0, 0, 0]  # per warp: wgmma.mma_async issued so far
        self.open = [[] for _ in range(4)]  # per warp: issued since its last commit
        # per warp: committed groups not yet waited for, oldest first, each (its ops, its completion in timed
        # mode or None)
        self.groups = [deque() for _ in range(4)]
        self.committed = [0, 0, 0, 0]  # per warp: groups committed so far

    def join(self, warp_in_group: int, shape, dtypes, issuer: str) -> WgmmaOp:
        k = self.issued[warp_in_group]
        self.issued[warp_in_group] += 1
        op = self.ops.get(k)
        if op is None:
            op = self.ops[k] = WgmmaOp("wgmma", shape, dtypes, self.cta.label, self.index, k, issuer)
        if (op.shape, op.dtypes) != (shape, dtypes):
            raise EmulatorError("aligned", f"wgmma.mma_async #{k} of warpgroup {self.index}: this warp issues "
                                f"{shape} {dtypes}, another warp of the warpgroup {op.shape} {op.dtypes} "
                                f"({op.issuer})")
        op.joined += 1
        grid = self.cta.grid
        if op.joined == 4 and grid.clock is not None:  # timed mode: the op occupies the SM's tensor pipe once
            grid.clock.tensor_op(self.cta, {"unit": op.unit, "n": shape[1]})
            for completion in op.commits:
                issue(grid, completion)
            op.commits = []
        self.open[warp_in_group].append(op)
        return op

    def commit(self, warp_in_group: int, issuer: str) -> None:
        number = self.committed[warp_in_group]
        self.committed[warp_in_group] += 1
        for op in self.open[warp_in_group]:
            op.groups[warp_in_group] = number
        completion = None
        grid = self.cta.grid
        if grid.clock is not None:
            completion = AsyncOp(lambda: None, issuer=issuer, unit="wgmma.commit", cta=self.cta)
            last = self.open[warp_in_group][-1] if self.open[warp_in_group] else None
            if last is not None and last.joined < 4:
                last.commits.append(completion)  # issued when `last` enters the pipe (join)
            else:
                issue(grid, completion)
        self.groups[warp_in_group].append((self.open[warp_in_group], completion))
        self.open[warp_in_group] = []

    def execute(self, op: WgmmaOp, warp_in_group: int) -> None:
        if op.execute(warp_in_group):
            del self.ops[op.sequence]

    def wait(self, warp_in_group: int, pending: int) -> list:
        """Retire all but `pending` of the warp's groups; the completions (timed mode) still in flight."""
        groups = self.groups[warp_in_group]
        in_flight = []
        while len(groups) > pending:
            ops, completion = groups.popleft()
            for op in ops:
                self.execute(op, warp_in_group)
            if completion is not None and not completion.delivered:
                in_flight.append(completion)
        return in_flight



def pipe_of(w) -> tuple[WarpgroupPipe, int]:
    """The warpgroup pipe of warp `w` and the warp's index in its warpgroup."""
    pipes = w.cta.__dict__.setdefault("warpgroups", {})
    index = w.warp_id // 4
    pipe = pipes.get(index)
    if pipe is None:
        pipe = pipes[index] = WarpgroupPipe(w.cta, index)
    return pipe, w.warp_id % 4


def _whole_warp(w, mask, what: str) -> None:
    if mask is w.alive and w.full:  # the live lanes themselves, all 32
        return
    if not np.array_equal(mask, w.alive) or not w.alive.all():
        raise EmulatorError("aligned", f"{what} needs all 32 lanes of the warp (warpgroup-wide)")


def _no_arithmetic() -> None:
    """A wgmma part in the timed mode's fast path (`timing_only`): its accumulator registers are left as they
    were (the kernel's outputs are not computed; its control flow reads none of them)."""


@instruction("wgmma.mma_async")
def _mma_async(instr, program):
    """wgmma.mma_async.sync.aligned.m64nNk16.f32.f16.f16 d, a, b-desc, scale-d, imm-scale-a, imm-scale-b,
    imm-trans-b (A in registers; 9.7.15.5.2): D = A B (+ D when scale-d), A and B negated by a scale of -1."""
    mods = instr.modifiers
    shape_text = next((m for m in mods if m.startswith("m64n")), None)
    if shape_text is None or "sp" in mods:
        raise EmulatorError("unimplemented", f"{instr.opcode} (only dense m64nNk16 is modelled)")
    m, n, k = (int(x) for x in shape_text[1:].replace("n", " ").replace("k", " ").split())
    dtypes = tuple(x for x in mods if x in ("f32", "f16", "bf16", "e4m3", "e5m2", "s8", "u8", "tf32", "s32"))
    if k != wgmma.K or dtypes != ("f32", "f16", "f16"):
        raise EmulatorError("unimplemented", f"{instr.opcode} (only .f32.f16.f16, K = 16)")
    ops = instr.operands
    if ops[1].kind != "vec":
        raise EmulatorError("unimplemented", f"{instr.opcode} with A in shared memory (a descriptor)")
    if len(ops) != 7:
        raise EmulatorError("unimplemented", f"{instr.opcode}: {len(ops)} operands")
    d_items, a_items = ops[0].items, ops[1].items
    if len(d_items) != n // 2 or len(a_items) != 4:
        raise EmulatorError("unimplemented", f"{instr.opcode}: {len(d_items)} accumulator and {len(a_items)} A "
                            f"registers (m64n{n}k16 has {n // 2} and 4)")
    scale_a, scale_b, trans_b = (op.value for op in ops[4:7])
    if trans_b != 0 or scale_a not in (1, -1) or scale_b not in (1, -1):
        raise EmulatorError("unimplemented", f"{instr.opcode}: imm-scale-a {scale_a}, imm-scale-b {scale_b}, "
                            f"imm-trans-b {trans_b} (MN-major B is not modelled)")
    d_readers = [program.reader(r, "f32") for r in d_items]
    d_writers = [program.writer(r, "f32") for r in d_items]
    a_readers = [program.reader(r, "b32") for r in a_items]
    b_desc = program.reader(ops[2], "u64")
    scale_d = program.reader(ops[3], "pred")
    where = program.where(instr.index)

    def handler(w, mask):
        _whole_warp(w, mask, "wgmma.mma_async")
        desc = b_desc(w)
        accumulate = scale_d(w)
        if (desc != desc[0]).any() or (accumulate != accumulate[0]).any():
            raise EmulatorError("aligned", "wgmma.mma_async: the lanes give different B descriptors or scale-d")
        descriptor = wgmma.WgmmaDescriptor.decode(int(desc[0]))
        pipe, warp_in_group = pipe_of(w)
        op = pipe.join(warp_in_group, (m, n, k), dtypes, where)

        def part(w=w, descriptor=descriptor, accumulate=bool(accumulate[0])):
            addresses = wgmma.operand_addresses(descriptor, n, 2 * k)
            lo, hi = int(addresses.min()), int(addresses.max())
            window = w.cta.shared.read(lo, hi - lo + 1)
            b = window[addresses - lo].view(np.float16).astype(np.float64)  # (N, 16)
            a_words = np.stack([r(w) for r in a_readers], axis=1)
            acc = np.stack([r(w) for r in d_readers], axis=1) if accumulate else None
            result = wgmma.mma_f16_rows(a_words, b, acc, scale_a == -1, scale_b == -1)
            for i, write in enumerate(d_writers):
                write(w, result[:, i], w.alive)

        # the clock's fast path (timing only) times the operation without its arithmetic, as tcgen05.mma's
        op.parts[warp_in_group] = _no_arithmetic if w.cta.grid.timing_only else part
        if w.cta.grid.mode == "eager":
            pipe.execute(op, warp_in_group)

    return handler


@instruction("wgmma.commit_group")
def _commit_group(instr, program):
    """wgmma.commit_group.sync.aligned (9.7.15.7.2): the warp's uncommitted wgmma.mma_async become a group."""
    where = program.where(instr.index)

    def handler(w, mask):
        _whole_warp(w, mask, "wgmma.commit_group")
        pipe, warp_in_group = pipe_of(w)
        pipe.commit(warp_in_group, where)

    return handler


@instruction("wgmma.wait_group")
def _wait_group(instr, program):
    """wgmma.wait_group.sync.aligned N (9.7.15.7.3): wait until at most N of the warp's groups are pending."""
    pending = program.reader(instr.operands[0], "u32")

    def handler(w, mask):
        _whole_warp(w, mask, "wgmma.wait_group")
        pipe, warp_in_group = pipe_of(w)
        in_flight = pipe.wait(warp_in_group, int(pending(w)[0]))
        return ("wait", AsyncOpsWait("wgmma.wait_group", in_flight, "wgmma-group(s)")) if in_flight else None

    return handler


@instruction("wgmma.fence")
def _fence(instr, program):
    """wgmma.fence.sync.aligned (9.7.15.7.1): no effect here (module docstring)."""

    def handler(w, mask):
        _whole_warp(w, mask, "wgmma.fence")

    return handler
