"""The timed emulator against the one B200 measurement of a kernel's cold start: [SA-repo]'s tma2d_latency
(SemiAnalysisAI/microbench-blackwell@9a068d8, tma2d_latency/tma2d_lat_results.csv; ../shared/MACHINE-FACTS.md
Table 1 section 3). There, 148 CTAs (one per SM: the maximal dynamic shared memory) each have thread 0 stamp
%clock64, issue one 2-D TMA load of its own tile (128 fp32 columns x H rows, rows of 512 bytes, no swizzle),
wait on its mbarrier and stamp again, right after a memset of one L2's size (L2 dirty) and each launch on a
region of memory no launch read before; the figure is the median over 10 launches of the median over the CTAs.

This program is the same experiment written for the emulator (our own PTX, not theirs): one launch per tile
size, the dirty L2 of a flush before every call (`calls_per_flush` 1, as `--flush-every 1`), timing only; it
prints the simulated median, minimum and maximum over the CTAs beside the measured ones, all in the
description's cycles (the measured ones converted from the run's 1.965 GHz through nanoseconds: DRAM's time is
in nanoseconds).

    python calibration/b200_cold_tma.py [--set NAME=VALUE ...]

What it showed (2026-11-28, tools/data/b200_cold_tma_2026-11-28.txt): the description is 1.2-2.4x fast at the
median and 1.5-2.7x at the slowest CTA, at every size; the smallest loads (4 KiB, 0.6 MB in all) already take
the slowest CTA 1.75 us against the clock's 0.6, so a kernel whose CTAs all wait for their first load starts
about a microsecond later than simulated on every call. emulator/DESIGN.md, "Timed mode", "How good it is".
"""

from __future__ import annotations

import argparse
import struct
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from emulator.launch import StreamLaunch, execute_stream  # noqa: E402
from emulator.machines import load  # noqa: E402
from emulator.memory import GlobalMemory  # noqa: E402
from emulator.tma import TensorMapDataType, encode_tiled  # noqa: E402

SMS = 148
MEASURED_GHZ = 1.965  # the run's SM clock (MACHINE-FACTS.md Table 1 section 1: [SA-repo]'s runs)
# tile bytes -> measured cycles at MEASURED_GHZ: (median of medians, minimum, maximum) (tma2d_lat_results.csv)
MEASURED = {512: (1993, 1974, 3383), 1024: (1413, 1521, 3466), 2048: (1606, 927, 2474), 4096: (1845, 1066, 3446),
            8192: (2088, 1627, 3222), 16384: (3590, 2452, 4791), 32768: (4586, 3138, 5594),
            65536: (5405, 3808, 7477), 131072: (9559, 7321, 13460)}
SHARED = 232448  # [SA-repo]'s MAX_SMEM_BYTES: one CTA per SM

PTX = """.version 8.8
.target sm_100a
.address_size 64
.extern .shared .align 1024 .b8 smem[];
.visible .entry cold(
	.param .u64 cold_param_0
)
.reqntid 32, 1, 1
{{
	.reg .pred %p<4>;
	.reg .b32 %r<16>;
	.reg .b64 %rd<8>;
	ld.param.u64 %rd1, [cold_param_0];
	mov.u32 %r2, %tid.x;
	setp.ne.s32 %p1, %r2, 0;
	@%p1 bra $L_done;
	mov.u32 %r10, %ctaid.x;
	mul.lo.u32 %r11, %r10, {rows};
	mov.u32 %r7, 0;
	mov.u32 %r20, smem;
	mbarrier.init.shared.b64 [%r20], 1;
	add.u32 %r21, %r20, 1024;
	mov.u32 %r8, %clock;
	mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r20], {nbytes};
	cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r21], [%rd1, {{%r7, %r11}}], [%r20];
$L_wait:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r20], 0;
	@!%p2 bra $L_wait;
	mov.u32 %r9, %clock;
	sub.s32 %r3, %r9, %r8;
	mul.wide.u32 %rd6, %r10, 4;
	add.s64 %rd7, %rd1, %rd6;
	st.global.u32 [%rd7+128], %r3;
$L_done:
	ret;
}}
"""


def simulate(tile_bytes: int, machine) -> np.ndarray:
    """Each CTA's simulated cycles from its stamp before the TMA load to its stamp after the wait."""
    rows = tile_bytes // 512
    raw = np.zeros(4096 + SMS * tile_bytes + 1024, np.uint8)
    skip = -raw.ctypes.data % 1024
    buffer = raw[skip:skip + 4096 + SMS * tile_bytes]  # the map, the stamps, then the tiles
    tensor = buffer.ctypes.data + 4096
    buffer[:128] = np.frombuffer(encode_tiled(TensorMapDataType.FLOAT32, 2, tensor, (128, SMS * rows), (512,),
                                              (128, rows), (1, 1)), np.uint8)
    memory = GlobalMemory()
    memory.register(buffer.ctypes.data, buffer.nbytes, "buffer")
    launch = SimpleNamespace(kernel_name="cold", grid=(SMS, 1, 1), block=(32, 1, 1), cluster=(1, 1, 1),
                             shared_bytes=SHARED, max_dynamic_shared=SHARED, attributes={},
                             params=(struct.pack("<Q", buffer.ctypes.data),))
    execute_stream([StreamLaunch(launch, PTX.format(rows=rows, nbytes=tile_bytes), 0)], memory, mode="timed",
                   machine=machine, step_budget=5_000_000, timing_only=True, calls_per_flush=1)
    return np.sort(buffer[128:128 + 4 * SMS].view(np.int32).astype(np.int64))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    machine = load("b200")
    for setting in args.set:
        name, value = setting.split("=", 1)
        machine = machine.replace("what-if", **{name: float(value)})
    scale = machine.clock_ghz / MEASURED_GHZ
    print("tile bytes | simulated median / min / max | measured median / min / max (description's cycles) | "
          "median and max, simulated / measured")
    for tile, measured in MEASURED.items():
        cycles = simulate(tile, machine)
        med, low, high = np.median(cycles), cycles[0], cycles[-1]
        m_med, m_low, m_high = (x * scale for x in measured)
        print(f"{tile:>10} | {med:6.0f} / {low:6.0f} / {high:6.0f} | {m_med:6.0f} / {m_low:6.0f} / {m_high:6.0f} | "
              f"{med / m_med:.2f}, {high / m_high:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
