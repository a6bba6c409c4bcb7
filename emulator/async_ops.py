"""Asynchronous work and when it completes: the two timing modes.

The TMA unit and the tensor core work asynchronously from the threads that issue to them (PTX ISA 9.7.9.25
`cp.async.bulk.tensor`, 9.7.16.x tcgen05 "asynchronous operations"); a kernel sees their completion only
through an mbarrier (complete-tx, or the arrive of `tcgen05.commit`) or `cp.async.bulk.wait_group`.
Each issued operation becomes an `AsyncOp`; the run's mode decides when it is delivered:

- **eager**: at issue. A correct kernel must pass; so must one that forgets a wait, which is why:
- **adversarial**: as late as the ISA allows, in a seeded random order. Pending work is delivered only when
  a warp observes a barrier it signals and finds the phase incomplete (`observe`, and then only some of it,
  at random), when every warp is blocked (`deliver_any`, one operation chosen at random), or when the
  grid ends. TMA loads read global memory and write shared memory at delivery; an MMA reads its
  shared-memory operands and tensor memory and writes its accumulator when the commit that tracks it is
  delivered (tensor-core operations of one CTA still execute in issue order, ISA 9.7.16.6 "pipelined
  instructions"); a TMA store reads shared memory when its bulk group is waited for.
  A kernel that reads a stage before its full barrier, or refills a stage before its empty barrier, then
  reads or writes the wrong bytes.
- **timed** (clock.py): when the unit that performs it would finish, from the machine description; the
  metadata each issue site gives (`unit`, `bytes`, `cta`, `key`, ...) is what the clock times it by.
"""

from __future__ import annotations


class AsyncOp:
    """One asynchronous operation: `deliver()` performs it (memory effects, then barrier signals).
    `barriers` are the mbarriers it signals, `issuer` the PTX line and warp that issued it, `agent` the race
    detector's record of who performs it (happens_before.Access; None when detection is off). The rest
    describes the work for the timed mode: `unit` ('tma.load', 'tma.store', 'tcgen05.commit', ...), `bytes`
    moved, the issuing `cta`, `key`, what identifies the bytes read (a TMA box: tensor map and
    coordinates; L2 hits are matched on it), and `tiled`: the bytes are a tensor box, rows at the tensor's
    strides rather than consecutive bytes (HBM streams those slower: clock.Clock._miss)."""

    def __init__(self, deliver, barriers=(), issuer: str = "", agent=None, *, unit: str = "", nbytes: int = 0,
                 cta=None, key=None, tiled: bool = False):
        self._deliver = deliver
        self.barriers = tuple(barriers)
        self.issuer = issuer
        self.agent = agent
        self.unit = unit
        self.bytes = nbytes
        self.cta = cta
        self.key = key
        self.tiled = tiled
        self.delivered = False

    def deliver(self, grid) -> None:
        if self.delivered:
            return
        self.delivered = True
        grid.progress += 1
        if self.agent is None:
            self._deliver()
        else:
            grid.trace.begin(self.agent)
            self._deliver()
            grid.trace.end()
        if grid.clock is not None:  # a warp may wait on this very operation (a bulk or wgmma group)
            grid.clock.wake(self)


def issue(grid, op: AsyncOp) -> None:
    if grid.mode == "eager":
        op.deliver(grid)
    elif grid.clock is not None:
        grid.clock.schedule(op)
    else:
        grid.pending.append(op)


def observe(grid, barrier) -> None:
    """A warp found `barrier`'s phase incomplete: adversarial mode may now deliver part of what signals it."""
    if grid.mode == "eager" or not grid.pending:
        return
    candidates = [op for op in grid.pending if barrier in op.barriers]
    if not candidates or grid.rng.random() < 0.5:
        return
    count = int(grid.rng.integers(1, len(candidates) + 1))
    for i in grid.rng.permutation(len(candidates))[:count]:
        candidates[i].deliver(grid)
    grid.pending = [op for op in grid.pending if not op.delivered]


def deliver_any(grid) -> bool:
    """Every warp is blocked: deliver one pending operation, chosen at random. False if none is left."""
    grid.pending = [op for op in grid.pending if not op.delivered]
    if not grid.pending:
        return False
    op = grid.pending.pop(int(grid.rng.integers(len(grid.pending))))
    op.deliver(grid)
    return True


def drain(grid) -> None:
    """The grid is ending: what is still in flight completes, in random order."""
    while deliver_any(grid):
        pass
