"""Memory spaces: global, shared (per CTA, addressed across the cluster), param.

PTX ISA 5.1 ("State Spaces") and 6.4.1 (generic addressing):
- **global**: the process's own memory. The stub driver serves device allocations from host memory and
  the caller's CPU tensors stand in for device tensors, so a global address is a host address. Every
  access is checked against the regions the launch registered (tensors, driver allocations): an address
  outside all of them is an error, never a read of whatever lies there.
- **shared**: one byte array per CTA. A shared address carries the CTA's rank in the cluster in bits
  24 and up, the offset inside that CTA's window below (the layout sm_100 uses: NVIDIA's 2-CTA code
  derives the peer CTA's barrier by clearing bit 24, `and.b32 ..., 0xFEFFFFF8`; the ISA says only that
  the shared::cta window is contained in the shared::cluster window, 5.1.5). `.shared::cta` accesses must
  name the executing CTA; `.shared::cluster` ones may name any CTA of the cluster (`mapa`, 9.7.9.21).
  The first 1 KiB of the window is reserved (sm_90 and later reserve it for the system); static `.shared`
  variables follow, then the dynamic array, each at its declared alignment.
- **param**: the launch's parameter buffer laid out as the entry declares it; `ld.param` reads it, and
  `cvta.param` (ISA 9.7.9.19) maps a param address to a generic one in a window of its own, so that a
  TMA descriptor passed as a kernel parameter can be named by a generic address.
- Generic addresses (ISA 6.4.1) resolve to global, or to the shared/param windows below.
Not modelled: local memory, constant banks, texture/surface, caching and the memory consistency model
(accesses take effect in program order of the interleaving the scheduler chose).
"""

from __future__ import annotations

import bisect
import ctypes

import numpy as np

from .errors import EmulatorError

SHARED_RESERVED_BYTES = 1024
CTA_RANK_SHIFT = 24
OFFSET_MASK = (1 << CTA_RANK_SHIFT) - 1
# Generic windows for shared and param memory: above every canonical user-space host address.
GENERIC_SHARED_BASE = 0xFE00_0000_0000_0000
GENERIC_PARAM_BASE = 0xFF00_0000_0000_0000
WINDOW_MASK = 0xFF00_0000_0000_0000


class GlobalMemory:
    """Host memory registered by the launch: (address, size) regions, each with a NumPy byte view. `writes`
    counts the writes made through it, so that a warp polling memory can tell that nothing changed
    (machine.PollWait)."""

    def __init__(self):
        self._starts: list[int] = []
        self._regions: list[tuple[int, int, np.ndarray]] = []
        self.writes = 0

    def register(self, address: int, size: int, name: str = "") -> None:
        if size <= 0:
            return
        view = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(address))
        i = bisect.bisect_left(self._starts, address)
        self._starts.insert(i, address)
        self._regions.insert(i, (address, size, view, name))

    def region(self, address: int, nbytes: int):
        i = bisect.bisect_right(self._starts, address) - 1
        if i >= 0:
            start, size, view, _ = self._regions[i]
            if address + nbytes <= start + size:
                return start, view
        return None

    def describe(self, address: int) -> str:
        i = bisect.bisect_right(self._starts, address) - 1
        if i < 0:
            return "below every registered region"
        start, size, _, name = self._regions[i]
        return f"{address - start - size} bytes past the end of {name or 'a region'} [0x{start:x}, +{size})" \
            if address >= start + size else f"inside {name or 'a region'} at +{address - start}"

    def read(self, address: int, nbytes: int) -> np.ndarray:
        r = self.region(address, nbytes)
        if r is None:
            raise EmulatorError("global-bounds", f"read of {nbytes} B at 0x{address:x}: {self.describe(address)}")
        start, view = r
        return view[address - start:address - start + nbytes].copy()

    def write(self, address: int, data: np.ndarray) -> None:
        data = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        r = self.region(address, data.size)
        if r is None:
            raise EmulatorError("global-bounds",
                                f"write of {data.size} B at 0x{address:x}: {self.describe(address)}")
        start, view = r
        view[address - start:address - start + data.size] = data
        self.writes += 1

    def lanes_read(self, addresses: np.ndarray, nbytes: int) -> np.ndarray:
        """Per lane, `nbytes` bytes at each address: (lanes, nbytes) uint8."""
        out = np.empty((addresses.size, nbytes), np.uint8)
        lo, hi = int(addresses.min()), int(addresses.max())
        r = self.region(lo, hi - lo + nbytes)
        if r is not None:  # all lanes in one region: one gather
            start, view = r
            idx = (addresses - start).astype(np.int64)[:, None] + np.arange(nbytes)
            return view[idx]
        for k, a in enumerate(addresses):
            out[k] = self.read(int(a), nbytes)
        return out

    def lanes_write(self, addresses: np.ndarray, data: np.ndarray) -> None:
        """Per lane, write the row data[k] (uint8) at addresses[k], in lane order."""
        self.writes += 1
        nbytes = data.shape[1]
        lo, hi = int(addresses.min()), int(addresses.max())
        r = self.region(lo, hi - lo + nbytes)
        if r is not None:
            start, view = r
            idx = (addresses - start).astype(np.int64)[:, None] + np.arange(nbytes)
            view[idx] = data
            return
        for k, a in enumerate(addresses):
            self.write(int(a), data[k])


