"""A timed run's picture: one row per warp role of a few chosen workers, coloured by state, in the manner
of Nsight Systems' or Perfetto's track view (STYLE.md section 5).

The clock (clock.py) reports to a `Timeline` what each warp did over time (issuing, or waiting on which
barrier) and what each CTA's asynchronous units had in flight (TMA loads, the tensor pipe's operations);
only the CTAs chosen (`workers`: indices into the grid's CTA list) of the call chosen (`call`: the
stream's call, from 0; the clock records that call's first launch) are kept. `draw(path)` writes a PNG
(matplotlib, imported only then); with `trace`, every instruction the chosen CTAs' warps issue is kept too,
and `write_trace(path)` lists them per warp with the cycles since the warp's previous one (a stall shows as a
large gap; a blocking wait's on the instruction after it), guarded-off ones too (`instructions=` counts them).
Of every CTA it keeps four landmarks, from which `phases()` says where a
worker's time goes: start-up (CTA start to its first TMA load), first load (to its first tensor-pipe
operation), mainloop (to its last one's end) and tail (to the CTA's last instruction: the last epilogue).
"""

from __future__ import annotations

from collections import defaultdict


class Timeline:
    def __init__(self, workers=(0, 1), call: int = 0, trace: bool = False):
        self.workers = set(workers)
        self.call = call  # which call of the stream the clock reports (its first launch)
        # with `trace`: (CTA index, warp, time its next instruction may issue, pc) per instruction issued
        self.trace = [] if trace else None
        self.ctas: dict = {}  # cta -> its index in the grid
        self.rows: dict = defaultdict(list)  # (cta index, row name) -> [(start, end, state)]
        self.machine = None
        # every CTA: [start, first TMA load issued, first tensor-pipe op's start, last one's end, last issue's end]
        self.landmarks: dict = {}

    def _index(self, cta):
        """The CTA's index if it is drawn, else None."""
        index = self.ctas.get(cta)
        if index is None:
            index = self.ctas[cta] = cta.grid.ctas.index(cta)
            self.machine = cta.grid.clock.machine
            self.landmarks[index] = [None, None, None, None, None]
        return index if index in self.workers else None

    def _mark(self, cta, slot: int, time: float, latest: bool = False) -> None:
        self._index(cta)
        marks = self.landmarks[self.ctas[cta]]
        if marks[slot] is None or (time > marks[slot] if latest else time < marks[slot]):
            marks[slot] = time

    def _add(self, key, start: float, end: float, state: str) -> None:
        intervals = self.rows[key]
        if intervals and intervals[-1][2] == state and start - intervals[-1][1] <= 1.0:
            intervals[-1] = (intervals[-1][0], max(end, intervals[-1][1]), state)
        else:
            intervals.append((start, end, state))

    def _us(self, cycles: float) -> float:
        """Cycles of the recorded machine in us (as they are before any CTA was recorded)."""
        return self.machine.us(cycles) if self.machine is not None else cycles

    def _warp_row(self, warp) -> str:
        return f"w{warp.warp_id} {warp.role}"

    # ---------------------------------------------------------------- reports from the clock
    def issue(self, warp, start: float, end: float) -> None:
        self._mark(warp.cta, 0, start)
        self._mark(warp.cta, 4, end, latest=True)
        index = self._index(warp.cta)
        if index is not None and end > start:
            self._add((index, self._warp_row(warp)), start, end, "issuing")

    def traced(self, warp) -> bool:
        """Whether the clock reports each instruction of `warp` (a chosen CTA's, with `trace`)."""
        return self.trace is not None and self._index(warp.cta) is not None

    def instruction(self, warp, pc: int, end: float) -> None:
        self.trace.append((self.ctas[warp.cta], warp, end, pc))

    def wait(self, warp, start: float, end: float, wait) -> None:
        index = self._index(warp.cta)
        if index is None or end <= start:
            return
        barrier = getattr(wait, "barrier", None)
        address = getattr(barrier, "address", None)
        if address is not None:
            name = warp.cta.grid.barrier_names.get(address & 0xFFFFFF) or f"mbarrier 0x{address & 0xFFFFFF:x}"
        else:
            name = type(wait).__name__.replace("Wait", "").lower() or "wait"
        self._add((index, self._warp_row(warp)), start, end, f"wait {name}")

    def unit(self, op, start: float, end: float) -> None:
        if op.cta is None:
            return
        if op.unit == "tma.load":
            self._mark(op.cta, 1, start)
        index = self._index(op.cta)
        if index is not None:
            self.rows[(index, op.unit.split(".")[0] + " in flight")].append((start, end, op.unit))

    def tensor(self, cta, unit: str, start: float, end: float) -> None:
        self._mark(cta, 2, start)
        self._mark(cta, 3, end, latest=True)
        index = self._index(cta)
        if index is not None:
            self.rows[(index, "tensor pipe")].append((start, end, unit))

    # ---------------------------------------------------------------- where the time goes
    def phases(self) -> dict:
        """Over the CTAs that ran tensor-pipe operations (a cta_group::2 pair's leader), the median and
        the largest of each phase in us: start-up, first load, mainloop, tail (module docstring); their
        sum is the CTA's span. `ctas`: how many did, of how many launched."""
        us = self._us
        spans = {"start-up": [], "first load": [], "mainloop": [], "tail": []}
        for start, load, first, last, end in self.landmarks.values():
            if first is None or load is None:
                continue
            for name, (a, b) in zip(spans, ((start, load), (load, first), (first, last), (last, end))):
                spans[name].append(us(max(b, a)) - us(a))
        out = {"ctas": f"{len(spans['tail'])} of {len(self.landmarks)}"}
        for name, values in spans.items():
            if values:
                values.sort()
                out[name] = (round(values[len(values) // 2], 3), round(values[-1], 3))
        return out

    def write_trace(self, path) -> int:
        """The trace as text, warp by warp in issue order: the time the warp could issue again after each
        instruction (us and cycles), the cycles since its previous instruction's, and the PTX. Returns the
        number of instructions written."""
        us = self._us
        by_warp = defaultdict(list)
        for index, warp, end, pc in self.trace:
            by_warp[(index, warp.warp_id)].append((warp, end, pc))
        lines = ["# us after issue, cycle after issue, +cycles since the warp's previous instruction, CTA, warp, "
                 "[pc] PTX"]
        for (index, warp_id), issued in sorted(by_warp.items()):
            previous = None
            for warp, end, pc in issued:
                gap = "" if previous is None else f"+{end - previous:.0f}"
                previous = end
                instruction = warp.program.kernel.instructions[pc]
                text = instruction.text
                if instruction.guard is not None:  # the PTX line's own guard (a scoped register's name less its scope)
                    register, negated = instruction.guard
                    text = f"@{'!' if negated else ''}{register.split('@')[0]} {text}"
                lines.append(f"{us(end):10.4f} {end:10.0f} {gap:>7} CTA {index} w{warp_id} {warp.role:9} [{pc}] {text}")
        with open(path, "w") as out:
            out.write("\n".join(lines) + "\n")
        return len(self.trace)

    def span(self) -> tuple | None:
        """(first CTA start, last CTA end) of the recorded launch, in us of the stream's clock; None before
        any CTA of it ran."""
        us = self._us
        starts = [marks[0] for marks in self.landmarks.values() if marks[0] is not None]
        ends = [marks[4] for marks in self.landmarks.values() if marks[4] is not None]
        return (us(min(starts)), us(max(ends))) if starts and ends else None

    # ---------------------------------------------------------------- picture
    def draw(self, path, title: str = "") -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        keys = sorted(self.rows, key=lambda k: (k[0], not k[1].startswith("w"), k[1]))
        states = sorted({s for k in keys for _, _, s in self.rows[k]})
        fixed = {"issuing": "#2ca02c", "tma.load": "#1f77b4", "tcgen05.mma": "#ff7f0e", "tcgen05.cp": "#9467bd",
                 "tcgen05.commit": "#8c564b", "tma.store": "#17becf"}
        # waits in greys, pinks and yellows: never the colours of issuing or of a unit at work
        palette = ["#c7c7c7", "#f7b6d2", "#dbdb8d", "#7f7f7f", "#e377c2", "#bcbd22", "#ffbb78", "#c5b0d5",
                   "#9edae5", "#c49c94", "#525252", "#fdd0a2"]
        colours = {s: palette[i % len(palette)] for i, s in enumerate(s for s in states if s not in fixed)}
        colours.update({s: c for s, c in fixed.items() if s in states})
        us = self._us
        fig, ax = plt.subplots(figsize=(16, 0.42 * len(keys) + 2.0))
        for row, key in enumerate(keys):
            intervals = self.rows[key]
            spans = [(us(a), max(us(b) - us(a), 1e-4)) for a, b, _ in intervals]
            ax.broken_barh(spans, (row - 0.4, 0.8), facecolors=[colours[s] for _, _, s in intervals],
                           linewidth=0, alpha=0.85 if "flight" in key[1] or key[1] == "tensor pipe" else 1.0)
        ax.set_yticks(range(len(keys)))
        ax.set_yticklabels([f"CTA {k[0]}: {k[1]}" for k in keys], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("simulated time (us)")
        ax.set_title(title, fontsize=9)
        handles = [plt.Rectangle((0, 0), 1, 1, color=colours[s]) for s in colours]
        ax.legend(handles, list(colours), fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
