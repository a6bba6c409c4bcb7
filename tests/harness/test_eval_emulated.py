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
                       "this CPU at a B200's worker count, with race detection (minutes; --reference checks the harness "
                       "alone in seconds)")
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
    # the row names the configuration test 3's shape runs as (issue 48, item 4): the plan's, not the file's line
    assert lines[3].startswith("  3  pass ") and lines[3].endswith("  (runs as shipped,token_variants=64/128)"), lines
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


@pytest.mark.long  # README's quick command within 4 minutes (issue 47): tools/emulate.py's case of the family stays quick
def test_the_emulated_route_where_a_real_driver_is_already_loaded(gpu_machine_env):
    done = run_eval(ROOT, "test", "--only", "3", "--no-inspect", env=gpu_machine_env)
    assert done.returncode == 0 and done.stdout.startswith("emulated: ") and "1 of 1 passed" in done.stdout, \
        done.stdout + done.stderr


WRAP_ROW = "  (1 SM pair; runs as shipped,token_variants=64/128,cluster_pairs=1)"


@pytest.mark.parametrize("plant", ["early_release", pytest.param("no_tail_fence", marks=pytest.mark.long),
                                   pytest.param("no_dealloc_barrier", marks=pytest.mark.long)])
def test_a_race_planted_in_the_kernel_fails_the_first_wrap_case(tmp_path, plant):
    """Issue 48: each race (tests/kernel/planted_races.py) fails `eval.py test` on its first wrap case (test 11: one
    pair, 4 tiles), the row naming the race; the early release passes at a B200's worker count (test 10 below, -m
    long), where no accumulator is used twice."""
    from planted_races import PLANTS, plant as planted

    path = planted(tmp_path, plant)
    done = run_eval(ROOT, "test", "--submission", str(path), "--only", "11", "--no-inspect")
    lines = done.stdout.splitlines()
    assert done.returncode == 1 and "0 of 1 passed" in lines, done.stdout + done.stderr
    assert lines[0].endswith("at a few SM pairs, where every pipeline wraps, with race detection (minutes; "
                             "--reference checks the harness alone in seconds)"), lines[0]
    assert lines[4].startswith(" 11  FAIL ") and lines[4].endswith(WRAP_ROW), lines
    report = " ".join(lines[5:])
    assert "custom_kernel raised RaceError: race: " in report and PLANTS[plant][2] in report, done.stdout


@pytest.mark.long
def test_the_early_release_passes_at_a_b200s_worker_count(tmp_path):
    """Why the wrap cases are there: the early release passes test 10 at 74 pairs, races on."""
    from planted_races import plant

    done = run_eval(ROOT, "test", "--submission", str(plant(tmp_path, "early_release")), "--only", "10", "--no-inspect")
    assert done.returncode == 0 and "1 of 1 passed" in done.stdout, done.stdout + done.stderr


@pytest.mark.long
@pytest.mark.parametrize("number, ran", [(11, WRAP_ROW), (12, "  (1 SM pair; runs as shipped,cluster_pairs=1)"),
                                         (13, "  (6 SM pairs; runs as shipped,token_variants=64/128)")])
def test_the_wrap_cases_pass_unplanted(number, ran):
    done = run_eval(ROOT, "test", "--only", str(number), "--no-inspect")
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[4].startswith(f" {number}  pass ") and lines[4].endswith(ran), done.stdout


@pytest.mark.long
def test_no_races_says_what_it_gives_up():
    """--no-races, in the first line (and --help, test_first_checks.py); the planted race then passes unseen
    (test_the_first_checks_without_races_miss_the_planted_race)."""
    done = run_eval(ROOT, "test", "--only", "11", "--no-races", "--no-inspect")
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[0].endswith(
        "at a few SM pairs, where every pipeline wraps, without race detection (--no-races: a pass vouches only for "
        "the interleaving that ran) (minutes; --reference checks the harness alone in seconds)"), done.stdout


@pytest.mark.long
def test_the_first_checks_without_races_miss_the_planted_race(tmp_path):
    from planted_races import plant

    done = run_eval(ROOT, "test", "--submission", str(plant(tmp_path, "early_release")), "--only", "11", "--no-races",
                    "--no-inspect")
    assert done.returncode == 0 and "1 of 1 passed" in done.stdout, done.stdout + done.stderr
