"""What the emulator reports: every error names the PTX line, the CTA and the warp where it happened."""

from __future__ import annotations


class EmulatorError(Exception):
    """A defect of the kernel under emulation (or an instruction the emulator does not implement).

    `kind` is a short category: 'unimplemented', 'global-bounds', 'shared-bounds', 'misaligned',
    'tmem', 'mbarrier', 'barrier', 'param', 'aligned', 'hang', 'budget', 'setup'."""

    def __init__(self, kind: str, message: str, where: str = ""):
        self.kind = kind
        self.message = message
        self.where = where
        super().__init__(f"{kind}: {message}" + (f" ({where})" if where else ""))


class UnimplementedInstruction(EmulatorError):
    def __init__(self, opcode: str, where: str = ""):
        super().__init__("unimplemented", f"instruction {opcode} is not implemented by the emulator", where)


class HangError(EmulatorError):
    """Every live warp is blocked and no asynchronous work is left to complete (or the step budget ran out).
    `report` is the per-CTA, per-warp text: role, PTX line, the barrier waited on and its state."""

    def __init__(self, kind: str, summary: str, report: str):
        super().__init__(kind, summary)
        self.report = report

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}\n{self.report}"
