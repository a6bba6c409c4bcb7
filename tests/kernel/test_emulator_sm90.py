"""sm90_kernel.py's Hopper kernel, executed: through submission.custom_kernel on an emulated H200 (the stub
driver answering as sm_90 with 132 SMs, the DSL compiling for sm_90a, the emulator running its PTX: the
token pre-pass and the wgmma GEMM), on the board's inputs, against the exact reference, with each c poisoned
and guarded (tools/emulate.py submission --arch sm_90a).

Quick: the fragment layouts and arithmetic of one wgmma against a matrix product, the --config switches
reaching the Hopper kernel, and one small case in eager mode. Long (`-m long`): task.yml's tests and the M
edges (1, 7, 40, 129) in both timing modes, the pdl and jobs switches, the H200's real SM count, and a
planted defect (the epilogue's `wgmma.wait_group 0` made 1) that adversarial mode catches and eager mode,
which executes each wgmma at issue, cannot.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

pytestmark = pytest.mark.skipif(sys.version_info < (3, 10), reason="the DSL needs Python 3.10+")

TASK_SPECS = [f"m: {list(e['m'])}; n: {list(e['n'])}; k: {list(e['k'])}; g: {e['g']}; seed: {e['seed']}"
              for e in yaml.safe_load((ROOT / "task.yml").read_text())["tests"]]
EDGE_SPECS = [
    "m: [1]; n: [384]; k: [256]; g: 1; seed: 7",
    "m: [7, 40]; n: [128, 384]; k: [768, 256]; g: 2; seed: 8",
    "m: [129, 1, 40]; n: [256, 128, 640]; k: [512, 256, 256]; g: 3; seed: 9",
]
# The epilogue's final wait made to leave one wgmma group pending: the accumulator is read before the last
# k-tiles' wgmma executed.
EARLY_EPILOGUE = r"sed -E 's/(wgmma\.wait_group\.sync\.aligned\s+)0;/\11;/'"


def emulate(specs, *, config="shipped", mode="eager", seed=0, workers=3, ptx_filter=None, races=False, timeout=1800):
    args = [sys.executable, str(ROOT / "tools" / "emulate.py"), "submission", "--arch", "sm_90a",
            "--config", config, "--mode", mode, "--seed", str(seed), "--races" if races else "--no-races"]
    if workers is not None:
        args += ["--workers", str(workers)]
    if ptx_filter:
        args += ["--ptx-filter", ptx_filter]
    for spec in specs:
        args += ["--spec", spec]
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-3000:]
    print(done.stdout)  # the case lines, with their seeds, in the test log
    return done.returncode, lines[-1], done.stdout


def assert_all_pass(specs, **kwargs):
    rc, verdict, out = emulate(specs, **kwargs)
    assert rc == 0 and verdict.startswith("PASS"), out[-4000:]
    cases = [line for line in out.splitlines() if line.startswith("case ")]
    assert len(cases) == len(specs) and all(": PASS " in line for line in cases), out[-4000:]


# --------------------------------------------------------------------------------------------------
# quick
# --------------------------------------------------------------------------------------------------


def _f16x2(values):
    """(lanes, 8) f16 values -> (lanes, 4) b32 words, element 2j in the low half of word j."""
    bits = np.asarray(values, np.float16).view(np.uint16).astype(np.uint32)
    return bits[:, 0::2] | (bits[:, 1::2] << 16)


def test_one_wgmma_is_the_product_of_its_fragments():
    """A warp's A fragment (figure 148's layout) times B, accumulated into its D fragment (figure 149's),
    equals the 16 x N block of A @ B^T + C; a fragment placed by another layout (columns of a register
    pair swapped) does not."""
    from emulator import wgmma

    rng = np.random.default_rng(1)
    n = 24
    a = rng.integers(-8, 8, (16, 16)).astype(np.float16) / 4
    b = rng.integers(-8, 8, (n, 16)).astype(np.float64) / 4
    c = rng.integers(-8, 8, (16, n)).astype(np.float32)
    rows, cols = wgmma.a_fragment_positions()
    d_rows, d_cols = wgmma.d_fragment_positions(n)
    expected = a.astype(np.float64) @ b.T + c
    result = wgmma.mma_f16_rows(_f16x2(a[rows, cols]), b, c[d_rows, d_cols], False, False)
    assert np.array_equal(result, expected[d_rows, d_cols])
    assert np.array_equal(wgmma.mma_f16_rows(_f16x2(a[rows, cols]), b, None, True, False),
                          -(a.astype(np.float64) @ b.T)[d_rows, d_cols])
    swapped = a[rows, cols ^ 8]  # the k pairs 2q.. and 2q+8.. exchanged: a wrong fragment layout
    assert not np.array_equal(wgmma.mma_f16_rows(_f16x2(swapped), b, c[d_rows, d_cols], False, False),
                              expected[d_rows, d_cols])


def test_the_descriptor_reads_the_128_byte_swizzled_k_major_layout():
    """Row r, byte k of a K-major 128-byte-swizzled operand lies at r * 128 + (k ^ ((r % 8) * 16)) within an
    8-row atom (SBO 1024 between atoms); the descriptor's start steps 32 bytes per k16 block."""
    from emulator import wgmma

    desc = (1 << 62) | ((1024 >> 4) << 32) | ((2048 + 64) >> 4)  # start 2048 + 64: the third k16 block
    d = wgmma.WgmmaDescriptor.decode(desc)
    addresses = wgmma.operand_addresses(d, 16, 32)
    r, k = np.arange(16)[:, None], np.arange(32)[None, :]
    assert np.array_equal(addresses, 2048 + (r // 8) * 1024 + (r % 8) * 128 + ((64 + k) ^ ((r % 8) * 16)))
    plain = wgmma.operand_addresses(wgmma.WgmmaDescriptor.decode(desc & ~(3 << 62)), 16, 32)
    assert not np.array_equal(plain, addresses)


def test_config_reaches_the_hopper_switches(monkeypatch):
    """--config under --arch sm_90a: pdl through SM100_CONFIG, jobs into sm90_kernel.SCHEDULE only when
    named, anything else refused."""
    sys.path.insert(0, str(ROOT / "tools"))
    import emulate
    import sm90_kernel
    import submission

    monkeypatch.setattr(sm90_kernel, "SCHEDULE", sm90_kernel.SCHEDULE)
    monkeypatch.setattr(submission, "SM100_CONFIG", submission.SM100_CONFIG)
    emulate.hopper_config(submission, "shipped,pdl=off")
    assert submission.sm100_config().pdl is False and sm90_kernel.SCHEDULE.jobs == "tiles"
    emulate.hopper_config(submission, "shipped,jobs=weight_blocks")
    assert submission.sm100_config().pdl is True and sm90_kernel.SCHEDULE.jobs == "weight_blocks"
    with pytest.raises(ValueError, match="l2_hints has no counterpart"):
        emulate.hopper_config(submission, "shipped,l2_hints=off")
    with pytest.raises(ValueError, match="warmers has no counterpart"):
        emulate.hopper_config(submission, "shipped,warmers=off")


def test_one_small_case_passes():
    assert_all_pass(["m: [40]; n: [128]; k: [256]; g: 1; seed: 7"])


# --------------------------------------------------------------------------------------------------
# long
# --------------------------------------------------------------------------------------------------


@pytest.mark.long
@pytest.mark.parametrize("mode, seed", [("eager", 0), ("adversarial", 11)])
def test_task_and_edge_shapes(mode, seed):
    assert_all_pass(TASK_SPECS + EDGE_SPECS, mode=mode, seed=seed)


@pytest.mark.long
@pytest.mark.parametrize("config", ["shipped,pdl=off", "shipped,jobs=weight_blocks", "shipped,jobs=hybrid"])
def test_each_hopper_switch(config):
    assert_all_pass(EDGE_SPECS, config=config, mode="adversarial", seed=5)


@pytest.mark.long
def test_the_h200s_real_sm_count():
    """132 SMs (no --workers): the schedule's grid is min(132, tiles) CTAs."""
    assert_all_pass([TASK_SPECS[9], EDGE_SPECS[2]], workers=None)


@pytest.mark.long
def test_a_planted_early_epilogue_fails_in_adversarial_mode_only():
    spec = ["m: [40, 129]; n: [128, 256]; k: [256, 512]; g: 2; seed: 7"]
    rc, verdict, out = emulate(spec, mode="adversarial", seed=3, workers=2, ptx_filter=EARLY_EPILOGUE)
    assert rc == 1 and verdict.startswith("FAIL"), out[-4000:]
    assert_all_pass(spec, mode="eager", workers=2, ptx_filter=EARLY_EPILOGUE)


def test_ulp_distance_of_the_h200_comparison():
    """calibration/compare_h200_output.py's measure: neighbours are 1 ulp apart, across zero too (+0 and -0 are
    one value), NaN stays NaN."""
    import torch

    sys.path.insert(0, str(ROOT / "tools"))
    from compare_h200_output import ulp_distance

    one = torch.tensor([1.0], dtype=torch.float16)
    tiny = torch.tensor([2.0 ** -24], dtype=torch.float16)  # the smallest subnormal
    x = torch.cat([one, one, tiny, torch.tensor([0.0, float("nan")], dtype=torch.float16)])
    y = torch.cat([one, torch.nextafter(one, torch.tensor([2.0], dtype=torch.float16)), -tiny,
                   torch.tensor([-0.0, 1.0], dtype=torch.float16)])
    distance = ulp_distance(x, y)
    assert distance[:4].tolist() == [0.0, 1.0, 2.0, 0.0] and distance[4].isnan()
