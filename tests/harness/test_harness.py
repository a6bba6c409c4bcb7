"""eval.py: the spec parser, task.yml, and whole runs in both faces (local, and the board's protocol)."""
import io
import os
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, quick_first, run_eval, run_popcorn

import eval as harness

SPEC_2_GROUPS = "m: [40, 72]; n: [128, 256]; k: [256, 512]; g: 2; seed: 1111\n"
SPEC_1_GROUP = "m: [200]; n: [128]; k: [256]; g: 1; seed: 5\n"
WRONG_SUBMISSION = "def custom_kernel(data):\n    return [c for _, _, c in data[0]]\n"  # c untouched


def stderr_is_one_line(done) -> bool:
    return len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


# --- spec lines and task.yml ---------------------------------------------------------------


@pytest.mark.parametrize("line, expected", [
    ("m: [96, 128]; n: [128, 256]; k: [256, 512]; g: 2; seed: 1111",
     {"m": (96, 128), "n": (128, 256), "k": (256, 512), "g": 2, "seed": 1111}),
    ("  size : (1, 2) ;name: foo; x: -3; y: +4; e: []", {"size": (1, 2), "name": "foo", "x": -3, "y": 4, "e": ()}),
    ("m: [1, x]", {"m": "[1, x]"}),  # like the board: a list that is not all integers stays text
])
def test_spec_parser_accepts_good_lines(line, expected):
    assert harness.parse_spec_line(line) == expected


@pytest.mark.parametrize("line", ["", "m: 1.5", "m [1, 2]", "m: 1;", "m: [1, 2", "1m: 2", "m: 1 2"])
def test_spec_parser_rejects_malformed_lines(line):
    with pytest.raises(harness.SpecError, match="invalid test case"):
        harness.parse_spec_line(line)


def test_board_seed_is_mixed_into_test_seeds(tmp_path):
    spec = tmp_path / "spec.txt"
    spec.write_text(SPEC_2_GROUPS + SPEC_1_GROUP)
    plain, mixed = harness.get_test_cases(spec, None), harness.get_test_cases(spec, 7)
    assert plain[0].args["seed"] == 1111 and plain[0].spec == SPEC_2_GROUPS.strip()
    assert mixed[0].args["seed"] == 1111 + (1111 + 7) * (1111 + 7 + 1) // 2
    assert plain[1].args["seed"] == 5 and mixed[1].args["seed"] == 5 + (5 + 7) * (5 + 7 + 1) // 2


def test_stats_match_their_definition():
    stats = harness.calculate_stats([10.0, 12.0, 14.0, 16.0])
    assert (stats.runs, stats.mean, stats.best, stats.worst) == (4, 13.0, 10.0, 16.0)
    assert stats.std == pytest.approx((20 / 3) ** 0.5)
    assert stats.err == pytest.approx(stats.std / 2)


def test_repeats_summary_flags_repeats_over_twice_the_median():
    summary = harness.summarize_repeats([50.0, 10.0, 11.0, 9.0, 10.5, 21.0, 10.0])
    assert summary.median == 10.5 and summary.stats.mean == pytest.approx(121.5 / 7)
    assert summary.slow == [(1, 50.0)]  # 21.0 is exactly 2x the median: not flagged
    line = harness.describe_slow_repeats(summary)
    assert line.startswith("1 of 7 repeats slower than 2x the median (10.50 us): #1 50.00 us;")
    assert "the mean counts them" in line
    assert harness.describe_slow_repeats(harness.summarize_repeats([10.0, 11.0, 12.0])) == ""
    many = harness.summarize_repeats([1.0] * 10 + [5.0] * 7)
    assert many.median == 1.0 and "#11 5.00 us" in harness.describe_slow_repeats(many)
    assert harness.describe_slow_repeats(many).count("#") == 5 and "and 2 more" in harness.describe_slow_repeats(many)


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_line_rewrites_itself_on_a_terminal_only():
    terminal, pipe = _Terminal(), io.StringIO()
    for stream in (terminal, pipe):
        progress = harness.ProgressLine(stream)
        progress.show("benchmark 1: 3 timed repeats, 1 s")
        progress.clear()
    assert terminal.getvalue() == "\r\033[Kbenchmark 1: 3 timed repeats, 1 s\r\033[K"
    assert pipe.getvalue() == ""


