"""The instruction table: importing this package registers every handler (warp.INSTRUCTIONS), one module
per family of the ISA."""

from . import alu, memory_ops, sync_ops  # noqa: F401
