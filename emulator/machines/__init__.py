"""GPUs as data (STYLE.md section 5, after Accel-Sim's one config file per tested GPU): every constant the
timed mode (clock.py) uses, with its unit, its source and a tag saying how it is known.

Tags and source keys are those of ../shared/MACHINE-FACTS.md:
- **M**: the cited source measured it on that GPU;
- **S**: vendor specification or device property;
- **H**: measured for this project on an H200 (../shared/h200-microbench/);
- **E**: an estimate: derived from other figures, or another GPU's figure used as a proxy; the note says how;
- **F**: fitted to measured kernel times (a fit names the cases it used; the others are held out).

Times are in SM clock cycles at the description's `clock_ghz` unless the unit says otherwise. Code never
hard-codes a latency: clock.py reads every figure from here by name.
"""

from __future__ import annotations

from dataclasses import dataclass

TAGS = {"M": "measured (cited source)", "S": "specification", "H": "measured on the project's H200",
        "E": "estimate", "F": "fitted to kernel times"}


@dataclass(frozen=True)
class Constant:
    value: float
    unit: str
    tag: str
    source: str

    def __post_init__(self):
        if self.tag not in TAGS:
            raise ValueError(f"tag {self.tag!r}: one of {sorted(TAGS)}")


class Machine:
    """One GPU: a name, its architecture and its constants by name (`machine.sm_count`...)."""

    def __init__(self, name: str, arch: str, constants: dict):
        self.name = name
        self.arch = arch
        self.constants = dict(constants)

    def __getattr__(self, key):
        try:
            value = self.constants[key].value
        except KeyError:
            raise AttributeError(f"{self.name} has no constant {key!r}") from None
        self.__dict__[key] = value  # read on every instruction by the clock: an attribute from now on
        return value

    def replace(self, note: str, **values) -> "Machine":
        """A variant with some values changed (tests, what-if runs): each changed one tagged E with `note`."""
        constants = dict(self.constants)
        for key, value in values.items():
            old = constants[key]
            constants[key] = Constant(value, old.unit, "E", f"{note} (was {old.value:g}, {old.tag})")
        return Machine(f"{self.name} ({note})", self.arch, constants)

    def us(self, cycles: float) -> float:
        return cycles / (self.clock_ghz * 1e3)

    def cycles(self, us: float) -> float:
        return us * self.clock_ghz * 1e3

    def by_tag(self, tag: str) -> list:
        return [name for name, c in self.constants.items() if c.tag == tag]

    def table(self) -> str:
        """Markdown: every constant, its value, unit, tag and source."""
        rows = ["| constant | value | unit | tag | source |", "| --- | --- | --- | --- | --- |"]
        rows += [f"| {k} | {c.value:g} | {c.unit} | {c.tag} | {c.source} |" for k, c in self.constants.items()]
        return "\n".join(rows)


def load(name) -> Machine:
    """'b200' or 'h200' (or an architecture: 'sm_100a', 'sm_90a'); a Machine is returned as it is."""
    if isinstance(name, Machine):
        return name
    key = {"sm_100a": "b200", "sm_90a": "h200"}.get(name.lower(), name.lower())
    if key == "b200":
        from .b200 import B200
        return B200
    if key == "h200":
        from .h200 import H200
        return H200
    raise ValueError(f"machine {name!r}: b200 or h200")
