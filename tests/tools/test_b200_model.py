"""CPU tests of the B200 time model, tools/b200_model.py: it evaluates the kernel that ships (the
records of submission.sm100_schedule, the constants of submission.B200_MODEL), its calibration
claims and held-out error, its refit, the Hopper method check's predictor, and the docs' figures."""

import dataclasses
import io
import json
import math
import re
import subprocess
import sys
from contextlib import redirect_stdout
from dataclasses import replace
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import b200_model as model  # noqa: E402
import submission  # noqa: E402

BENCHES = model.load_benchmarks()
SHIPPED = submission.SM100_SHIPPED


def _tool(*args) -> str:
    """The tool's output, in this process (its leave-one-out refits are computed once)."""
    out = io.StringIO()
    with redirect_stdout(out):
        assert model.main(list(args)) == 0
    return out.getvalue()


@pytest.mark.parametrize("row", [r for r in model.CALIBRATION if r.claimed],
                         ids=lambda r: f"{r.family}-bench{r.benchmark}")
def test_claimed_calibration_rows_within_bound(row):
    error = model.predict_design(row.design, BENCHES[row.benchmark - 1].sizes).total_us / row.measured_us - 1
    assert abs(error) <= model.CLAIM_BOUND, f"{row.design.name} bench {row.benchmark}: {error:+.1%}"


def test_claims_cover_v6b_and_three_nareg_steps():
    claimed = {}
    for row in model.CALIBRATION:
        if row.claimed:
            claimed.setdefault(row.family, set()).add(row.benchmark)
    assert claimed.pop("gau-nernst v6b") == {1, 2, 3, 4}
    assert len(claimed) == 3 and all(name.startswith("Nareg") and b == {1, 2, 3, 4} for name, b in claimed.items())


def test_shipped_meets_the_issue():
    """Issue 15's done criterion: geomean <= 13.3 us as the tool prints it (to the hundredth: the
    192-token tiles of benchmark 1 add 0.1 us of modeled epilogue to its DRAM-bound time, 13.30
    against 13.29), benchmarks 3 and 4 on at least 60 pairs."""
    estimates = [model.predict_config(SHIPPED, b.sizes) for b in BENCHES]
    assert round(model.geomean(e.total_us for e in estimates), 2) <= 13.3
    assert all(e.workers == 74 for e in estimates)
    assert estimates[2].busy_workers >= 60 and estimates[3].busy_workers >= 60


def test_weight_block_jobs_leave_pairs_idle():
    """What the audit found at a1842eb: weight-block jobs keep 24 and 32 pairs busy on benchmarks 3
    and 4, the busiest running 3 tiles, for 16.14 / 9.15 us."""
    config = replace(SHIPPED, jobs="weight_blocks")
    bench3, bench4 = (model.predict_config(config, BENCHES[i].sizes) for i in (2, 3))
    assert (bench3.busy_workers, bench4.busy_workers, bench3.busiest_tiles) == (24, 32, 3)
    assert (round(bench3.total_us, 2), round(bench4.total_us, 2)) == (16.14, 9.15)