class SharedMemory:
    """One CTA's shared memory window: reserved bytes, static variables, then the dynamic array. `writes`
    counts the writes to it (see GlobalMemory)."""

    def __init__(self, rank: int, variables, dynamic_bytes: int):
        self.rank = rank
        self.symbols: dict[str, int] = {}
        offset = SHARED_RESERVED_BYTES
        for var in variables:
            offset = (offset + var.align - 1) // var.align * var.align
            self.symbols[var.name] = (rank << CTA_RANK_SHIFT) | offset
            offset += dynamic_bytes if var.extern else var.size
        self.size = offset
        self.data = np.zeros(offset, np.uint8)
        self.writes = 0

    def check(self, offset: int, nbytes: int, what: str) -> None:
        if offset < SHARED_RESERVED_BYTES or offset + nbytes > self.size:
            raise EmulatorError("shared-bounds",
                                f"{what} of {nbytes} B at shared offset 0x{offset:x} of CTA rank {self.rank} "
                                f"(valid: 0x{SHARED_RESERVED_BYTES:x}..0x{self.size:x})")

    def read(self, offset: int, nbytes: int) -> np.ndarray:
        self.check(offset, nbytes, "read")
        return self.data[offset:offset + nbytes].copy()

    def write(self, offset: int, data: np.ndarray) -> None:
        data = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        self.check(offset, data.size, "write")
        self.data[offset:offset + data.size] = data
        self.writes += 1


def split_shared(address: int) -> tuple[int, int]:
    """(CTA rank in the cluster, offset in that CTA's window) of a shared::cluster address."""
    return address >> CTA_RANK_SHIFT, address & OFFSET_MASK


class ParamMemory:
    """The kernel's parameter buffer, laid out as its `.entry` declares."""

    def __init__(self, kernel, params: tuple):
        self.data = np.zeros(max(kernel.param_bytes, 1), np.uint8)
        if len(params) != len(kernel.params):
            raise EmulatorError("param", f"launch has {len(params)} parameters, the entry declares "
                                f"{len(kernel.params)}")
        for p, raw in zip(kernel.params, params):
            if len(raw) != p.size:
                raise EmulatorError("param", f"parameter {p.name}: {len(raw)} B given, {p.size} B declared")
            self.data[p.offset:p.offset + p.size] = np.frombuffer(raw, np.uint8)
        self.offsets = {p.name: p.offset for p in kernel.params}

    def read(self, offset: int, nbytes: int) -> np.ndarray:
        if offset < 0 or offset + nbytes > self.data.size:
            raise EmulatorError("param", f"read of {nbytes} B at param offset {offset} "
                                f"(buffer: {self.data.size} B)")
        return self.data[offset:offset + nbytes].copy()
