"""CPU tests of the B200 time model, tools/b200_model.py: its calibration claims, its ranking of
v1 against v2, sanity properties, and choose_config on every shape the kernel must serve."""

import ast
import itertools
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import b200_model as model  # noqa: E402

BENCHES = model.load_benchmarks()
TASK = yaml.safe_load((ROOT / "task.yml").read_text())
TASK_SHAPES = [tuple(zip(c["m"], c["n"], c["k"])) for c in TASK["tests"] + TASK["benchmarks"]]
# The extra cases: every M of 1, 7, 129, 300 with every group count of 1, 5, 16, 32, on
# the benchmarks' (N, K) pairs and on the smallest test shape.
EXTRA_SHAPES = [((m, n, k),) * g for m, g, (n, k) in
                itertools.product((1, 7, 129, 300), (1, 5, 16, 32), ((4096, 7168), (7168, 2048), (128, 256)))]


def _error(row):
    return model.predict(row.design, BENCHES[row.benchmark - 1].sizes).total_us / row.measured_us - 1


@pytest.mark.parametrize("row", [r for r in model.CALIBRATION if r.claimed],
                         ids=lambda r: f"{r.design.name[:24]}-bench{r.benchmark}")
def test_claimed_calibration_rows_within_bound(row):
    assert abs(_error(row)) <= model.CLAIM_BOUND, f"{row.design.name} bench {row.benchmark}: {_error(row):+.1%}"


def test_claims_cover_v6b_and_three_nareg_steps():
    claimed = {}
    for row in model.CALIBRATION:
        if row.claimed:
            claimed.setdefault(row.design.name.split(" (")[0], set()).add(row.benchmark)
    assert claimed["gau-nernst v6b"] == {1, 2, 3, 4}
    nareg_steps = [name for name, benches in claimed.items() if name.startswith("Nareg") and benches == {1, 2, 3, 4}]
    assert len(nareg_steps) >= 3, nareg_steps


@pytest.mark.parametrize("bench", range(1, 5))
def test_v2_faster_than_v1(bench):
    sizes = BENCHES[bench - 1].sizes
    v2 = model.predict(model.v2_design(model.choose_config(sizes)), sizes).total_us
    assert v2 < model.predict(model.V1, sizes).total_us


def test_predict_of_the_v2_design_is_what_choose_config_ranked():
    for b in BENCHES:
        config = model.choose_config(b.sizes)
        assert model.predict(model.v2_design(config), b.sizes).total_us == pytest.approx(config.predicted_us)


SANITY_DESIGNS = [model.V1, model.v2_design(model.Config(model.V2_TOKEN_TILES, None, 1, None)),
                  model.v2_design(model.Config((64, 128), None, 2, None)), model.NAREG_V14, model.GAU_V6B]


def _grown(sizes, grow):
    """`sizes` with more bytes: one more token per group, 256 more weight rows or K, or a group more."""
    if grow == "group":
        return tuple(sizes) + (sizes[-1],)
    step = {"M": (1, 0, 0), "N": (0, 256, 0), "K": (0, 0, 256)}[grow]
    return tuple(tuple(x + d for x, d in zip(s, step)) for s in sizes)


@pytest.mark.parametrize("design", SANITY_DESIGNS, ids=lambda d: d.name)
@pytest.mark.parametrize("grow", ["M", "N", "K", "group"])
def test_more_bytes_never_faster(design, grow):
    for sizes in [b.sizes for b in BENCHES] + [((40, 512, 256), (72, 384, 512))]:
        if design.schedule == "columns" and len({n for _, n, _ in sizes}) > 1:
            continue  # gau-nernst's kernel needs one N for all groups
        before = model.predict(design, sizes).total_us
        after = model.predict(design, _grown(sizes, grow)).total_us
        assert after >= before - 1e-9, (sizes, grow, before, after)


