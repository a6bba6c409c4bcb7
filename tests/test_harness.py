"""eval.py: the spec parser, task.yml, and whole runs in both faces (local, and the board's protocol)."""
import pytest
import torch

from conftest import ROOT, run_eval, run_popcorn

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
    spec.write_text(SPEC_2_GROUPS + "m: [40]; n: [128]; k: [256]; g: 1\n")
    plain, mixed = harness.get_test_cases(spec, None), harness.get_test_cases(spec, 7)
    assert plain[0].args["seed"] == 1111 and plain[0].spec == SPEC_2_GROUPS.strip()
    assert mixed[0].args["seed"] == 1111 + (1111 + 7) * (1111 + 7 + 1) // 2
    assert "seed" not in mixed[1].args


def test_stats_match_their_definition():
    stats = harness.calculate_stats([10.0, 12.0, 14.0, 16.0])
    assert (stats.runs, stats.mean, stats.best, stats.worst) == (4, 13.0, 10.0, 16.0)
    assert stats.std == pytest.approx((20 / 3) ** 0.5)
    assert stats.err == pytest.approx(stats.std / 2)


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
    if not torch.cuda.is_available():
        assert "inspection: tools/inspect_sm100.py not found, skipped" in done.stdout


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
    assert "FAIL" in done.stdout and "RuntimeError: boom (at crash.py:2)" in done.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="the inspection runs only without a GPU")
@pytest.mark.parametrize("exit_code", [0, 1])
def test_local_test_runs_the_inspection_tool(harness_dir, exit_code):
    (harness_dir / "tools").mkdir()
    (harness_dir / "tools" / "inspect_sm100.py").write_text(
        f"print('kernel  verdict')\nprint('g2      fake-{exit_code}')\nraise SystemExit({exit_code})\n")
    done = run_eval(harness_dir, "test", "--only", "1")
    assert "g2      fake-" + str(exit_code) in done.stdout
    assert done.returncode == exit_code
    assert ("inspection: pass" if exit_code == 0 else "inspection: FAIL (exit code 1)") in done.stdout


@pytest.mark.parametrize("args, message", [
    (["bench"], "invalid choice"),
    ([], "required"),
    (["test", "--only", "11"], "--only 11: there are 10"),
    (["test", "--only", "x"], "invalid int value"),
    (["test", "--submission", "missing.py"], "submission file not found: missing.py"),
    (["test", "--submission", "syntax.py"], "cannot import syntax.py: SyntaxError"),
    (["test", "--submission", "empty.py"], "empty.py defines no function custom_kernel"),
    (["test", "--submission", "raises.py"], "cannot import raises.py: ImportError: no such thing"),
])
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
    done, result, lines = run_popcorn(harness_dir, "test", SPEC_2_GROUPS + SPEC_1_GROUP)
    assert done.returncode == 0, done.stderr
    assert lines == [
        "test-count: 2",
        "test.0.spec: " + SPEC_2_GROUPS.strip(),
        "test.0.status: pass",
        "test.1.spec: " + SPEC_1_GROUP.strip(),
        "test.1.status: pass",
        "check: pass",
    ]


def test_popcorn_test_mode_with_the_boards_seed(harness_dir):
    done, result, _ = run_popcorn(harness_dir, "test", SPEC_1_GROUP, seed=123456789)
    assert done.returncode == 0 and result["check"] == "pass", done.stderr


def test_popcorn_test_mode_reports_a_wrong_kernel(harness_dir):
    (harness_dir / "submission.py").write_text(WRONG_SUBMISSION)
    done, result, _ = run_popcorn(harness_dir, "test", SPEC_2_GROUPS + SPEC_1_GROUP)
    assert done.returncode == 112
    assert result["check"] == "fail" and result["test.0.status"] == "fail"
    assert result["test.0.error"].startswith("mismatch found! custom implementation doesn't match reference")


@pytest.mark.parametrize("spec", ["m: [40]; n: 1.5\n", SPEC_1_GROUP + "\n" + SPEC_1_GROUP])
def test_popcorn_malformed_spec_exits_113(harness_dir, spec):
    done, _, lines = run_popcorn(harness_dir, "test", spec)
    assert done.returncode == 113 and lines == []
    assert stderr_is_one_line(done) and "invalid test case" in done.stderr


def test_popcorn_unknown_mode_exits_2(harness_dir):
    done, _, lines = run_popcorn(harness_dir, "script", SPEC_1_GROUP)
    assert done.returncode == 2 and lines == []
    assert stderr_is_one_line(done) and "unknown mode 'script'" in done.stderr


def test_popcorn_broken_submission_is_one_line(harness_dir):
    (harness_dir / "submission.py").write_text("import no_such_module_here\n")
    done, _, lines = run_popcorn(harness_dir, "test", SPEC_1_GROUP)
    assert done.returncode == 1
    assert lines == ["test-count: 1", "test.0.spec: " + SPEC_1_GROUP.strip()]
    assert stderr_is_one_line(done) and "No module named 'no_such_module_here'" in done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a GPU")
def test_popcorn_benchmark_without_gpu_fails_clearly(harness_dir):
    done, result, _ = run_popcorn(harness_dir, "benchmark", SPEC_1_GROUP)
    assert done.returncode == 112
    assert result["benchmark-count"] == "1" and result["benchmark.0.status"] == "fail"
    assert "needs a CUDA GPU" in result["benchmark.0.error"] and result["check"] == "fail"
