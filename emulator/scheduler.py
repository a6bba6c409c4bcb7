"""The warp scheduler: cooperative, every warp of every CTA of the grid interleaved. Three schedulers share
the functional core, as gem5's atomic and timing modes share its memory interface: eager and adversarial
(here), and timed (clock.py: a discrete-event clock that decides when each warp issues and each
asynchronous operation completes).

Each warp runs until it blocks (a `Wait`: an incomplete mbarrier phase, a `bar.sync` or
`barrier.cluster.wait` not complete, a poll at a fixed point) or yields (`nanosleep`, a poll that found
nothing new: machine.Yield, taken up again once no other warp can run) or its time slice ends; then another
runs. Eager mode runs ready warps round-robin with long slices; adversarial mode picks the next warp and the
slice length at random from the run's seed.

Every cluster of the grid is placed at once, except in a kernel that uses cluster launch control
(`clusterlaunchcontrol.try_cancel`, isa/launch_control.py), whose clusters run in waves as on a GPU too small
for the grid: eager mode places the first half (in launch order, at least one), adversarial mode a number drawn
from the seed (1 to all); when a cluster's last warp exits the next waiting one is placed (eager: in launch
order; adversarial: at random); when every placed warp is blocked and nothing is pending, one more is placed
(a B200 would hold more than the wave) before a hang is declared. A waiting cluster is what a try_cancel may
cancel (machine.Grid.try_cancel); a cancelled one is never placed.

When no warp can run, pending asynchronous work is delivered (async_ops.py). If none is left, warps blocked
in `mbarrier.try_wait` are woken once (a try_wait may return false after a time limit, ISA 9.7.13.15.16,
and the code around it may do other work); if that changes nothing, every live warp is blocked for good:
a hang, reported per CTA and warp with the role, the PTX line and the state of the barrier it waits on
(or the memory it polls: machine.PollWait, a poll that nothing will ever answer). A warp that spins without
blocking, yielding or reaching a fixed point ends the run at the step budget, with the same report.
"""

from __future__ import annotations

from collections import deque

from .async_ops import deliver_any, drain
from .errors import EmulatorError, HangError

EAGER_SLICE = 4096
ADVERSARIAL_MAX_SLICE = 48


def run_grid(grid, warps, *, step_budget: int) -> None:
    """Run one grid to completion in eager or adversarial mode (the timed mode runs its stream of grids in
    clock.Clock.run)."""
    adversarial = grid.mode == "adversarial"
    rng = grid.rng
    waiting = deque()  # clusters not placed yet (a kernel with cluster launch control runs in waves)
    if uses_launch_control(grid) and len(grid.clusters) > 1:
        count = len(grid.clusters)
        placed = int(rng.integers(1, count + 1)) if adversarial else max(1, count // 2)
        waiting.extend(grid.clusters[placed:])
        warps = [w for cluster in grid.clusters[:placed] for cta in cluster.ctas for w in cta.warps]
    for cluster in grid.clusters:
        cluster.started = cluster not in waiting
    ready = deque(warps)
    if adversarial:
        ready = deque(warps[i] for i in rng.permutation(len(warps)))

    def place_next() -> bool:
        """Place a waiting cluster (not cancelled): its warps join the ready ones."""
        for cluster in [c for c in waiting if c.cancelled]:
            waiting.remove(cluster)
        if not waiting:
            return False
        cluster = waiting[int(rng.integers(len(waiting)))] if adversarial else waiting[0]
        waiting.remove(cluster)
        cluster.started = True
        ready.extend(w for cta in cluster.ctas for w in cta.warps)
        return True

    blocked = []
    woken_at = None  # grid.progress when blocked try_waits were last woken
    while True:
        if not ready:
            still = []
            for w in blocked:
                (ready if w.wait.ready() else still).append(w)
            blocked = still
            if not ready:
                if deliver_any(grid):
                    continue
                if place_next():
                    continue
                if not blocked:
                    break
                if woken_at != grid.progress:
                    woken_at = grid.progress
                    still = []
                    for w in blocked:
                        (ready if w.wait.spurious_ok else still).append(w)
                    blocked = still
                    if ready:
                        continue
                raise HangError("hang", "every live warp is blocked and no asynchronous work is pending",
                                hang_report(grid, blocked))
        if adversarial:
            k = int(rng.integers(len(ready)))
            ready.rotate(-k)
            warp = ready.popleft()
            budget = int(rng.integers(1, ADVERSARIAL_MAX_SLICE + 1))
        else:
            warp = ready.popleft()
            budget = EAGER_SLICE
        if warp.done:  # its cluster was cancelled (clusterlaunchcontrol.try_cancel)
            continue
        warp.wait = None
        grid.instructions += warp.run(budget)
        if grid.instructions > step_budget:
            live = [w for cta in grid.ctas for w in cta.warps if not w.done]
            raise HangError("budget", f"step budget of {step_budget} warp instructions ran out",
                            hang_report(grid, live))
        if warp.done:
            if waiting and all(w.done for cta in warp.cta.cluster.ctas for w in cta.warps):
                place_next()  # its cluster exited: the next one takes its place
            continue
        if warp.wait is None:
            ready.append(warp)
        else:
            blocked.append(warp)
    drain(grid)
    finish(grid)


def uses_launch_control(grid) -> bool:
    """Does the grid's kernel issue `clusterlaunchcontrol.try_cancel`?"""
    return any(i.opcode.startswith("clusterlaunchcontrol.try_cancel") for i in grid.kernel.instructions)


def finish(grid) -> None:
    """Checks at grid completion: tensor memory freed, no tcgen05.ld left unwaited."""
    for cta in grid.ctas:
        live = cta._tmem.live() if cta._tmem is not None else None
        if live:
            raise EmulatorError("tmem", f"{cta.label} exited with tensor memory still allocated: {live}")


def hang_report(grid, warps) -> str:
    lines = []
    for cta in grid.ctas:
        rows = [w for w in cta.warps if w in warps]
        if not rows:
            continue
        lines.append(f"{cta.label}:")
        for w in rows:
            instr = w.program.kernel.instructions[w.last_index]
            state = w.wait.describe() if w.wait is not None else "runnable (step budget ran out)"
            lines.append(f"  warp {w.warp_id} ({w.role}) at PTX line {instr.line} `{instr.text}`: {state}")
    return "\n".join(lines)
