"""The published B200 times the timed emulator is calibrated against: tools/data/published_b200_times.csv
(gau-nernst's ladder, teelaitila's final, Nareg's calibration designs, FlashInfer's points), one row per
(peer, version, benchmark), with each figure's source, runner, clock note, whether the peer's call blocks the
host, and the proposed fit subset. The file's header says how it was gathered and why the subset is what it is.

    python calibration/published.py [--subset fit|held-out|excluded] [--peer NAME]

prints the figures as a table: one line per version, the four benchmarks side by side (FlashInfer: one line
per point, its shape instead).
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED_CSV = ROOT / "tools" / "data" / "published_b200_times.csv"
COLUMNS = ("peer", "version", "parent", "change", "benchmark", "published_us", "source", "runner", "clock_note",
           "host_blocks", "host_work", "code", "best_us", "shape", "subset")
SUBSETS = ("fit", "held-out", "excluded")


def load_published(path: Path = PUBLISHED_CSV) -> list[dict]:
    """The file's rows as dicts (COLUMNS), in file order: `benchmark` an int 1-4 or None (FlashInfer's points),
    `published_us` a float, `best_us` a float or None; every other field a string. Lines starting with '#'
    are the header comment."""
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(line for line in handle if not line.startswith("#"))
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise ValueError(f"{path}: columns {reader.fieldnames}, expected {list(COLUMNS)}")
        rows = []
        for row in reader:
            row["benchmark"] = int(row["benchmark"]) if row["benchmark"] else None
            row["published_us"] = float(row["published_us"])
            row["best_us"] = float(row["best_us"]) if row["best_us"] else None
            rows.append(row)
    return rows


def by_version(rows: list[dict]) -> dict:
    """(peer, version) -> that version's rows, in file order."""
    versions: dict = {}
    for row in rows:
        versions.setdefault((row["peer"], row["version"]), []).append(row)
    return versions


def geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Print the published B200 times of the calibration set, one line per version "
                    "(tools/data/published_b200_times.csv; its header gives sources, runners and the fit subset).")
    parser.add_argument("--subset", choices=SUBSETS, help="only the rows of this subset")
    parser.add_argument("--peer", help="only this peer's rows (gau-nernst, teelaitila, Nareg, flashinfer)")
    args = parser.parse_args()
    rows = [row for row in load_published()
            if (args.subset is None or row["subset"] == args.subset) and (args.peer is None or row["peer"] == args.peer)]
    print(f"{'peer':<11} {'version':<21} {'1':>6} {'2':>6} {'3':>6} {'4':>6} {'geomean':>8}  {'subset':<9} "
          f"{'blocks':<7} runner")
    for (peer, version), group in by_version(rows).items():
        first = group[0]
        blocks = first["host_blocks"].split(":")[0].split(" (")[0]
        if first["benchmark"] is None:
            times = f"{first['published_us']:>6g} {first['shape']:<29}"
        else:
            times_by_bench = {row["benchmark"]: row["published_us"] for row in group}
            cells = " ".join(f"{times_by_bench[b]:>6g}" if b in times_by_bench else f"{'':>6}" for b in (1, 2, 3, 4))
            mean = f"{geomean(times_by_bench.values()):8.2f}" if len(times_by_bench) == 4 else f"{'':>8}"
            times = f"{cells} {mean}"
        print(f"{peer:<11} {version:<21} {times}  {first['subset']:<9} {blocks:<7} {first['runner']}")


if __name__ == "__main__":
    main()
