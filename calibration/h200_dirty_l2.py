"""What a dirty L2 costs a read: the board and FlashInfer's benchmark both flush L2 by WRITING a large buffer
(the board a `torch.randn`, FlashInfer's `bench_kineto` an 8 GB `zero_()`), so a timed kernel starts with
L2 full of dirty lines, and each line its misses allocate first writes a dirty victim back to HBM.

For sizes S from 4 MB to 1 GB this times a read-only kernel (`x.sum()` over fp32) and a write-only one
(`x.zero_()`), CUDA events, median of `--repeats`, after each of two flushes of a 1 GiB buffer: "clean"
reads it (L2 left full of clean lines), "dirty" zero-fills it (L2 left full of dirty lines). The difference is the write-backs' cost: it should grow
with S while the read still evicts the flush's lines and stop growing once S passes what L2 held dirty.
Prints a table and, with --json, keeps the rows (tools/data/).

    python calibration/h200_dirty_l2.py [--json FILE] [--repeats 15]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

SIZES_MB = [4, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 128, 192, 256, 512, 1024]
FLUSH_BYTES = 1 << 30


def timed(op, flush, repeats: int) -> float:
    """Median microseconds of `op()` right after `flush()`."""
    times = []
    for _ in range(repeats):
        flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        op()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="keep the rows here")
    parser.add_argument("--repeats", type=int, default=15)
    options = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("h200_dirty_l2.py: needs a CUDA GPU")
    flush_buffer = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device="cuda").normal_()
    flushes = {"clean": lambda: flush_buffer.sum(), "dirty": lambda: flush_buffer.zero_()}
    props = torch.cuda.get_device_properties(0)
    rows = []
    print(f"{props.name}, L2 {props.L2_cache_size / 2**20:.0f} MiB; fp32, median of {options.repeats}")
    print(f"{'op':>5} {'MB':>5} {'clean us':>9} {'dirty us':>9} {'extra us':>9} {'clean TB/s':>10} {'dirty TB/s':>10}")
    for mb in SIZES_MB:
        x = torch.randn(mb * 2**20 // 4, device="cuda")
        nbytes = x.numel() * 4
        for name, op in (("read", x.sum), ("write", x.zero_)):
            op()  # one launch before timing: the kernel's own setup
            times = {mode: timed(op, flush, options.repeats) for mode, flush in flushes.items()}
            rows.append({"op": name, "mb": mb, "bytes": nbytes, "clean_us": times["clean"],
                         "dirty_us": times["dirty"]})
            print(f"{name:>5} {mb:5d} {times['clean']:9.2f} {times['dirty']:9.2f} "
                  f"{times['dirty'] - times['clean']:9.2f} {nbytes / times['clean'] / 1e6:10.2f} "
                  f"{nbytes / times['dirty'] / 1e6:10.2f}")
        del x
    if options.json:
        with open(options.json, "w") as out:
            json.dump({"device": props.name, "l2_bytes": props.L2_cache_size, "torch": torch.__version__,
                       "repeats": options.repeats, "rows": rows}, out, indent=1)


if __name__ == "__main__":
    main()