@pytest.mark.parametrize("bench", range(1, 5))
def test_prediction_recomputed_from_the_records(bench):
    """The shipped prediction, recomputed here from build_tile_schedule's records: per pair, tiles
    back to back, each k-tile at the pipeline's pace, epilogues overlapped, the last one the tail."""
    sizes = BENCHES[bench - 1].sizes
    m = submission.B200_MODEL
    config = submission.sm100_shape_config(sizes, 74, SHIPPED)  # the kernel launched for the shape
    records, offsets = submission.sm100_schedule(sizes, 74, config)
    ends, epilogues = [], []
    for begin, end in offsets:
        clock = previous = 0.0
        for g, n0, t0, v, m_end, n, k, *_ in records[begin:end]:
            width = config.token_variants[v]
            mma = 128 * width * 256 / (m.fp4_fma_per_clock_per_sm * m.mma_clock_mhz)
            clock += max((k // 256) * max(mma, m.stage_round_trip_us / config.stages), previous)
            previous = 128 * (m_end - t0) * 2 / m.store_bytes_per_us
            epilogues.append(previous)
        ends.append(clock + previous)
    weights = sum(n * (k // 2 + k // 16) for _, n, k in sizes)
    other = sum(mm * k // 2 + -(-mm // 128) * 128 * k // 16 + mm * n * 2 for mm, n, k in sizes)
    dram = (weights + other) / (m.dram_bytes_per_us * m.dram_efficiency)
    expected = m.start_us + max(max(ends), dram + max(epilogues))
    e = model.predict_config(SHIPPED, sizes)
    # a cluster of two pairs runs each record on both its pairs' weight blocks, in step (cluster_pairs 2)
    tiles = sum(1 for r in records for pair in range(config.cluster_pairs) if r[1] + config.weight_rows * pair < r[5])
    assert e.rereads == 0 and e.tiles == tiles
    assert e.total_us == pytest.approx(expected)
    assert e.busiest_tiles == max(end - begin for begin, end in offsets)


@pytest.mark.long
def test_switches_the_model_cannot_judge_get_the_shipped_figure():
    shipped = [model.predict_config(SHIPPED, b.sizes).total_us for b in BENCHES]
    for name in model.NOT_MODELED:
        value = getattr(SHIPPED, name)
        other = {"tma_last": "atoms", "ptx": "atoms", "selp": "branch"}.get(value, not value)
        # with what the flip needs (multicast off takes clusters of two pairs with it: both unmodeled)
        flipped = SHIPPED.with_needs(**{name: 1 if name == "cluster_pairs" else other})
        assert [model.predict_config(flipped, b.sizes).total_us for b in BENCHES] == shipped
    judged = [f.name for f in dataclasses.fields(submission.Sm100Config) if f.name not in model.NOT_MODELED]
    assert sorted(judged) == ["cta_group", "jobs", "token_variants"]
    for config in (SHIPPED.with_needs(cta_group=1), replace(SHIPPED, jobs="weight_blocks")):
        assert [model.predict_config(config, b.sizes).total_us for b in BENCHES] != shipped
    table = _tool("--configs")
    for name in model.NOT_MODELED:
        assert f"not modeled: {name}" in table
    assert "0 to 2 us" in table and "assumed" in table


def _grown(sizes, grow):
    """`sizes` with more bytes: one more token per group, 256 more weight rows or K, or a group more."""
    if grow == "group":
        return tuple(sizes) + (sizes[-1],)
    step = {"M": (1, 0, 0), "N": (0, 256, 0), "K": (0, 0, 256)}[grow]
    return tuple(tuple(x + d for x, d in zip(s, step)) for s in sizes)


@pytest.mark.parametrize("config", [SHIPPED, submission.SM100_SAFE, replace(SHIPPED, jobs="tiles")],
                         ids=lambda c: c.describe())
@pytest.mark.parametrize("grow", ["M", "N", "K", "group"])
def test_more_bytes_never_faster(config, grow):
    for sizes in [b.sizes for b in BENCHES] + [((40, 512, 256), (72, 384, 512))]:
        before = model.predict_config(config, sizes).total_us
        after = model.predict_config(config, _grown(sizes, grow)).total_us
        assert after >= before - 1e-9, (sizes, grow, before, after)


@pytest.mark.parametrize("design", [model.GAU_V6B, model.NAREG_V14, model.NAREG_V17], ids=lambda d: d.name)
@pytest.mark.parametrize("grow", ["M", "N", "K", "group"])
def test_designs_more_bytes_never_faster(design, grow):
    for sizes in [b.sizes for b in BENCHES]:
        before = model.predict_design(design, sizes).total_us
        assert model.predict_design(design, _grown(sizes, grow)).total_us >= before - 1e-9


def test_more_sms_never_slower():
    """Of one kernel: the launch's choice between the 64/128 and the 64/128/192 kernel follows the
    busiest worker, which the model's DRAM-bound total of benchmark 1 does not see (0.1 us of
    epilogue either way), so each kernel is held to it on its own."""
    for config in (SHIPPED, replace(SHIPPED, token_variants=(64, 128))):
        for sizes in [b.sizes for b in BENCHES]:
            previous = math.inf
            for sms in (148, 152, 160, 200, 296):
                now = model.predict_config(config, sizes, replace(submission.B200_MODEL, sm_count=sms), as_launched=False)
                assert now.total_us <= previous + 1e-9, (config.token_variants, sizes, sms, now.total_us, previous)
                previous = now.total_us


def test_cut_tokens_covers_every_token_once():
    for m in range(1, 600):
        for tiles in [(128,), (256,), (64, 128)]:
            covered = []
            for t0, size in model.cut_tokens(m, tiles):
                assert size in tiles and t0 % max(tiles) == 0
                covered.extend(range(t0, min(t0 + size, m)))
            assert covered == list(range(m)), (m, tiles)


def test_the_constants_are_the_least_squares_fit():
    """Refitting all five constants on the claimed rows lands within 5% of B200_MODEL's (rounded)."""
    fitted = model.fit(model.calibration_rows(BENCHES))
    for name in model.FITTED:
        assert getattr(fitted, name) == pytest.approx(getattr(submission.B200_MODEL, name), rel=0.05), name


def test_fit_recovers_known_constants():
    truth = replace(submission.B200_MODEL, dram_efficiency=0.7, stage_round_trip_us=2.3, start_us=3.5,
                    tma_store_epilogue_us=1.2, descriptor_patch_us=0.9)
    rows = [(predict, predict(truth)) for predict, _ in model.calibration_rows(BENCHES)]
    fitted = model.fit(rows)
    for name in model.FITTED:
        assert getattr(fitted, name) == pytest.approx(getattr(truth, name), rel=0.01), name


@pytest.mark.long  # the quick suite's budget (issue 26): CI runs it under -m long
def test_leave_one_design_out():
    """The audit's figures: 18% held-out RMS, worst 36%, v6b's held-out rows all too slow."""
    loo = model.leave_one_design_out(BENCHES)
    assert [fold.family for fold in loo] == ["gau-nernst v6b", "Nareg V14", "Nareg V16", "Nareg V17"]
    assert all(len(fold.errors) == 4 for fold in loo)
    assert 0.15 <= model.held_out_rms(loo) <= 0.20
    assert max(abs(e) for fold in loo for e in fold.errors) == pytest.approx(0.36, abs=0.01)
    assert all(e > 0.15 for e in loo[0].errors)
    # Each fold fits without its design: v6b's fold moves the constants its rows set.
    assert loo[0].model.dram_efficiency < 0.7


@pytest.mark.long  # the quick suite's budget (issue 26): it refits leave-one-design-out; the docs tables' test stays
def test_every_printed_b200_figure_carries_the_error_bar():
    bar = model.error_bar(model.held_out_rms(model.leave_one_design_out(BENCHES)))
    assert bar == "± 18% (model, held-out RMS)"
    for args in (["--shipped"], ["--config", "safe"], ["--configs"]):
        assert bar in _tool(*args), args


def _profile_file(tmp_path, truth, configs=("shipped", "safe", "shipped,jobs=weight_blocks", "shipped,cta_group=1,token_variants=64/128,multicast=off,cluster_pairs=1")):
    runs = [{"config": c, "benchmark": i, "mean_us": model.predict_config(
        submission.Sm100Config.parse(c), b.sizes, truth).total_us, "median_us": None, "repeats": 100, "error": None}
        for c in configs for i, b in enumerate(BENCHES, start=1)]
    runs.append({"config": "shipped,pdl=off", "benchmark": 1, "mean_us": None, "error": "HANG"})
    path = tmp_path / "b200.json"
    path.write_text(json.dumps({"format": "b200_profile/1", "device": "synthetic", "runs": runs}))
    return path


@pytest.mark.long  # README's quick command within 4 minutes (issue 47): its family keeps test_fit_recovers_known_constants quick
def test_refit_recovers_the_constants_of_a_synthetic_b200_run(tmp_path):
    truth = replace(submission.B200_MODEL, dram_efficiency=0.72, stage_round_trip_us=2.2, start_us=3.6)
    path = _profile_file(tmp_path, truth)
    runs = model.load_profile_runs(path)
    assert len(runs) == 16  # the failed run is skipped
    fitted, names = model.refit(runs, BENCHES)
    assert names == ["dram_efficiency", "stage_round_trip_us", "start_us"]
    for name in names:
        assert getattr(fitted, name) == pytest.approx(getattr(truth, name), rel=0.01), name
    assert fitted.tma_store_epilogue_us == submission.B200_MODEL.tma_store_epilogue_us
    out = _tool("--refit", str(path))
    assert "kept: no measured configuration depends on it" in out
    assert re.search(r"start_us\s+4\.6\s+3\.6", out), out


def test_refit_rejects_other_files(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"format": "sm90_profile_tiles/1", "runs": []}))
    with pytest.raises(ValueError, match="not a calibration/b200_profile.py file"):
        model.load_profile_runs(path)


def _hopper_profile(per_k_tile):
    """A synthetic `sm90_profile.py tiles --json`: cycles per k-tile per_k_tile(N) at every K."""
    return {"format": "sm90_profile_tiles/1", "sm_clock_mhz": 1000.0, "benchmarks": [
        {"benchmark": i, "tiles": [{"n": n, "k": k, "count": 1, "median_cycles": per_k_tile(n) * k // 64}
                                   for n in (16, 64, 256) for k in {k for _, _, k in b.sizes}]}
        for i, b in enumerate(BENCHES, start=1)]}


def test_hopper_estimate_is_the_busiest_cta_of_the_schedule():
    import sm90_kernel

    profile = _hopper_profile(lambda n: n + 128)  # linear in N: interpolation is exact
    for b in BENCHES:
        records, offsets = submission.build_tile_schedule(b.sizes, 132, sm90_kernel.SCHEDULE)
        busiest = max(sum((r[6] // 64) * (sm90_kernel.VARIANTS[r[3]] + 128) / 1000.0 for r in records[o[0]:o[-1]])
                      for o in offsets)
        e = model.hopper_estimate(profile, b.sizes, 1000.0)
        assert e.busiest_us == pytest.approx(busiest)
        assert e.total_us == pytest.approx(model.HOPPER_START_US + max(busiest, e.dram_us))


def test_hopper_weight_block_jobs_load_the_busiest_cta():
    """The flip issue 15 asks the H200 to measure: weight-block jobs leave benchmarks 3 and 4's
    busiest CTA with far more work (about 28 -> 62 and 10 -> 26 us in the audit's model)."""
    profile = _hopper_profile(lambda n: 560 if n <= 128 else 1072)
    for i in (2, 3):
        tiles = model.hopper_estimate(profile, BENCHES[i].sizes, 1700.0)
        blocks = model.hopper_estimate(profile, BENCHES[i].sizes, 1700.0, jobs="weight_blocks")
        assert blocks.busiest_us > 1.5 * tiles.busiest_us
        assert blocks.busy_workers < tiles.busy_workers


def test_hopper_cli(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(_hopper_profile(lambda n: n + 128)))
    for jobs in ([], ["--jobs", "weight_blocks"]):
        out = _tool("--hopper", str(path), *jobs)
        assert "busiest CTA us" in out and out.strip().splitlines()[-1].startswith("geomean")
        assert ("jobs=weight_blocks" in out) == bool(jobs)


@pytest.mark.long  # README's quick command within 4 minutes (issue 47): its family keeps the tables' other tests quick
def test_markdown_headers_have_no_pipes():
    """A pipe inside a header cell splits it (issue 16: `claimed (|err| <= 25%)`)."""
    for args in (["--calibration"], ["--loo"], ["--shipped"], ["--configs"]):
        lines = [line for line in _tool(*args, "--markdown").splitlines() if line.startswith("| ")]
        header, separator = lines[0], lines[1]
        assert header.count("|") == separator.count("|"), header


def test_help_explains_the_options():
    help_text = subprocess.run([sys.executable, str(ROOT / "tools" / "b200_model.py"), "--help"],
                               capture_output=True, text=True, check=True).stdout
    for option in ("--shipped", "--config", "--configs", "--loo", "--refit", "--hopper", "--markdown"):
        assert option in help_text
    assert "v1" not in help_text and "v2" not in help_text
    assert "SM100_SAFE" in help_text and "gau-nernst" in help_text


# ---- the docs state exactly what the tool prints ------------------------------------------------

MARKER = re.compile(r"<!-- b200_model (?P<args>[^>]*?) -->\n(?P<body>.*?)\n<!-- end -->", re.S)


# The docs that hold the model's generated tables (the configurations table goes with the bring-up manual).
MODEL_DOCS = ["docs/b200-bring-up.md", "BENCHMARKS.md"]


# BENCHMARKS.md's blocks (the configurations table among them) in the quick suite; the bring-up manual's copy of
# the configurations table under -m long (README's quick command within 4 minutes, issue 47)
@pytest.mark.parametrize("doc", ["BENCHMARKS.md", pytest.param("docs/b200-bring-up.md", marks=pytest.mark.long)])
def test_docs_tables_are_the_tools_output(doc):
    text = (ROOT / doc).read_text()
    blocks = list(MARKER.finditer(text))
    assert blocks, f"{doc} has no <!-- b200_model ... --> block"
    for block in blocks:
        expected = _tool(*block["args"].split()).strip()
        assert block["body"].strip() == expected, (
            f"{doc}: the block `b200_model {block['args']}` differs from the tool's output; paste:\n{expected}")


def test_docs_state_no_other_b200_model_figure():
    """Outside the generated blocks, no doc repeats the old claims."""
    for doc in ["README.md"] + MODEL_DOCS:
        outside = MARKER.sub("", (ROOT / doc).read_text())
        for stale in ("13.29", "16.71", "46.80", "23.33", "design being built"):
            assert stale not in outside, (doc, stale)


def test_the_design_note_states_no_figures():
    """Issue 47, item 4: submission.py's design note says what and why; figures, dates and commits live in
    BENCHMARKS.md (the model's tables there are the tool's output: test_docs_tables_are_the_tools_output)."""
    figure = r"\d+\.\d+ us|\d+(?:\.\d+)? ?%|\b20\d\d-\d\d-\d\d\b|\b[0-9a-f]{7}\b"
    assert not re.findall(figure, submission.__doc__), re.findall(f".{{30}}(?:{figure}).{{10}}", submission.__doc__)


# ---- the B200 profile and the H200 method check (their GPU parts run on the hardware only) ------

# On a GPU these would time every benchmark for real.
cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="times the benchmarks on a GPU")


@cpu_only
def test_b200_profile_records_failures_and_writes_the_refit_format(tmp_path):
    """Without a B200 every benchmark fails (no CUDA); the file still has one row per configuration
    and benchmark, with the reason, in the format --refit reads."""
    import b200_profile

    out = tmp_path / "b200.json"
    assert b200_profile.main(["--out", str(out), "--configs", "shipped; safe,pdl=on"]) == 0
    data = json.loads(out.read_text())
    assert data["format"] == "b200_profile/1" and data["cutlass_dsl"] and data["torch"]
    assert [(r["config"], r["benchmark"]) for r in data["runs"]] == [
        (c, b) for c in ("shipped", "safe,pdl=on") for b in range(1, 5)]
    assert all(r["mean_us"] is None and "CUDA" in r["error"] for r in data["runs"])
    assert model.load_profile_runs(out) == []


def test_b200_profile_child_hang_is_recorded(tmp_path):
    import b200_profile

    rows = b200_profile.run_in_child("shipped", 0.01)
    assert len(rows) == 4 and all(r["error"].startswith("HANG") for r in rows)


def test_the_configurations_profiled_by_default_parse_back():
    labels = [label for label, config in model.single_flips()]
    assert labels[0] == "shipped" and labels[-1] == "safe" and len(labels) == 16  # shipped, 14 flips (two for token_variants and jobs), safe
    assert [submission.Sm100Config.parse(label) for label in labels] == [c for _, c in model.single_flips()]


@cpu_only
def test_h200_method_check_flips_the_hopper_schedule(monkeypatch):
    import h200_method_check
    import sm90_kernel

    monkeypatch.setattr(sm90_kernel, "SCHEDULE", sm90_kernel.SCHEDULE)
    rows = h200_method_check.run_means("weight_blocks")
    assert sm90_kernel.SCHEDULE.jobs == "weight_blocks"
    assert [r["benchmark"] for r in rows] == [1, 2, 3, 4]


def test_h200_method_check_compares_predicted_with_measured():
    import h200_method_check

    profile = _hopper_profile(lambda n: n + 128)
    for b in profile["benchmarks"]:
        b["busiest_span_cycles"] = 1000.0 * b["benchmark"]
    means = {s: [{"benchmark": i, "mean_us": 10.0 * i} for i in range(1, 5)] for s in h200_method_check.SCHEDULES}
    means["weight_blocks"][3]["mean_us"] = None
    out = h200_method_check.compare(profile, means, 1000.0)
    lines = out.splitlines()
    assert "SM clock 1000 MHz" in lines[0]
    shipped3 = next(line for line in lines if line.startswith("shipped") and line.split()[1] == "3")
    predicted = model.hopper_estimate(profile, BENCHES[2].sizes, 1000.0).total_us
    assert f"{predicted:.2f}" in shipped3 and "30.00" in shipped3 and "3.00" in shipped3
    assert f"{100 * (predicted / 30 - 1):+.1f}" in shipped3
    assert "FAIL" in next(line for line in lines if line.startswith("weight_blocks") and line.split()[1] == "4")
    assert h200_method_check.busy_clock("1755, 100") == 1755.0
    assert h200_method_check.busy_clock("345, 0") == 0.0
    assert h200_method_check.busy_clock("[N/A], 3") == 0.0


def test_sm90_profile_takes_json():
    help_text = subprocess.run([sys.executable, str(ROOT / "calibration" / "sm90_profile.py"), "--help"],
                               capture_output=True, text=True, check=True).stdout
    assert "--json FILE" in help_text


@pytest.mark.long  # the quick suite's budget (issue 26): CI runs it under -m long
def test_bad_input_is_one_line():
    for args in (["--config", "fast"], ["--refit", "/nonexistent.json"]):
        done = subprocess.run([sys.executable, str(ROOT / "tools" / "b200_model.py"), *args],
                              capture_output=True, text=True)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
