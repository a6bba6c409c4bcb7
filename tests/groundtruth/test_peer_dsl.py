"""groundtruth/peer_dsl.py, the route that runs a peer's CuTe DSL leaderboard file in the emulator, tested with
a file of ours (dsl_peer_example.py, beside this file: a pip install at import, TVM-FFI options, "cuda" tensors, a
pointer table read on the device) and no peer's code. Each run is `python -m groundtruth.peer_dsl` in a
process of its own (the stub driver loads before cutlass)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = Path(__file__).resolve().parent / "dsl_peer_example.py"
SPEC = "m: [96, 128]; n: [128, 256]; k: [256, 512]; g: 2; seed: 1111"

pytestmark = pytest.mark.skipif(sys.version_info < (3, 10), reason="the DSL needs Python 3.10+")


def route(*options, env=None):
    done = subprocess.run([sys.executable, "-m", "groundtruth.peer_dsl", str(EXAMPLE), "--spec", SPEC, *options],
                          capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env={**os.environ, "CUTE_DSL_DISABLE_FILE_CACHING": "1", **(env or {})})
    lines = done.stdout.strip().splitlines()
    return done.returncode, lines[-1] if lines else done.stderr[-2000:], done.stdout


def test_recognizes_cute_dsl_leaderboard_files_only():
    from groundtruth.peer_dsl import recognizes

    assert recognizes(EXAMPLE.read_text())
    assert not recognizes((ROOT / "submission.py").read_text())  # ours: the `submission` route runs it
    assert not recognizes("from torch.utils.cpp_extension import load_inline\ndef custom_kernel(data): ...")


@pytest.mark.parametrize("options", [("--races",), ("--mode", "adversarial", "--seed", "2", "--races"),
                                     ("--time", "--calls", "2")], ids=["eager", "adversarial", "timed"])
def test_the_route_runs_a_cute_dsl_file_and_checks_every_output(options):
    status, verdict, out = route(*options)
    assert status == 0 and verdict.startswith("PASS"), out
    assert "pageable host-to-device copies" in out  # its pointer table, counted as the call's host work
    if "--time" in options:
        assert "simulated" in verdict and "stream of 2 calls" in verdict


def test_an_output_the_kernel_leaves_unwritten_fails():
    status, verdict, out = route(env={"DSL_PEER_EXAMPLE_COPY_LIMIT": "1000"})
    assert status == 1 and verdict.startswith("FAIL"), out