def test_task_yml_reader_agrees_with_yaml_and_the_board():
    yaml = pytest.importorskip("yaml")  # eval.py itself does not need it
    raw = yaml.safe_load((ROOT / "task.yml").read_text())
    tests, benchmarks, sol_us = harness.load_task(ROOT / "task.yml")
    assert tests == raw["tests"] and benchmarks == raw["benchmarks"]
    assert len(tests) == 10 and len(benchmarks) == 4
    # The board builds its task from these keys and rejects others (gpu-mode/kernelbot, task.py).
    assert set(raw) <= {"files", "lang", "description", "config", "templates", "tests", "benchmarks",
                        "ranking_by", "ranked_timeout", "test_timeout", "benchmark_timeout", "seed",
                        "multi_gpu", "libraries", "gpus"}
    assert raw["ranking_by"] == "geom" and raw["config"] == {"main": "eval.py"}
    for entry in tests + benchmarks:  # the board passes every key on to generate_input
        assert set(entry) == {"m", "n", "k", "g", "seed"}
        assert len(entry["m"]) == len(entry["n"]) == len(entry["k"]) == entry["g"]
    cases = harness._select_cases(benchmarks, None, sol_us)
    assert [case.sol_us for case in cases] == [18.833, 10.667, 2.406, 1.525]
    assert cases[2].test.args == {"m": (192, 320), "n": (3072, 3072), "k": (4096, 4096), "g": 2, "seed": 1111}


# --- local face ----------------------------------------------------------------------------


