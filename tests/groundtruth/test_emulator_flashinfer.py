"""The emulator on a second ground truth: FlashInfer's masked grouped NVFP4 GEMM (groundtruth/flashinfer.py), run
through `tools/emulate.py flashinfer` against the exact reference, and a bug from the field.

Each DSL version has its FlashInfer (requirements-test.txt): 0.6.7.post3 beside nvidia-cutlass-dsl 4.3.5,
0.6.17 beside 4.5.2; CI runs the suite under both, so a test for the other version skips here with one line.
Under CI=true a missing flashinfer-python fails instead of skipping.

- 0.6.7.post3's scheduler reads `masked_m[L]`, one element past the end (FlashInfer fixed it in a later
  release; 0.6.17 carries a comment about CUDA error 700): the emulator reports ERROR global-bounds naming the
  PTX line. 0.6.17 runs the same case with nothing reported.
- The kernel matches the reference in 1-CTA and 2-CTA forms, with and without multicast, in both timing
  modes, with no race reported (long, --races); 0.6.7.post3 with one element of slack registered after masked_m, so that its over-read is
  not what the run stops at.
- A planted defect (the scale-factor column of every MMA shifted, tests/emulator/ptx_defects.py) is a FAIL.
"""

import importlib.metadata
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import missing

ROOT = Path(__file__).resolve().parents[2]
DEFECTS = ROOT / "tests" / "emulator" / "ptx_defects.py"
BUGGY, FIXED = "0.6.7.post3", "0.6.17"
CASE_SECONDS = 60

pytestmark = pytest.mark.skipif(sys.version_info < (3, 10), reason="the DSL needs Python 3.10+")


def installed() -> str | None:
    try:
        return importlib.metadata.version("flashinfer-python")
    except importlib.metadata.PackageNotFoundError:
        return None


def require(*versions: str) -> str:
    """The installed FlashInfer if it is one of `versions`; else skip (fail under CI when none is installed)."""
    version = installed()
    if version is None:
        missing("flashinfer-python is not installed (requirements-test.txt; .ci/run installs it)")
    if version not in versions:
        pytest.skip(f"a test of FlashInfer {' or '.join(versions)}; {version} is installed")
    return version


def slack(version: str) -> list:
    """0.6.7.post3 reads masked_m[L]: one element of slack lets a run check everything else."""
    return ["--masked-m-slack", "1"] if version == BUGGY else []


# the field bug's case: 2 groups, 100 and 37 valid rows, N = K = 256
FIELD_CASE = ["--groups", "2", "--masked-m", "100,37", "--nk", "256,256"]
# wrapping case: 3 groups, one of them empty; a worker takes several tiles, K = 512 (4 k-blocks per tile)
WRAP_CASE = ["--groups", "3", "--masked-m", "300,37,0", "--nk", "256,512"]
FORMS = {
    "1cta": ["--mma-tiler", "128,128", "--cluster", "1,1", "--clusters", "2"],
    "2cta": ["--mma-tiler", "256,128", "--cluster", "2,1", "--clusters", "1"],
    "1cta-multicast": ["--mma-tiler", "128,128", "--cluster", "2,1", "--clusters", "1"],
    "2cta-multicast": ["--mma-tiler", "256,128", "--cluster", "4,1", "--clusters", "1"],
}


def emulate(*args: str, timeout: int = 300):
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "emulate.py"), "flashinfer", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-3000:]
    return done.returncode, lines[-1], done.stdout, time.perf_counter() - start


def test_field_bug_masked_m_read_past_the_end_is_an_error_naming_the_line():
    require(BUGGY)
    rc, verdict, out, _ = emulate(*FIELD_CASE)
    assert rc == 4 and verdict.startswith("ERROR global-bounds"), out[-3000:]
    assert "past the end of masked_m" in verdict and "PTX line" in verdict and "ld.global" in verdict
    assert "(TMA)" in verdict, verdict  # the scheduler of FlashInfer's TMA warp


def test_fixed_version_runs_the_field_bug_case_with_nothing_reported():
    require(FIXED)
    rc, verdict, out, _ = emulate(*FIELD_CASE)
    assert rc == 0 and verdict.startswith("PASS"), out[-3000:]


def test_flashinfer_quick_case_matches_the_exact_reference():
    version = require(BUGGY, FIXED)
    rc, verdict, out, seconds = emulate(*FIELD_CASE, *FORMS["1cta"], *slack(version))
    assert rc == 0 and verdict.startswith("PASS"), out[-3000:]
    assert seconds < CASE_SECONDS, f"{seconds:.0f} s"


@pytest.mark.long  # the quick suite's budget (issue 26): CI runs it under -m long
def test_scale_factor_column_shift_in_flashinfer_is_a_mismatch():
    version = require(BUGGY, FIXED)
    rc, verdict, out, _ = emulate(*FIELD_CASE, *FORMS["2cta"], *slack(version),
                                  "--ptx-filter", f"{sys.executable} {DEFECTS} sf-column")
    assert rc == 1 and verdict.startswith("FAIL"), out[-3000:]


@pytest.mark.long
@pytest.mark.parametrize("mode", ["eager", "adversarial"])
@pytest.mark.parametrize("form", list(FORMS))
def test_flashinfer_matches_the_exact_reference(form, mode):
    version = require(BUGGY, FIXED)
    rc, verdict, out, seconds = emulate(*WRAP_CASE, *FORMS[form], *slack(version), "--mode", mode, "--seed", "3",
                                        "--races")
    assert rc == 0 and verdict.startswith("PASS") and verdict.endswith("races=0"), out[-3000:]
    assert seconds < CASE_SECONDS, f"{form} {mode}: {seconds:.0f} s"


@pytest.mark.long
@pytest.mark.parametrize("mode", ["eager", "adversarial"])
def test_field_bug_is_caught_in_2cta_form_and_both_modes(mode):
    require(BUGGY)
    rc, verdict, out, _ = emulate(*WRAP_CASE, *FORMS["2cta"], "--mode", mode, "--seed", "3")
    assert rc == 4 and "past the end of masked_m" in verdict, out[-3000:]


@pytest.mark.long
def test_benchmarks_side_by_side_with_ours():
    """`emulate.py benchmarks --kernel both`: on benchmark 4 both kernels PASS against the exact reference under
    the clock (two calls each, as one stream), and the command prints their ratio and the two-kernel geomean row
    last."""
    require("0.6.7.post3", "0.6.17")
    done = subprocess.run([sys.executable, "tools/emulate.py", "benchmarks", "--kernel", "both", "--only", "4",
                           "--calls", "2"], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    runs = [line for line in lines if line.startswith("benchmark 4 (")]
    assert len(runs) == 2 and all(": PASS simulated" in line for line in runs), runs
    ratio = next(line for line in lines if line.startswith("benchmark 4: ours "))
    ours, theirs, quotient = (float(x) for x in re.findall(r"(\d+\.\d+)", ratio))
    assert quotient == pytest.approx(ours / theirs, abs=0.006)
    assert re.fullmatch(r"geomean ratio ours / flashinfer \d+\.\d\d", next(
        line for line in lines if line.startswith("geomean ratio")))
    assert re.match(r"geomean ours \d+\.\d\d us, flashinfer \d+\.\d\d us \(B200 description", next(
        line for line in lines if line.startswith("geomean ours")))
