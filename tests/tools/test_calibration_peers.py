"""calibration/validate_timing.py --peers: the calibration table of the peers' rows and the ladder check, on saved
rows (no emulation): an error per row, held-out RMS apart from the fit subset, and every ladder step whose
published geomean moves by more than 3% ranked in the simulated direction or named WRONG."""
import validate_timing as vt


def _row(version, parent, benchmark, published, simulated, subset="held-out"):
    return {"case": f"gau-nernst {version} benchmark {benchmark}", "config": version, "measured_us": published,
            "peer": "gau-nernst", "version": version, "parent": parent, "benchmark": benchmark, "subset": subset,
            "simulated": {"board_us": simulated}}


def test_a_step_is_right_when_both_move_the_same_way_and_wrong_otherwise():
    rows = [_row("v1", "", b, 10.0, 8.0, "fit") for b in (1, 2, 3, 4)]
    rows += [_row("v2", "v1", b, 9.0, 7.0) for b in (1, 2, 3, 4)]          # published -10%, simulated -12.5%
    rows += [_row("v3", "(README: from v2)", b, 8.0, 7.5) for b in (1, 2, 3, 4)]  # published -11%, simulated +7%
    rows += [_row("v4", "v3", b, 7.95, 6.0) for b in (1, 2, 3, 4)]         # published -0.6%: not a step
    steps = vt.ladder_check(rows)
    assert [(s[1], s[2], s[5]) for s in steps] == [("v1", "v2", True), ("v2", "v3", False)]


def test_a_version_missing_a_benchmark_is_no_step(capsys):
    rows = [_row("v1", "", b, 10.0, 8.0) for b in (1, 2, 3, 4)] + [_row("v2", "v1", b, 5.0, 4.0) for b in (1, 2, 3)]
    assert vt.ladder_check(rows) == []
    vt.peers_report(rows, markdown=False)
    out = capsys.readouterr().out
    assert "held-out: 7 rows, RMS error 20.0%, worst -20.0%" in out and "ladder" not in out