def test_local_test_one_case(harness_dir):
    done = run_eval(harness_dir, "test", "--submission", "tests/ref_submission.py", "--only", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    assert ["1", "pass"] == rows[2][:2] and rows[2][-3:] == ["96,128", "128,256", "256,512"]
    assert "1 of 1 passed" in done.stdout
    assert "inspection" not in done.stdout  # --only does not pay for it


def test_default_paths_do_not_depend_on_the_current_directory(harness_dir, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    done = run_eval(elsewhere, "test", "--only", "1", script=harness_dir / "eval.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 of 1 passed" in done.stdout
    # eval.py's own folder's submission.py, or its tests/ref_submission.py without a GPU
    assert str(harness_dir) in done.stdout


def test_help_documents_both_faces(harness_dir):
    done = run_eval(harness_dir, "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for words in ("POPCORN_FD=N python eval.py MODE SPEC_FILE", "test, benchmark, leaderboard or profile",
                  "112", "113", "--submission", "--only", "--verbose", "--plot", "--inspect", "mean"):
        assert words in text, words


def test_local_test_all_cases_default_submission(harness_dir):
    done = run_eval(harness_dir, "test")  # ./submission.py, here the reference-backed one
    assert done.returncode == 0, done.stdout + done.stderr
    assert "10 of 10 passed" in done.stdout
    assert sum(line.split()[1:2] == ["pass"] for line in done.stdout.splitlines()) == 10


def test_local_test_reports_mismatches(harness_dir):
    (harness_dir / "wrong.py").write_text(WRONG_SUBMISSION)
    done = run_eval(harness_dir, "test", "--submission", "wrong.py", "--only", "2")
    assert done.returncode == 1
    assert "  2  FAIL" in done.stdout and "0 of 1 passed" in done.stdout
    assert "elements mismatch" in done.stdout and "got" in done.stdout and "expected" in done.stdout


def test_local_test_reports_a_crashing_kernel(harness_dir):
    (harness_dir / "crash.py").write_text("def custom_kernel(data):\n    raise RuntimeError('boom')\n")
    done = run_eval(harness_dir, "test", "--submission", "crash.py", "--only", "3")
    assert done.returncode == 1
    assert "FAIL" in done.stdout and "custom_kernel raised RuntimeError: boom (at crash.py:2)" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_an_error_is_placed_in_the_users_code_not_in_a_library(harness_dir):
    (harness_dir / "crash.py").write_text("import json\n\ndef custom_kernel(data):\n    return json.loads('{')\n")
    done = run_eval(harness_dir, "test", "--submission", "crash.py", "--only", "1")
    assert done.returncode == 1
    assert "custom_kernel raised JSONDecodeError: " in done.stdout and "(at crash.py:4)" in done.stdout


def test_verbose_shows_the_full_traceback(harness_dir):
    (harness_dir / "crash.py").write_text("def custom_kernel(data):\n    raise RuntimeError('boom')\n")
    done = run_eval(harness_dir, "test", "--submission", "crash.py", "--only", "3", "--verbose")
    assert done.returncode == 1
    assert "| Traceback (most recent call last):" in done.stdout
    assert "raise RuntimeError('boom')" in done.stdout and "RuntimeError: boom" in done.stdout
    (harness_dir / "raises.py").write_text("raise ImportError('no such thing')\n")
    done = run_eval(harness_dir, "test", "--submission", "raises.py", "--verbose")
    assert done.returncode == 2
    assert "Traceback (most recent call last)" in done.stderr
    assert done.stderr.strip().splitlines()[-1] == "eval.py: cannot import raises.py: ImportError: no such thing (at raises.py:1)"


SM100_SUBMISSION = WRONG_SUBMISSION + "\n\ndef compile_sm100(num_groups):\n    return None\n"
FAKE_INSPECTION = ("import pathlib, sys\nprint('inspected', sys.argv[1], pathlib.Path(sys.argv[2]).resolve())\n"
                   "raise SystemExit(0 if 'pass' in open(sys.argv[2]).read() else 1)\n")


@pytest.mark.parametrize("verdict", ["pass", "fail"])
def test_inspection_runs_on_the_file_under_test(harness_dir, verdict):
    (harness_dir / "tools").mkdir()
    (harness_dir / "tools" / "inspect_sm100.py").write_text(FAKE_INSPECTION)
    (harness_dir / "submission.py").write_text(f"# {verdict}\nfrom reference import ref_kernel as custom_kernel\n"
                                               "def compile_sm100(num_groups):\n    return None\n")
    # --reference: the harness runs with the reference (this stand-in sm_100a kernel cannot run, and this copy
    # has no emulator), and the inspection still reads submission.py
    done = run_eval(harness_dir, "test", "--reference", "--only", "1", "--inspect")
    assert f"inspected --submission {(harness_dir / 'submission.py').resolve()}\n" in done.stdout
    assert done.returncode == (0 if verdict == "pass" else 1), done.stdout + done.stderr
    assert ("inspection: pass" if verdict == "pass" else "inspection: FAIL (exit code 1)") in done.stdout


def test_inspection_skips_a_file_without_an_sm100_kernel(harness_dir):
    (harness_dir / "tools").mkdir()
    (harness_dir / "tools" / "inspect_sm100.py").write_text(FAKE_INSPECTION)
    done = run_eval(harness_dir, "test", "--submission", "tests/ref_submission.py", "--only", "1", "--inspect")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "inspection: skipped, tests/ref_submission.py defines no compile_sm100" in done.stdout
    assert "inspected" not in done.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="the default inspection runs only without a GPU")
def test_a_full_run_without_a_gpu_inspects_unless_told_not_to(harness_dir):
    """A full run of the submission inspects it (here: skipped, the reference-backed file has no compile_sm100, and
    says so); --no-inspect does not. --reference checks the harness alone: no inspection, not even of submission.py
    (issue 48, item 7), unless --inspect asks (test_inspection_runs_on_the_file_under_test)."""
    (harness_dir / "tools").mkdir()
    (harness_dir / "tools" / "inspect_sm100.py").write_text(FAKE_INSPECTION)
    done = run_eval(harness_dir, "test")
    assert done.returncode == 0 and "10 of 10 passed" in done.stdout, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "inspection: skipped, submission.py defines no compile_sm100 (no sm_100a kernel)"
    done = run_eval(harness_dir, "test", "--no-inspect")
    assert done.returncode == 0 and "10 of 10 passed" in done.stdout and "inspect" not in done.stdout
    (harness_dir / "submission.py").write_text("# pass\nfrom reference import ref_kernel as custom_kernel\n"
                                               "def compile_sm100(num_groups):\n    return None\n")
    done = run_eval(harness_dir, "test", "--reference")  # the harness alone
    assert done.returncode == 0 and "10 of 10 passed" in done.stdout, done.stdout + done.stderr
    assert "inspect" not in done.stdout and done.stdout.splitlines()[0] == (
        "--reference: testing the harness with tests/ref_submission.py (the reference)")


@pytest.mark.parametrize("args, message", quick_first([
    (["bench"], "invalid choice"),
    ([], "required"),
    (["test", "--only", "11"], "--only 11: there are 10"),
    (["test", "--only", "x"], "invalid int value"),
    (["test", "--submission", "missing.py"], "submission file not found: missing.py"),
    (["test", "--submission", "syntax.py"], "cannot import syntax.py: SyntaxError"),
    (["test", "--submission", "empty.py"], "empty.py defines no function custom_kernel"),
    (["test", "--submission", "raises.py"], "cannot import raises.py: ImportError: no such thing"),
    (["test", "--plot", "x.png"], "--plot applies to benchmark"),
    (["benchmark", "--no-inspect"], "--inspect/--no-inspect apply to test"),
]))
def test_local_bad_use_is_one_line_and_exit_2(harness_dir, args, message):
    (harness_dir / "syntax.py").write_text("def custom_kernel(data)\n    return data\n")
    (harness_dir / "empty.py").write_text("custom_kernel = None\n")
    (harness_dir / "raises.py").write_text("raise ImportError('no such thing')\n")
    done = run_eval(harness_dir, *args)
    assert done.returncode == 2
    assert stderr_is_one_line(done) and message in done.stderr, done.stderr
    assert done.stdout == ""


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a GPU")
def test_local_benchmark_without_gpu_is_skipped_with_exit_3(harness_dir):
    done = run_eval(harness_dir, "benchmark")
    assert done.returncode == 3
    assert stderr_is_one_line(done) and "benchmark skipped: no CUDA GPU" in done.stderr


# --- the board's face (POPCORN_FD) -----------------------------------------------------------


def test_popcorn_test_mode_passes(harness_dir):
    # Blank lines are skipped (the board's parser would reject them); the board's own seed is taken.
    done, result, lines = run_popcorn(harness_dir, "test", "\n" + SPEC_2_GROUPS + "  \n" + SPEC_1_GROUP + "\n\n",
                                      seed=123456789)
    assert done.returncode == 0, done.stderr
    assert lines == [
        "test-count: 2",
        "test.0.spec: " + SPEC_2_GROUPS.strip(),
        "test.0.status: pass",
        "test.1.spec: " + SPEC_1_GROUP.strip(),
        "test.1.status: pass",
        "check: pass",
    ]


def test_popcorn_test_mode_reports_a_wrong_kernel(harness_dir):
    (harness_dir / "submission.py").write_text(WRONG_SUBMISSION)
    done, result, _ = run_popcorn(harness_dir, "test", SPEC_2_GROUPS + SPEC_1_GROUP)
    assert done.returncode == 112
    assert result["check"] == "fail" and result["test.0.status"] == "fail"
    assert result["test.0.error"].startswith("mismatch found! custom implementation doesn't match reference")


@pytest.mark.parametrize("spec, reason", quick_first([
    ("m: [40]; n: 1.5\n", "'m: [40]; n: 1.5': ' n: 1.5'"),
    (SPEC_1_GROUP + "m: [96]; n: [128]; k: [256]; g: 1; seed: x\n", "seed must be an integer, got 'x'"),
    ("m: [96]; n: [128 256]; k: [256]; g: 1; seed: 3\n", "n must be a list of positive integers"),
    ("m: [96]; n: [128]; k: [256]; g: 2; seed: 3\n", "g = 2 groups, but m, n, k have"),
    ("m: 96; n: [128]; k: [256]; g: 1; seed: 3\n", "m must be a list of positive integers"),
    ("m: [0]; n: [128]; k: [256]; g: 1; seed: 3\n", "m must be a list of positive integers"),
    ("m: [96]; n: [128]; k: [256]; g: 1; sed: 3\n", "unknown key 'sed'"),
    ("m: [96]; n: [128]; g: 1; seed: 3\n", "missing key 'k' (keys: m, n, k, g, seed)"),
    ("m: [96]; n: [128]; k: [256]; g: 1\n", "missing key 'seed'"),
    ("m: [96]; n: [128]; k: [100]; g: 1; seed: 3\n", "each k must be a multiple of 16"),
    ("garbage line\n", "'garbage line': 'garbage line' is not `key: value`"),
]))
def test_popcorn_malformed_spec_exits_113(harness_dir, spec, reason):
    done, _, lines = run_popcorn(harness_dir, "test", spec)
    assert done.returncode == 113 and lines == []
    assert stderr_is_one_line(done) and "invalid test case" in done.stderr and reason in done.stderr, done.stderr


@pytest.mark.parametrize("mode", ["test", "benchmark"])
def test_popcorn_spec_without_a_test_exits_113(harness_dir, mode):
    """The board's evaluator reports `check: pass` for an empty file in test mode: nothing checked."""
    done, _, lines = run_popcorn(harness_dir, mode, "\n  \n")
    assert done.returncode == 113 and lines == []
    assert stderr_is_one_line(done) and "no test cases in `spec.txt`" in done.stderr, done.stderr


def test_popcorn_missing_spec_file_exits_113(harness_dir):
    env = dict(os.environ, POPCORN_FD="1")
    done = subprocess.run([sys.executable, "eval.py", "test", "missing.txt"], cwd=harness_dir, env=env,
                          text=True, capture_output=True, stdin=subprocess.DEVNULL, timeout=300)
    assert done.returncode == 113 and done.stdout == ""
    assert stderr_is_one_line(done) and done.stderr.startswith("Could not open test file `missing.txt`: ")


def test_popcorn_unknown_mode_exits_2(harness_dir):
    done, _, lines = run_popcorn(harness_dir, "script", SPEC_1_GROUP)
    assert done.returncode == 2 and lines == []
    assert stderr_is_one_line(done) and "unknown mode 'script'" in done.stderr


@pytest.mark.parametrize("mode", quick_first(["test", "benchmark", "leaderboard", "profile"]))
def test_popcorn_unimportable_submission_fails_each_case_in_one_line(harness_dir, mode):
    (harness_dir / "submission.py").write_text("import no_such_module_here\n")
    done, result, lines = run_popcorn(harness_dir, mode, SPEC_1_GROUP)
    assert done.returncode == (0 if mode == "leaderboard" else 112), done.stderr
    assert "Traceback" not in done.stderr
    kind = "test" if mode == "test" else "benchmark"
    assert result[f"{kind}.0.status"] == "fail" and result["check"] == "fail"
    if torch.cuda.is_available() or mode == "test":
        assert result[f"{kind}.0.error"] == ("cannot import submission.py: ModuleNotFoundError: "
                                             "No module named 'no_such_module_here' (at submission.py:1)")


def test_popcorn_raising_submission_fails_in_one_line(harness_dir):
    (harness_dir / "submission.py").write_text("def custom_kernel(data):\n    raise RuntimeError('no GPU here')\n")
    done, result, lines = run_popcorn(harness_dir, "test", SPEC_2_GROUPS + SPEC_1_GROUP)
    assert done.returncode == 112 and "Traceback" not in done.stderr, done.stderr
    assert lines[2:4] == ["test.0.status: fail",
                          "test.0.error: custom_kernel raised RuntimeError: no GPU here (at submission.py:2)"]
    assert result["test.1.status"] == "fail" and result["check"] == "fail"


def test_popcorn_without_the_descriptor_open_writes_to_stdout(harness_dir):
    (harness_dir / "spec.txt").write_text(SPEC_1_GROUP)
    env = {k: v for k, v in os.environ.items() if k != "POPCORN_SEED"}
    env["POPCORN_FD"] = "97"  # not open in the child
    done = subprocess.run([sys.executable, "eval.py", "test", "spec.txt"], cwd=harness_dir, env=env,
                          text=True, capture_output=True, stdin=subprocess.DEVNULL, timeout=300)
    assert done.returncode == 0, done.stderr
    assert stderr_is_one_line(done) and "file descriptor 97 (POPCORN_FD) is not open" in done.stderr
    assert done.stdout.splitlines() == ["test-count: 1", "test.0.spec: " + SPEC_1_GROUP.strip(),
                                        "test.0.status: pass", "check: pass"]


def test_popcorn_from_another_directory_uses_eval_pys_folder(harness_dir, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    done, result, _ = run_popcorn(elsewhere, "test", SPEC_1_GROUP, script=harness_dir / "eval.py")
    assert done.returncode == 0 and result["check"] == "pass", done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a GPU")
@pytest.mark.parametrize("mode", ["benchmark", "profile"])
def test_popcorn_benchmark_without_gpu_fails_clearly(harness_dir, mode):
    done, result, _ = run_popcorn(harness_dir, mode, SPEC_1_GROUP)
    assert done.returncode == 112
    assert result["benchmark-count"] == "1" and result["benchmark.0.status"] == "fail"
    assert "needs a CUDA GPU" in result["benchmark.0.error"] and result["check"] == "fail"
    assert "benchmark.0.report" not in result


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a GPU")
def test_without_gpu_an_sm100_submission_needs_the_emulator_and_reference_tests_the_harness(harness_dir):
    """submission.py with an sm_100a kernel (here a wrong one) runs in the emulator on a CPU; where the
    emulator is absent (this copy has no emulator/) that is one line naming --reference, which tests the
    reference instead and says so. Without compile_sm100 the same wrong kernel is tested itself."""
    (harness_dir / "submission.py").write_text(SM100_SUBMISSION)
    done = run_eval(harness_dir, "test", "--only", "1")
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr.strip().splitlines() == ["eval.py: submission.py has a B200 kernel and there is no GPU here: "
                                                "running it needs the emulator (emulator/, tools/emulate.py); "
                                                "--reference tests the harness alone"]
    done = run_eval(harness_dir, "test", "--only", "1", "--reference")
    assert done.returncode == 0 and "1 of 1 passed" in done.stdout, done.stdout + done.stderr
    assert "--reference: testing the harness with tests/ref_submission.py (the reference)" in done.stdout
    (harness_dir / "submission.py").write_text(WRONG_SUBMISSION)
    done = run_eval(harness_dir, "test", "--only", "1")
    assert done.returncode == 1 and "0 of 1 passed" in done.stdout and "ref_submission" not in done.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a GPU")
def test_without_gpu_the_boards_channel_never_says_pass_for_a_submission_that_did_not_run(harness_dir):
    """Issue 21, item 2: the reference runs in place of the sm_100a submission, but the channel a
    program reads says fail, with the reason and what the reference showed; exit 112."""
    (harness_dir / "submission.py").write_text(SM100_SUBMISSION)
    done, result, lines = run_popcorn(harness_dir, "test", SPEC_2_GROUPS + SPEC_1_GROUP)
    assert done.returncode == 112, done.stderr
    assert "pass" not in {result["test.0.status"], result["test.1.status"], result["check"]}
    assert result["test.0.error"] == ("needs a CUDA GPU (sm_100a kernel); the harness passed with the reference")
    assert "testing the harness with tests/ref_submission.py (the reference)" in done.stderr
    # a submission without an sm_100a kernel runs itself on the CPU, and can pass there
    (harness_dir / "submission.py").write_text((ROOT / "tests" / "ref_submission.py").read_text())
    done, result, _ = run_popcorn(harness_dir, "test", SPEC_1_GROUP)
    assert done.returncode == 0 and result["check"] == "pass", done.stderr


# --- a worker that dies (issue 21, item 1) -------------------------------------------------------

DYING_SUBMISSIONS = {
    "exit code 5": "import sys\n\ndef custom_kernel(data):\n    sys.exit(5)\n",
    "signal 11": "import os, signal\n\ndef custom_kernel(data):\n    os.kill(os.getpid(), signal.SIGSEGV)\n",
}


@pytest.mark.parametrize("how", quick_first(DYING_SUBMISSIONS))
def test_a_dead_worker_fails_the_board_faces_test_and_the_next_one_runs(harness_dir, how):
    """The board's evaluator waits forever here (multiprocessing.Pool.apply on a dead worker)."""
    (harness_dir / "submission.py").write_text(DYING_SUBMISSIONS[how])
    done, result, lines = run_popcorn(harness_dir, "test", SPEC_2_GROUPS + SPEC_1_GROUP, timeout=120)
    assert done.returncode == 112, done.stderr
    assert lines == ["test-count: 2", "test.0.spec: " + SPEC_2_GROUPS.strip(), "test.0.status: fail",
                     f"test.0.error: worker died ({how})", "test.1.spec: " + SPEC_1_GROUP.strip(),
                     "test.1.status: fail", f"test.1.error: worker died ({how})", "check: fail"]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("how", quick_first(DYING_SUBMISSIONS))
def test_a_dead_worker_is_a_row_of_the_local_face(harness_dir, how):
    (harness_dir / "dies.py").write_text(DYING_SUBMISSIONS[how])
    (harness_dir / "two.txt").write_text(SPEC_1_GROUP + SPEC_2_GROUPS)
    done = run_eval(harness_dir, "test", "two.txt", "--submission", "dies.py", timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.count(f"       worker died ({how})\n") == 2 and "0 of 2 passed" in done.stdout
    assert done.stderr == ""


def test_a_submission_that_kills_its_worker_at_import_is_bad_use(harness_dir):
    (harness_dir / "dies.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    done = run_eval(harness_dir, "test", "--submission", "dies.py")
    assert done.returncode == 2 and stderr_is_one_line(done), done.stderr
    assert "cannot import dies.py: worker died (signal 11)" in done.stderr


# --- what came back (issue 21, item 4) ----------------------------------------------------------

RETURNS = {
    "None": ("def custom_kernel(data):\n    return None\n", "custom_kernel returned None instead of a list of 1 "
             "float16 tensors shaped [M, N, 1] (the c tensors: [200, 128, 1])"),
    "float32": ("def custom_kernel(data):\n    return [c.float() for _, _, c in data[0]]\n",
                "custom_kernel returned a list whose item 0 is a float32 tensor shaped [200, 128, 1] instead of"),
    "short": ("def custom_kernel(data):\n    return []\n", "custom_kernel returned a list of 0 items instead of"),
    "2d": ("def custom_kernel(data):\n    return [c[:, :, 0] for _, _, c in data[0]]\n",
           "item 0 is a float16 tensor shaped [200, 128] instead of"),
}


@pytest.mark.parametrize("kind", quick_first(RETURNS))
def test_what_came_back_is_named_before_any_value_check_in_both_faces(harness_dir, kind):
    code, said = RETURNS[kind]
    (harness_dir / "submission.py").write_text(code)
    done, result, _ = run_popcorn(harness_dir, "test", SPEC_1_GROUP)
    assert done.returncode == 112 and said in result["test.0.error"], result
    (harness_dir / "one.txt").write_text(SPEC_1_GROUP)
    done = run_eval(harness_dir, "test", "one.txt")
    assert done.returncode == 1 and said in done.stdout and "utils.py" not in done.stdout, done.stdout


def test_result_problem_accepts_the_c_tensors_and_names_the_first_wrong_item():
    data = harness.generate_input(m=(8, 16), n=(128, 256), k=(256, 256), g=2, seed=3)
    cs = [c for _, _, c in data[0]]
    assert harness.result_problem(data, cs) == "" and harness.result_problem(data, tuple(cs)) == ""
    assert "item 1 is a list" in harness.result_problem(data, [cs[0], [1]])
    assert harness.result_problem(data, cs[0]).startswith("custom_kernel returned a float16 tensor shaped [8, 128, 1]")


# --- local spec files and other submissions (issue 21, item 3) -------------------------------------


def test_local_face_takes_a_spec_file_and_another_submission(harness_dir):
    (harness_dir / "mine.txt").write_text("\n" + SPEC_2_GROUPS + SPEC_1_GROUP)
    (harness_dir / "v2.py").write_text((ROOT / "tests" / "ref_submission.py").read_text())
    done = run_eval(harness_dir, "test", "mine.txt", "--submission", "v2.py")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line[:3].strip().isdigit()]
    assert [row[:2] for row in rows] == [["1", "pass"], ["2", "pass"]]
    assert rows[0][-4:] == ["2", "40,72", "128,256", "256,512"] and rows[1][-4:] == ["1", "200", "128", "256"]
    assert "Tests of v2.py" in done.stdout and "2 of 2 passed" in done.stdout and "inspection" not in done.stdout
    (harness_dir / "wrong.py").write_text(WRONG_SUBMISSION)
    done = run_eval(harness_dir, "test", "mine.txt", "--submission", "wrong.py", "--only", "2")
    assert done.returncode == 1 and "  2  FAIL" in done.stdout and "0 of 1 passed" in done.stdout


@pytest.mark.parametrize("spec, message", quick_first([
    (None, "Could not open test file `missing.txt`"),
    ("m: [96]; n: [128]; k: [100]; g: 1; seed: 3\n", "each k must be a multiple of 16"),
    ("\n", "no test cases in `spec.txt`"),
]))
def test_a_bad_local_spec_file_is_one_line_and_exit_2(harness_dir, spec, message):
    if spec is not None:
        (harness_dir / "spec.txt").write_text(spec)
    done = run_eval(harness_dir, "benchmark" if spec == "\n" else "test", "missing.txt" if spec is None else "spec.txt")
    assert done.returncode == 2 and stderr_is_one_line(done) and message in done.stderr, done.stderr
    assert done.stdout == ""


# --- eval.py benchmark --baseline cublas (issue 21, item 9) ----------------------------------------


class FakeWorker:
    """Answers local_benchmark's requests: durations in ns, 20 us a call for the submission and 8 us
    under SM100_CONFIG = "cublas" (a request through harness._with_config)."""

    def __init__(self):
        self.requests = []

    def apply(self, function, *args, on_progress=None):
        self.requests.append(args[0] if function is harness._with_config else None)
        return [8000.0] * 5 if function is harness._with_config else [20000.0] * 5


def test_baseline_rows_follow_each_benchmark_with_the_ratio_of_the_means(capsys):
    _, benchmarks, sol_us = harness.load_task(ROOT / "task.yml")
    cases = harness._select_cases(benchmarks, None, sol_us)
    worker = FakeWorker()
    assert harness.local_benchmark(cases, worker, ROOT / "submission.py", None, False, baseline="cublas") == 0
    lines = capsys.readouterr().out.splitlines()
    assert worker.requests == [None] + [None, "cublas"] * 4  # the warm-up, then each benchmark and its baseline
    rows = [line.split() for line in lines if line.split()[:1] in (["1"], ["cublas"], ["mean"])]
    assert rows[0][:2] == ["1", "20.00"] and rows[1][:2] == ["cublas", "8.00"] and rows[2] == ["mean", "/", "cublas", "mean:", "2.50"]
    assert lines[-1].endswith("; cublas 8.00 us, ratio 2.50")


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 10,
                    reason="a B200 runs the baseline")
def test_baseline_cublas_says_in_one_line_why_it_cannot_run_here(harness_dir):
    (harness_dir / "submission.py").write_text("SM100_CONFIG = 'shipped'\n" + WRONG_SUBMISSION)
    done = run_eval(harness_dir, "benchmark", "--baseline", "cublas")
    assert done.returncode == 3 and stderr_is_one_line(done) and done.stdout == "", done.stderr
    assert "--baseline cublas needs a B200" in done.stderr
    assert ("no CUDA GPU here" if not torch.cuda.is_available() else "cuBLAS has no FP4 GEMM on compute capability") \
        in done.stderr
    (harness_dir / "submission.py").write_text(WRONG_SUBMISSION)
    done = run_eval(harness_dir, "benchmark", "--baseline", "cublas")
    assert done.returncode == 3 and "submission.py has no SM100_CONFIG line to set" in done.stderr
    done = run_eval(harness_dir, "test", "--baseline", "cublas")
    assert done.returncode == 2 and "--baseline applies to benchmark" in done.stderr