@pytest.mark.parametrize("design", SANITY_DESIGNS, ids=lambda d: d.name)
def test_more_sms_never_slower(design, monkeypatch):
    for sizes in [b.sizes for b in BENCHES]:
        previous = math.inf
        for sms in (148, 152, 160, 200, 296):
            monkeypatch.setattr(model, "SM_COUNT", sms)
            monkeypatch.setattr(model, "SM_PAIRS", sms // 2)
            now = model.predict(design, sizes).total_us
            assert now <= previous + 1e-9, (design.name, sizes, sms, now, previous)
            previous = now


def test_cut_tokens_covers_every_token_once():
    for m in list(range(1, 600)):
        for tiles in [(32, 64, 96, 128), (128,), (32, 64), (96,), (256,)]:
            covered = []
            for t0, size in model.cut_tokens(m, tiles):
                assert size in tiles and t0 % max(tiles) == 0
                covered.extend(range(t0, min(t0 + size, m)))
            assert covered == list(range(m)), (m, tiles)


@pytest.mark.parametrize("sizes", TASK_SHAPES + EXTRA_SHAPES,
                         ids=lambda s: f"G{len(s)}-M{s[0][0]}-N{s[0][1]}-K{s[0][2]}")
def test_choose_config_is_valid(sizes):
    config = model.choose_config(sizes)
    assert config.token_tiles and set(config.token_tiles) <= set(model.V2_TOKEN_TILES)
    assert list(config.token_tiles) == sorted(set(config.token_tiles))
    assert config.split_k in (1, 2)
    # Per CTA and stage: 128 weight rows, the CTA's token rows (half the tile when the pair
    # shares one MMA, all of it when each CTA runs its own half of K), the two scale blocks.
    largest = max(config.token_tiles)
    token_rows = largest // 2 if config.split_k == 1 else largest
    stage = (128 + token_rows) * 128 + 2 * 2048
    staging = 0 if config.split_k == 1 else 128 * largest // 2 * 4
    used = model.SMEM_RESERVED_BYTES + staging + config.stages * stage
    assert config.stages >= 2 and used <= model.SMEM_BYTES_PER_CTA < used + stage
    assert 0 < config.predicted_us < math.inf
    # A configuration other than the default must beat it by the margin.
    default = model.v2_estimate(sizes).total_us
    if (config.token_tiles, config.split_k) != (model.V2_TOKEN_TILES, 1):
        assert config.predicted_us < default * (1 - model.CHOICE_MARGIN)


def test_split_k_pays_only_where_pairs_idle():
    # One 7-token group: 16 of 74 pairs busy, splitting K fills 32 and halves their k-tiles.
    assert model.choose_config([(7, 4096, 7168)]).split_k == 2
    for bench in (3, 4):
        assert model.choose_config(BENCHES[bench - 1].sizes).split_k == 1


def _paste_section():
    text = (ROOT / "tools" / "b200_model.py").read_text()
    start = text.index("# BEGIN PASTE")
    return text[text.rindex("\n", 0, start) + 1:text.index("# END PASTE")]


def test_paste_section_is_self_contained():
    section = _paste_section()
    imported = set()
    for node in ast.walk(ast.parse(section)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module.split(".")[0])
    assert imported <= set(sys.stdlib_module_names), imported
    namespace = {}
    exec(compile(section, "paste", "exec"), namespace)
    for sizes in [b.sizes for b in BENCHES] + [((7, 4096, 7168),)]:
        assert namespace["choose_config"](sizes) == model.choose_config(sizes)


def test_cli_prints_the_tables():
    for args in ([], ["--markdown"]):
        out = subprocess.run([sys.executable, str(ROOT / "tools" / "b200_model.py"), *args],
                             capture_output=True, text=True, check=True).stdout
        for heading in ("Calibration", "Predictions per task.yml benchmark", "idle pairs and split-K"):
            assert heading in out
        assert "geomean" in out
    assert "| bench |" in out
    help_text = subprocess.run([sys.executable, str(ROOT / "tools" / "b200_model.py"), "--help"],
                               capture_output=True, text=True, check=True).stdout
    assert "--markdown" in help_text


def test_submission_schedules_with_this_model():
    """submission.py balances the B200 schedule with this model's constants and the kernel's
    configuration is the one the model predicts for: token tiles 64/128, 8 stages, no split-K."""
    import submission

    assert submission.TOKEN_VARIANTS == model.V2_TOKEN_TILES
    assert submission.K_TILE == model.K_TILE and submission.SMEM_RESERVED_BYTES == model.SMEM_RESERVED_BYTES
    assert submission.B200_MODEL.fp4_fma_per_us_per_sm == model.FP4_FMA_PER_CLOCK_PER_SM * model.MMA_CLOCK_MHZ
    assert submission.B200_MODEL.stage_round_trip_us == model.STAGE_ROUND_TRIP_US
    assert submission.SM100_STAGES == model.build_tiles([(128, 256, 256)], model.V2_TOKEN_TILES)[3]
    kernel = (submission.TOKEN_VARIANTS, submission.SM100_STAGES, 1)
    for spec in TASK["benchmarks"]:
        config = model.choose_config(list(zip(spec["m"], spec["n"], spec["k"])))
        assert (config.token_tiles, config.stages, config.split_k) == kernel
    # On the (unranked) tests the model would take 64-token tiles with 9 stages, for under 5%.
    for spec in TASK["tests"]:
        sizes = list(zip(spec["m"], spec["n"], spec["k"]))
        assert model.v2_estimate(sizes, submission.TOKEN_VARIANTS).total_us <= 1.05 * model.choose_config(sizes).predicted_us
