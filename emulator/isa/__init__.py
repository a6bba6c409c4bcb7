"""The instruction table: importing this package registers every handler (warp.INSTRUCTIONS), one module
per family of the ISA."""

from . import alu, atomics, bulk_copy, launch_control, memory_ops, sync_ops, tensor_core, tensormap, warpgroup  # noqa: F401
