"""The published B200 times (tools/data/published_b200_times.csv, loaded by calibration/published.py): the file
parses, every row has a source, a runner and a host-blocking verdict, each board version has its four benchmarks,
the transcription reproduces the peers' own geomeans and the figures the repository already holds (FlashInfer's
points, tools/b200_model.py's calibration rows), and the fit subset is at most a third of the points."""

import math

import pytest

import published
import validate_timing

ROWS = published.load_published()
VERSIONS = published.by_version(ROWS)
HEADER = "".join(line for line in published.PUBLISHED_CSV.read_text(encoding="utf-8").splitlines(True)
                 if line.startswith("#"))

# The geomean column of gau-nernst's README (dcf43d7), typed from the README apart from the four times.
GAU_README_GEOMEANS = {
    "v1": 18.36, "v1b": 17.93, "v1c": 17.94, "v2": 15.97, "v2b": 15.79, "v2c": 15.54, "v2d": 15.71, "v2e": 15.45,
    "v4": 17.09, "v5": 15.11, "v5c": 15.42, "v5e": 13.51, "v5f": 13.52, "v5g": 13.37, "v6": 13.17, "v6b": 13.11,
    "v6c": 13.18,
}


def test_the_file_parses_with_its_columns_and_a_header():
    assert ROWS and all(tuple(row) == published.COLUMNS for row in ROWS)
    assert HEADER.startswith("# Published B200 times")
    for word in ("Runners and clocks", "Fit subset", "Already seen"):
        assert word in HEADER


@pytest.mark.parametrize("field", ["source", "runner", "clock_note", "host_blocks", "code", "subset"])
def test_every_row_says_where_it_comes_from(field):
    assert all(row[field].strip() for row in ROWS), field


def test_every_figure_is_a_positive_time_and_a_known_verdict():
    for row in ROWS:
        assert 0 < row["published_us"] < 1000, row
        assert row["best_us"] is None or 0 < row["best_us"] <= row["published_us"], row
        assert row["host_blocks"].split(":")[0].split(" (")[0] in ("no", "yes", "unknown", "n/a"), row
        assert row["subset"] in published.SUBSETS, row


def test_each_board_version_has_its_four_benchmarks_and_one_subset():
    board = {key: rows for key, rows in VERSIONS.items() if rows[0]["benchmark"] is not None}
    assert len(board) >= 11
    for key, rows in board.items():
        assert sorted(row["benchmark"] for row in rows) == [1, 2, 3, 4], key
        assert len({row["subset"] for row in rows}) == 1, key
        assert len({(row["parent"], row["change"], row["source"], row["runner"]) for row in rows}) == 1, key


def test_gau_nernsts_ladder_is_complete_and_reproduces_his_geomeans():
    gau = {version: rows for (peer, version), rows in VERSIONS.items() if peer == "gau-nernst"}
    assert set(gau) == set(GAU_README_GEOMEANS)
    for version, rows in gau.items():
        mean = published.geomean(row["published_us"] for row in rows)
        assert math.isclose(mean, GAU_README_GEOMEANS[version], abs_tol=0.006), (version, mean)


def test_flashinfers_points_are_the_ones_validate_timing_simulates():
    points = [rows[0] for (peer, _), rows in VERSIONS.items() if peer == "flashinfer"]
    assert len(points) == len(validate_timing.FLASHINFER_ANCHORS)
    for number, (row, (g, m, n, k, us, source)) in enumerate(zip(points, validate_timing.FLASHINFER_ANCHORS), 1):
        assert row["version"] == f"P{number}"
        assert row["shape"] == f"G={g} m~{m} N={n} K={k}"
        assert row["published_us"] == us
        assert f"pull/{source.split('#')[-1]}" in row["source"]


def test_the_analytical_models_calibration_rows_match():
    import b200_model

    names = {"gau-nernst v6b": ("gau-nernst", "v6b"), "Nareg V14": ("Nareg", "sub_v6"),
             "Nareg V16": ("Nareg", "sub_v6_2"), "Nareg V17": ("Nareg", "sub_v6_2_3"),
             "Nareg descoverlap": ("Nareg", "sub_v6_2_descoverlap")}
    for row in b200_model.CALIBRATION:
        ours = {r["benchmark"]: r["published_us"] for r in VERSIONS[names[row.family]]}
        assert ours[row.benchmark] == row.measured_us, row


def test_the_fit_subset_is_at_most_a_third_and_blocks_nothing():
    fit = [row for row in ROWS if row["subset"] == "fit"]
    assert 0 < len(fit) <= len(ROWS) / 3
    assert all(row["host_blocks"].startswith(("no", "n/a")) for row in fit)
    assert all(row["subset"] != "fit" for row in ROWS if row["host_blocks"].startswith("unknown"))
