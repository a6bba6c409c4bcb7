"""The launch gaps of both machine descriptions are the ones measured in the board's protocol
(calibration/launch_gap.py, tools/data/h200_launch_gap_2026-11-28.json), and a peer without PDL moved by exactly
the gap's change when re-simulated."""

import json
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


def test_a_peer_without_pdl_moved_by_exactly_the_gaps_change():
    """Each steady call of an entry that launches without PDL is the launch gap plus its kernel: every gau-nernst
    point simulated both in T10 (gap 0.93 us; tools/data/gau_nernst_simulated_2026-11-28.txt) and in T11
    (tools/data/gau_nernst_simulated_2026-11-28_t11.json, fast_lean.py's figures) moved by the gap's change."""
    t10 = fast_lean.recorded("gau_nernst_simulated_2026-11-28.txt")
    t11 = {(r["version"], r["benchmark"]): r["simulated"]["board_us"]
           for r in json.loads((DATA / "gau_nernst_simulated_2026-11-28_t11.json").read_text())}
    both = sorted(set(t10) & set(t11))
    assert len(both) >= 28, both
    for key in both:
        assert t11[key] - t10[key] == pytest.approx(B200.launch_gap_us - 0.93, abs=0.011), key
    used = [r for r in fast_lean.rows() if r["peer"] == "gau-nernst"]
    assert len(used) == 40 and all(r["simulated"] == t11[(r["version"], r["benchmark"])] for r in used)


@pytest.mark.long
@pytest.mark.skipif(not GPU, reason="needs a GPU")
def test_on_a_gpu_the_pdl_launch_follows_sooner(tmp_path):
    out = tmp_path / "gaps.json"
    subprocess.run([sys.executable, str(ROOT / "calibration" / "launch_gap.py"), "--ctas", "8", "--spin-cycles",
                    "40000", "--repeats", "3", "--out", str(out)], check=True, timeout=600)
    rows = {r["form"]: r for r in json.loads(out.read_text())}
    assert 0 < rows["pdl"]["gap_median_us"] < rows["plain"]["gap_median_us"] < 10
