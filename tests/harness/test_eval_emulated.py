"""`python eval.py test` on a machine without a B200: a submission with an sm_100a kernel (it defines
compile_sm100) runs that kernel in the emulator, through tools/emulate.py's call at a B200's worker count, and
the first line says so; a defect planted in the kernel fails there; `--reference` checks the harness alone;
the route works where the process already holds a real CUDA driver (a GPU machine, simulated: conftest)."""

import sys

import pytest
import torch
from conftest import ROOT, run_eval

pytestmark = [pytest.mark.skipif(torch.cuda.is_available(), reason="the emulated route is for machines without a GPU"),
              pytest.mark.skipif(sys.version_info < (3, 10), reason="the DSL needs Python 3.10+")]

EMULATED_FIRST_LINE = ("emulated: no CUDA GPU here, so {}'s B200 (sm_100a) kernel runs in the sm_100a emulator on "
                       "this CPU at a B200's worker count (minutes; --reference checks the harness alone in seconds)")
# the epilogue stores each pair of rows the other way round: every value lands in its neighbour's row
# Two planted defects, one per store path of the shipped epilogue ("tma_last": direct stores for a worker's
# tiles but its last, a TMA store for the last): neighbouring token rows swapped, neighbouring warps' boxes
# swapped. Either makes the output wrong wherever its path stores.
ROW_SWAP = ("cutlass.Int64(first_row + odd) * n", "cutlass.Int64(first_row + 1 - odd) * n")
BOX_SWAP = ("// C_WARP_ROWS + warp_idx)", "// C_WARP_ROWS + (warp_idx ^ 1))")


def test_the_b200_kernel_runs_emulated():
    done = run_eval(ROOT, "test", "--only", "3")
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[0] == EMULATED_FIRST_LINE.format("submission.py"), done.stdout + done.stderr
    assert lines[1].startswith("Tests of submission.py on a B200 emulated on this CPU") and "1 of 1 passed" in lines
    # part of the tests skips the sm_100a inspection, and says so (issue 26, item 7)
    assert lines[-1] == "inspection: not run (a SPEC_FILE or --only runs part of the tests; --inspect runs it)"


def test_a_defect_planted_in_the_kernel_fails_emulated(tmp_path):
    source = (ROOT / "submission.py").read_text()
    assert source.count(ROW_SWAP[0]) == 1 and source.count(BOX_SWAP[0]) == 1
    (tmp_path / "submission.py").write_text(source.replace(*ROW_SWAP).replace(*BOX_SWAP))
    done = run_eval(ROOT, "test", "--submission", str(tmp_path / "submission.py"), "--only", "3", "--no-inspect")
    assert done.returncode == 1 and done.stdout.startswith("emulated: ") and "0 of 1 passed" in done.stdout, \
        done.stdout + done.stderr
    assert "mismatch" in done.stdout or "got" in done.stdout


def test_reference_checks_the_harness_alone_and_a_spec_file_may_follow_the_options(tmp_path):
    (tmp_path / "spec.txt").write_text("m: [96]; n: [128]; k: [256]; g: 1; seed: 5\n")
    done = run_eval(ROOT, "test", "--reference", "--no-inspect", str(tmp_path / "spec.txt"))
    assert done.returncode == 0 and done.stdout.startswith("--reference: testing the harness with "
                                                           "tests/ref_submission.py"), done.stdout + done.stderr
    assert "1 of 1 passed" in done.stdout and "emulated" not in done.stdout
    done = run_eval(ROOT, "test", "--submission", "tests/ref_submission.py", str(tmp_path / "spec.txt"))
    assert done.returncode == 0 and "1 of 1 passed" in done.stdout, done.stdout + done.stderr


def test_the_emulated_route_where_a_real_driver_is_already_loaded(gpu_machine_env):
    done = run_eval(ROOT, "test", "--only", "3", "--no-inspect", env=gpu_machine_env)
    assert done.returncode == 0 and done.stdout.startswith("emulated: ") and "1 of 1 passed" in done.stdout, \
        done.stdout + done.stderr
