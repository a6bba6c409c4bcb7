"""The launch gaps of both machine descriptions are the ones measured in the board's protocol
(calibration/launch_gap.py, tools/data/h200_launch_gap_2026-11-28.json), and calibration/fast_lean.py's shift of
the peers' T10 records by the changed gap is what a re-simulation gives."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fast_lean
from emulator.machines.b200 import B200
from emulator.machines.h200 import H200

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tools" / "data"
GPU = torch.cuda.is_available()


def _measured(form: str) -> float:
    """The full-grid, long-spin row's median gap: the regime the descriptions stand for (many CTAs, the host
    ahead of the GPU)."""
    rows = json.loads((DATA / "h200_launch_gap_2026-11-28.json").read_text())
    row = max((r for r in rows if r["form"] == form), key=lambda r: (r["ctas"], r["spin_cycles"]))
    return row["gap_median_us"]


def test_the_h200_description_carries_the_gaps_measured_in_the_boards_protocol():
    assert H200.launch_gap_us == pytest.approx(_measured("plain"), abs=0.01)
    assert H200.launch_gap_pdl_us == pytest.approx(_measured("pdl"), abs=0.01)


def test_the_b200_description_takes_the_h200s_gaps():
    assert (B200.launch_gap_us, B200.launch_gap_pdl_us) == (H200.launch_gap_us, H200.launch_gap_pdl_us)


def test_the_shifted_t10_records_equal_the_re_simulation_of_v6b():
    """fast_lean adds the gap's change to the T10 records of entries that launch without PDL; v6b was
    re-simulated in the new description (tools/data/board_mean_2026-11-28_gap.txt): the two agree."""
    text = (DATA / "board_mean_2026-11-28_gap.txt").read_text()
    simulated = {int(n): float(us) for n, us in
                 re.findall(r"^benchmark (\d) .* peer submission_v6b\.py: TIMED simulated ([\d.]+) us", text, re.M)}
    assert sorted(simulated) == [1, 2, 3, 4]
    shifted = {r["benchmark"]: r["simulated"] for r in fast_lean.rows() if r["version"] == "v6b"}
    assert shifted == pytest.approx(simulated, abs=0.011)


@pytest.mark.long
@pytest.mark.skipif(not GPU, reason="needs a GPU")
def test_on_a_gpu_the_pdl_launch_follows_sooner(tmp_path):
    out = tmp_path / "gaps.json"
    subprocess.run([sys.executable, str(ROOT / "calibration" / "launch_gap.py"), "--ctas", "8", "--spin-cycles",
                    "40000", "--repeats", "3", "--out", str(out)], check=True, timeout=600)
    rows = {r["form"]: r for r in json.loads(out.read_text())}
    assert 0 < rows["pdl"]["gap_median_us"] < rows["plain"]["gap_median_us"] < 10
