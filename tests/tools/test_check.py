"""tools/check.py on the CPU: its cases, the inputs it builds (the board's contract, checked with
submission.validate_inputs), the guard bands around c, the float64 reference, the verdicts, the
ladder's stopping rule, the subprocess handling (hang, crash) and the refusal without CUDA."""
import os
import subprocess
import sys

import pytest
import torch

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import check  # noqa: E402
import reference  # noqa: E402
import submission  # noqa: E402

CASES = {case.name: case for case in check.ladder()}


NO_CUDA_LINE = ("check.py needs a CUDA GPU (torch.cuda.is_available() is False); without one, python tools/check.py "
                "--emulate runs the ladder's stages that fit the sm_100a emulator\n")


def test_the_ladder_climbs_from_one_tile_to_the_benchmarks():
    cases = check.ladder()
    assert len(CASES) == len(cases), "case names must be unique"
    stages = list(dict.fromkeys(case.stage for case in cases))
    assert stages == ["one_tile", "partial_tiles", "all_values", "many_groups", "task_tests", "benchmarks"]
    assert [case.stage for case in cases] == sorted((case.stage for case in cases), key=stages.index)
    assert (CASES["one_tile"].m, CASES["one_tile"].n, CASES["one_tile"].k) == ((128,), (256,), (256,))
    singles = {case.m[0] for case in cases if case.stage == "partial_tiles" and case.groups == 1}
    assert {1, 7, 40, 129} <= singles
    assert any(case.groups == 2 and len(set(case.m)) == 2 and set(case.m) <= {1, 7, 40, 129}
               for case in cases if case.stage == "partial_tiles")
    assert {case.groups for case in cases if case.stage == "many_groups"} == {16, 32}
    for case in cases:
        assert len(case.m) == len(case.n) == len(case.k)
        assert all(n % 128 == 0 for n in case.n) and all(k % 256 == 0 for k in case.k), case.name
    assert len(set(CASES["g32"].m)) > 16 and min(CASES["g32"].m) == 1
    _, benchmarks, _ = check.harness.load_task(ROOT / "task.yml")
    assert [name for name in CASES if name.startswith(("test", "bench"))] == (
        [f"test{i}" for i in range(1, 11)] + [f"bench{i}" for i in range(1, 5)])
    assert CASES["bench1"].m == tuple(benchmarks[0]["m"]) and CASES["bench1"].k == (7168,) * 8
    # The cases of the Hopper check this tool replaced (tools/sm90_check.py), same names and shapes
    assert (CASES["m300"].m, CASES["m300"].n, CASES["m300"].k) == ((300,), (384,), (512,))
    assert (CASES["n256_k256"].m, CASES["n256_k256"].n) == ((33, 200), (256, 256))
    assert (CASES["one_group"].m, CASES["one_group"].k) == ((77,), (512,))
    assert CASES["full_values"].all_values and CASES["full_values"].m == (72, 260)
    assert CASES["g16"].m == tuple(range(8, 8 + 16 * 19, 19))


@pytest.mark.parametrize("name", ["one_tile", "m1", "m7_m129", "full_values", "g32", "test9"])
def test_inputs_follow_the_contract(name):
    case = CASES[name]
    data, guards = check.make_input(case, "cpu")
    assert submission.validate_inputs(data) == tuple(zip(case.m, case.n, case.k))
    for (a, b, c), (sfa, sfb), (m, n, k, l) in zip(data[0], data[1], data[3]):
        assert (a.dtype, tuple(a.shape), a.stride()) == (torch.float4_e2m1fn_x2, (m, k // 2, 1), (k // 2, 1, m * k // 2))
        assert (b.dtype, tuple(b.shape), b.stride()) == (torch.float4_e2m1fn_x2, (n, k // 2, 1), (k // 2, 1, n * k // 2))
        assert (c.dtype, tuple(c.shape), c.stride()) == (torch.float16, (m, n, 1), (n, 1, m * n))
        assert torch.isnan(c).all() and l == 1
        assert (tuple(sfa.shape), tuple(sfb.shape)) == ((m, k // 16, 1), (n, k // 16, 1))
        assert sfa.dtype == sfb.dtype == torch.float8_e4m3fn
        codes = torch.cat((a.view(torch.uint8).flatten(), b.view(torch.uint8).flatten()))
        scales = torch.cat((sfa.float().flatten(), sfb.float().flatten()))
        if case.all_values:  # every e2m1 code in both nibbles; scales from 1/8 to 3.75
            assert set((codes & 15).tolist()) == set(range(16)) == set((codes >> 4).tolist())
            assert scales.min() >= 0.125 and scales.max() <= 3.75 and len(set(scales.tolist())) > 20
        else:  # the board's value sets
            assert (codes & 0b0100_0100).eq(0).all() and set(scales.tolist()) <= {1.0, 2.0}
    assert len(guards) == case.groups


@pytest.mark.parametrize("name", ["m129", "m7_m129", "test9"])
def test_blocked_scales_are_the_boards_layout(name):
    """Compared with reference.create_reordered_scale_factor_tensor (the board's construction) at
    every real row and scale column; the padding holds 1s and 2s."""
    data, _ = check.make_input(CASES[name], "cpu")
    for (sfa, sfb), reordered, (m, n, k, _) in zip(data[1], data[2], data[3]):
        for scales, mine, rows in ((sfa, reordered[0], m), (sfb, reordered[1], n)):
            boards = reference.create_reordered_scale_factor_tensor(1, rows, k, scales).cpu()  # CUDA on a GPU
            assert tuple(mine.shape) == tuple(boards.shape) and mine.stride() == boards.stride()
            r = torch.arange(rows).view(-1, 1)
            j = torch.arange(k // 16).view(1, -1)
            index = (r % 32, (r % 128) // 32, r // 128, j % 4, j // 4, 0)
            assert torch.equal(mine.view(torch.uint8)[index], boards.view(torch.uint8)[index])
            assert torch.equal(mine.view(torch.uint8)[index], scales[:, :, 0].view(torch.uint8))
            assert set(mine.float().unique().tolist()) <= set(scales.float().unique().tolist()) | {1.0, 2.0}


@pytest.mark.parametrize("name", ["one_tile", "m7_m129", "full_values", "test4"])
def test_float64_reference_equals_reference_ref_kernel(name):
    data, _ = check.make_input(CASES[name], "cpu")
    expected = check.reference_outputs(data)
    fresh_c = [(a, b, torch.empty_like(c)) for a, b, c in data[0]]
    boards = reference.ref_kernel((fresh_c, data[1], data[2], data[3]))
    for got, want in zip(boards, expected):
        assert want.dtype == torch.float16 and torch.equal(got[:, :, 0], want)
    assert any(want.abs().max() > 0 for want in expected)


def written_correctly(name):
    data, guards = check.make_input(CASES[name], "cpu")
    expected = check.reference_outputs(data)
    for (_, _, c), want in zip(data[0], expected):
        c[:, :, 0] = want
    return data, guards, expected


def test_guard_bands_catch_writes_just_outside_c():
    data, guards, expected = written_correctly("m7_m129")
    assert [guard.writes_outside() for guard in guards] == [0, 0]
    c = data[0][1][2]
    guard = guards[1]
    assert c.data_ptr() == guard.buffer.data_ptr() + guard.guard * 2  # c is a view inside the buffer
    guard.buffer[guard.guard - 1] = 0.0  # the element before c
    guard.buffer[guard.guard + c.numel()] = float("nan")  # the one after it, even with a NaN
    assert guards[1].writes_outside() == 2
    result = check.judge(data, [c for _, _, c in data[0]], expected, guards, 0.5)
    assert result.verdict == "OUTSIDE" and result.message == "elements written outside c (group 1: 2)"


def test_judge_passes_right_values_and_fails_wrong_ones():
    data, guards, expected = written_correctly("m7_m129")
    outputs = [c for _, _, c in data[0]]
    result = check.judge(data, outputs, expected, guards, 0.5)
    assert (result.verdict, result.error_over_tol, result.seconds) == ("PASS", 0.0, 0.5)
    c = data[0][1][2]
    c[3, 5, 0] = expected[1][3, 5] + 1.0
    result = check.judge(data, outputs, expected, guards, 0.5)
    assert result.verdict == "FAIL" and result.error_over_tol > 1
    assert result.message.startswith("group 1 (c): 1 of") and "at (3, 5)" in result.message
    c[0, 0, 0] = float("nan")
    assert check.judge(data, outputs, expected, guards, 0.5).error_over_tol == float("inf")
    assert check.judge(data, outputs[:1], expected, guards, 0.5).verdict == "FAIL"


def test_judge_checks_c_even_when_other_tensors_are_returned():
    data, guards = check.make_input(CASES["m40"], "cpu")
    expected = check.reference_outputs(data)
    result = check.judge(data, [want.unsqueeze(-1) for want in expected], expected, guards, 0.1)
    assert result.verdict == "FAIL" and result.message.startswith("group 0 (c):")  # c is still NaN


@pytest.fixture
def cpu_case(tmp_path, monkeypatch):
    """run_case_here on the CPU with a submission file written for the test (restoring the module
    `submission` that other tests import)."""
    monkeypatch.setitem(sys.modules, "submission", submission)

    def run(name, source):
        path = tmp_path / "candidate.py"
        path.write_text(source)
        return check.run_case_here(CASES[name], path, device="cpu")

    return run


def test_one_case_end_to_end_on_the_cpu(cpu_case):
    result = cpu_case("m7_m129", "from reference import ref_kernel as custom_kernel\n")
    assert (result.verdict, result.error_over_tol, result.message) == ("PASS", 0.0, "")
    result = cpu_case("m7_m129", "def custom_kernel(data):\n    return [c for _, _, c in data[0]]\n")
    assert result.verdict == "FAIL" and result.error_over_tol == float("inf")  # c left NaN
    result = cpu_case("m40", "def custom_kernel(data):\n    raise RuntimeError('boom')\n")
    assert result == check.Result("ERROR", None, result.seconds, "custom_kernel raised RuntimeError: boom (at candidate.py:2)")


def test_a_write_one_row_past_c_is_caught_end_to_end(cpu_case):
    overrun = (
        "import torch\n"
        "from reference import ref_kernel\n\n"
        "def custom_kernel(data):\n"
        "    out = ref_kernel(data)\n"
        "    c = data[0][0][2]\n"
        "    m, n = c.shape[:2]\n"
        "    torch.as_strided(c, (n,), (1,), c.storage_offset() + m * n).fill_(0)  # row M, past c\n"
        "    return out\n")
    result = cpu_case("m7", overrun)
    assert result.verdict == "OUTSIDE" and result.message == "elements written outside c (group 0: 128)"


def ladder_with(verdicts, **options):
    """Run the ladder with a fake run_one: PASS except the given {case name: verdict}."""
    lines, ran = [], []

    def run_one(case):
        ran.append(case.name)
        return check.Result(verdicts.get(case.name, "PASS"), 0.0, 1.0, "why")

    failure = check.run_ladder(check.ladder(), run_one, out=lines.append, **options)
    return failure, ran, lines


def test_next_steps_under_the_emulator_keep_the_submission_and_need_no_gpu():
    """Issue 26, item 2: the printed commands test the same file (a dropped --submission re-tested the
    repository's and printed PASS), are the emulator's (no compute-sanitizer), and have no placeholder."""
    _, _, lines = ladder_with({"m7_m129": "FAIL"}, emulate=True, config="safe", flags=" --submission v2.py")
    steps = lines[lines.index("stopped after stage partial_tiles: first failure m7_m129 (FAIL). Next:") + 1:]
    assert [step.split("    #")[0] for step in steps] == [
        "  python tools/check.py --emulate --case m7_m129 --config safe --submission v2.py",
        '  python tools/emulate.py submission --submission v2.py --config safe --mode adversarial --seed 1 '
        '--spec "m: [7, 129]; n: [256, 128]; k: [256, 512]; g: 2; seed: 1"']


def test_the_ladder_stops_after_the_first_stage_with_a_failure():
    failure, ran, lines = ladder_with({"m40": "FAIL"})
    assert (failure[0].name, failure[1].verdict) == ("m40", "FAIL")
    assert ran == ["one_tile"] + [name for name, case in CASES.items() if case.stage == "partial_tiles"]
    assert lines[0].split() == ["stage", "case", "G", "M", "N", "K", "result", "err/tol", "seconds"]
    assert "stopped after stage partial_tiles: first failure m40 (FAIL). Next:" in lines
    assert "  python tools/check.py --case m40    # the same case in one process, its full message" in lines
    assert any("compute-sanitizer --tool racecheck python tools/check.py --case m40" in line for line in lines)


def test_the_ladder_stops_at_once_after_a_hang():
    failure, ran, lines = ladder_with({"m7": "HANG", "m40": "FAIL"})
    assert (failure[0].name, failure[1].verdict) == ("m7", "HANG") and ran == ["one_tile", "m1", "m7"]
    assert any("--tool synccheck python tools/check.py --case m7" in line for line in lines)


def test_the_ladder_passes_when_every_case_does():
    failure, ran, lines = ladder_with({})
    assert failure is None and ran == list(CASES)
    assert lines[-1] == f"all {len(CASES)} cases passed. Next: python eval.py test, then python eval.py benchmark"


def test_a_case_process_reports_its_result_hang_or_crash():
    line = check.RESULT_PREFIX + '{"verdict": "FAIL", "error_over_tol": Infinity, "seconds": 2.5, "message": "m"}'
    done = check.run_in_subprocess([sys.executable, "-c", f"print('noise'); print({line!r})"], timeout=60)
    assert done == check.Result("FAIL", float("inf"), 2.5, "m")
    hung = check.run_in_subprocess([sys.executable, "-c", "import time; time.sleep(60)"], timeout=1)
    assert hung.verdict == "HANG" and hung.message == "no result after 1 s: killed"
    crashed = check.run_in_subprocess([sys.executable, "-c", "import sys; print('oops', file=sys.stderr); sys.exit(3)"],
                                      timeout=60)
    assert crashed.verdict == "CRASH" and crashed.message == "exit code 3, no result; last stderr line: oops"


def run_tool(*args):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, str(ROOT / "tools" / "check.py"), *args], env=env, text=True,
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=120)


@pytest.mark.parametrize("args", [[], ["--case", "m7"], ["--stage", "benchmarks"]])
def test_without_cuda_it_exits_2_with_one_line(args):
    done = run_tool(*args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == NO_CUDA_LINE


def test_list_and_bad_names_need_no_gpu():
    done = run_tool("--list")
    assert done.returncode == 0
    rows = [line.split() for line in done.stdout.splitlines()]
    assert [row[1] for row in rows[1:]] == list(CASES) and rows[0][:2] == ["stage", "case"]
    done = run_tool("--case", "nope")
    assert done.returncode == 2 and done.stderr == "check.py: unknown case 'nope' (see --list)\n"


# ---------------------------------------------------------------- bisection, with stand-in runners

SHIPPED, SAFE = submission.SM100_SHIPPED, submission.SM100_SAFE
SWITCHES = [field.name for field in check.dataclasses.fields(submission.Sm100Config)]
FEWEST_CHANGES = (lambda config: len(config.changes_from(SHIPPED)), "fewest switches changed from shipped")


LINE = (184, 'SM100_CONFIG = "shipped"', "shipped")


def bisect_with(breaks, failing=SHIPPED, ranking=FEWEST_CHANGES, switches=SWITCHES, first="m7", last=None):
    """Bisect a failure of case `first` with a stand-in runner: a case HANGs under a configuration
    where breaks(config, case name) is true, else passes. Returns (configuration found, output
    lines, runs)."""
    runs, lines = [], []

    def run_case(case, config):
        runs.append((config.describe(), case.name))
        hangs = breaks(config, case.name)
        return check.Result("HANG" if hangs else "PASS", None, 2.0 if hangs else 1.0)

    found = check.bisect_failure(CASES[first], check.Result("HANG", None, 180.0), check.ladder(), run_case, failing,
                                 SAFE, switches, ranking, out=lines.append, last=last, line=LINE)
    return found, lines, runs


def advice(config_text):
    """The last three lines of a bisection that found `config_text` (issue 21, item 5)."""
    return ['replace line 184 of submission.py (`SM100_CONFIG = "shipped"`) with:',
            f'    SM100_CONFIG = "{config_text}"', "(python tools/check.py --write makes this change after the bisection)"]


def switch_lines(lines):
    return [line for line in lines if line.startswith(("break", "no single switch"))]


def test_two_switches_that_hang_only_together_are_named_and_avoided():
    found, lines, runs = bisect_with(lambda config, case: config.pdl and config.l2_hints)
    assert switch_lines(lines) == [
        "break m7 together: pdl=on with l2_hints=on (undoing any one passes; none makes SM100_SAFE fail alone)"]
    assert found == submission.Sm100Config.parse("shipped,l2_hints=off")  # one switch changed, passes
    assert lines[-3:] == advice("shipped,l2_hints=off")
    assert lines[0] == "bisecting m7 (HANG under shipped), each run in its own process:"
    assert lines[1].split() == ["configuration", "run", "verdict", "seconds"]
    assert lines[2].split() == ["safe", "m7", "PASS", "1.0"]
    assert any(line.split() == ["shipped,pdl=off", "m7", "PASS", "1.0"] for line in lines)
    assert any(line.split() == ["shipped,epilogue=atoms", "m7", "HANG", "2.0"] for line in lines)
    assert lines[-5].split() == ["shipped,l2_hints=off", "ladder", f"({len(CASES)})", "PASS", f"{len(CASES):.1f}"]
    # Every configuration ran each case at most once, in its own run.
    assert len(runs) == len(set(runs)) and runs[0] == ("safe", "m7")
    assert not any(config == "shipped" for config, _ in runs)  # known to fail: never rerun


def test_a_switch_flips_with_what_it_needs_and_the_row_says_so():
    """multicast needs a pair and clusters of two pairs need multicast (submission.NEEDS): undoing
    cta_group from shipped turns both off, and safe with multicast=on or cluster_pairs=2 brings what they
    need. Each row names every switch that ran; a kernel broken by multicast is pinned on it alone."""
    found, lines, runs = bisect_with(lambda config, case: config.multicast)
    assert ("shipped,cta_group=1,token_variants=64/128,multicast=off,cluster_pairs=1", "m7") in runs
    assert ("safe,cta_group=2,multicast=on", "m7") in runs
    assert ("safe,cta_group=2,multicast=on,cluster_pairs=2", "m7") in runs
    assert switch_lines(lines) == ["breaks m7 alone (each makes SM100_SAFE fail): multicast=on, cluster_pairs=2"]
    assert found.describe() == "shipped,multicast=off,cluster_pairs=1"
    for config, _ in runs:
        submission.Sm100Config.parse(config)  # every row parses back: nothing ran that a user could not ask for


def test_a_single_switch_that_breaks_is_named_and_only_it_is_undone():
    found, lines, _ = bisect_with(lambda config, case: config.l2_hints)
    assert switch_lines(lines) == ["breaks m7 alone (each makes SM100_SAFE fail): l2_hints=on"]
    assert found.describe() == "shipped,l2_hints=off"
    assert lines[-3:] == advice("shipped,l2_hints=off")


def test_when_only_safe_passes_safe_is_the_answer():
    found, lines, _ = bisect_with(lambda config, case: config != SAFE)
    named = switch_lines(lines)[0]
    assert named.startswith("breaks m7 alone (each makes SM100_SAFE fail): ")
    # every switch of shipped, flipped alone onto safe (with what it needs), makes safe fail
    assert set(named.split(": ")[1].split(", ")) == set(SHIPPED.changes_from(SAFE))
    assert found == SAFE and lines[-3:] == advice("safe")


def test_when_safe_fails_too_it_points_at_the_case_and_the_sanitizer():
    found, lines, runs = bisect_with(lambda config, case: True)
    assert found is None and runs == [("safe", "m7")]  # nothing else is worth running
    assert lines[3] == ("SM100_SAFE fails m7 too (HANG): no switch is to blame; the fault is in what every "
                        "configuration shares. Next:")
    assert lines[4:] == [
        "  timeout 600 compute-sanitizer --tool memcheck python tools/check.py --case m7 --config safe    "
        "# an illegal access can stall a pipeline",
        "  timeout 600 compute-sanitizer --tool synccheck python tools/check.py --case m7 --config safe    "
        "# barrier misuse",
        "  # a hang is usually an mbarrier waiting for arrivals or TMA bytes that never come: arrival counts, "
        "transaction byte counts, the 2-CTA pairing"]
    assert not any("SM100_CONFIG =" in line for line in lines)


def test_a_candidate_that_fails_a_later_case_is_passed_over():
    """shipped,multicast=off passes m7 but hangs on bench4 (as does every 2-CTA configuration with
    PDL): the ladder rows say so, and the configuration found passes every case."""
    def breaks(config, case):
        return (config.cta_group == 2 and config.multicast) or (case == "bench4" and config.cta_group == 2 and config.pdl)

    found, lines, runs = bisect_with(breaks)
    assert lines[-5 - check.LADDER_TRIES].split() == ["shipped,multicast=off,cluster_pairs=1", "ladder:", "bench4", "HANG",
                                                      f"{len(CASES) + 1:.1f}"]
    assert found is not None and lines[-3:] == advice(found.describe())
    assert not any(breaks(found, name) for name in CASES)
    assert all((found.describe(), name) in runs for name in CASES)


def test_the_model_ranks_the_candidates_when_it_can():
    """A model that prefers 1-CTA configurations picks the 1-CTA one that passes, though it
    changes more switches than shipped,multicast=off."""
    def prefers_one_cta(config):
        return (config.cta_group == 2, len(config.changes_from(SHIPPED)))

    found, lines, _ = bisect_with(lambda config, case: config.cta_group == 2 and config.multicast,
                                  ranking=(prefers_one_cta, "a test model"))
    assert found.describe() == "shipped,cta_group=1,token_variants=64/128,multicast=off,cluster_pairs=1"
    assert "fastest configuration that passes the whole ladder (by a test model): shipped,cta_group=1,token_variants=64/128,multicast=off,cluster_pairs=1" in lines


def test_the_ranking_is_the_models_predicted_geomean_then_the_switches_changed():
    key, ranked_by = check.configuration_ranking(SHIPPED)
    assert ranked_by == "the B200 model's predicted geomean"
    assert key(SHIPPED)[0] < key(SAFE)[0]  # the model's +6% for the 1-CTA fallback
    # pdl has no term in the model: the same prediction, one switch more.
    pdl_off = SHIPPED.parse("shipped,pdl=off")
    assert key(pdl_off)[0] == key(SHIPPED)[0] and key(SHIPPED) < key(pdl_off)


def test_without_the_model_the_ranking_counts_switches(monkeypatch):
    monkeypatch.setattr(check, "ROOT", ROOT / "no such folder")
    key, ranked_by = check.configuration_ranking(SHIPPED)
    assert ranked_by == "fewest switches changed from shipped"
    assert (key(SHIPPED), key(SAFE)) == (0, len(SAFE.changes_from(SHIPPED)))


def test_on_hopper_only_pdl_is_bisected():
    found, lines, runs = bisect_with(lambda config, case: config.pdl, switches=check.HOPPER_SWITCHES)
    assert {config for config, _ in runs} == {"safe", "safe,pdl=on", "shipped,pdl=off"}
    assert switch_lines(lines) == ["breaks m7 alone (each makes SM100_SAFE fail): pdl=on"]
    assert found.describe() == "shipped,pdl=off"


def test_a_case_process_runs_under_the_given_configuration(cpu_case, tmp_path):
    source = ("from reference import ref_kernel\nSM100_CONFIG = 'shipped'\n\n"
              "def custom_kernel(data):\n"
              "    assert SM100_CONFIG == 'safe,pdl=on', SM100_CONFIG\n"
              "    return ref_kernel(data)\n")
    path = tmp_path / "configured.py"
    path.write_text(source)
    assert check.run_case_here(CASES["m7"], path, device="cpu", config="safe,pdl=on").verdict == "PASS"
    assert check.run_case_here(CASES["m7"], path, device="cpu").verdict == "ERROR"


# ---------------------------------------------------------------- the cuBLAS rung (issue 21, item 9)


def test_when_no_tcgen05_configuration_passes_the_bisection_ends_at_cublas_and_says_its_cost():
    timed = []

    def time_case(case):
        timed.append(case.name)
        return check.Result("PASS", 0.0, 1.0, mean_us={"bench1": 80.0, "bench2": 40.0}.get(case.name, 20.0))

    last = check.LastRung("", time_case, model_us=13.29)
    found, lines, runs = bisect_with(lambda config, case: config != check.CUBLAS_RUNG, last=last)
    assert found == check.CUBLAS_RUNG
    assert ("cublas", "m7") == next(run for run in runs if run[0] == "cublas")  # the failing case first
    assert all(("cublas", name) in runs for name in CASES) and timed == ["bench1", "bench2", "bench3", "bench4"]
    assert lines[-5] == ("no tcgen05 configuration passes; the last rung does: cuBLAS per group (torch._scaled_mm, "
                         "as the board's reference), not this file's kernel")
    geomean = (80 * 40 * 20 * 20) ** 0.25
    assert lines[-4] == ("cublas cost (mean us per call, 10 repeats of 15 calls after an L2 flush): bench1 80.00, "
                         f"bench2 40.00, bench3 20.00, bench4 20.00; geomean {geomean:.2f} us, "
                         f"{geomean / 13.29:.1f}x the B200 model's 13.29 us for the shipped kernel")
    assert lines[-3:] == advice("cublas")


def test_where_cublas_cannot_run_the_bisection_says_so_in_one_line():
    last = check.LastRung("it needs a B200: cuBLAS has no FP4 GEMM on compute capability 9.0")
    found, lines, runs = bisect_with(lambda config, case: True, last=last)
    assert found is None and not any(config == "cublas" for config, _ in runs)
    assert lines[-1] == ('the last rung, SM100_CONFIG = "cublas", is not tried: it needs a B200: cuBLAS has no '
                         "FP4 GEMM on compute capability 9.0")


def test_a_case_process_takes_the_cublas_rung(cpu_case, tmp_path):
    path = tmp_path / "rungs.py"
    path.write_text("from reference import ref_kernel\nSM100_CONFIG = 'shipped'\nCUBLAS = 'cublas'\n\n"
                    "def custom_kernel(data):\n    assert SM100_CONFIG == 'cublas'\n    return ref_kernel(data)\n")
    assert check.run_case_here(CASES["m7"], path, device="cpu", config="cublas").verdict == "PASS"
    assert check.parse_rung(submission, " cublas") == check.CUBLAS_RUNG


# ---------------------------------------------------------------- the SM100_CONFIG line (issue 21, item 5)


def test_write_replaces_the_config_line_and_nothing_else(tmp_path):
    path = tmp_path / "submission.py"
    source = (ROOT / "submission.py").read_text()
    path.write_text(source)
    number, text, value = check.harness.config_line(path)
    assert text == f'SM100_CONFIG = "{value}"' and source.splitlines()[number - 1] == text
    assert check.harness.write_config_line(path, number, "shipped,multicast=off") == 'SM100_CONFIG = "shipped,multicast=off"'
    lines, before = path.read_text().splitlines(), source.splitlines()
    assert lines[number - 1] == 'SM100_CONFIG = "shipped,multicast=off"'
    assert lines[:number - 1] == before[:number - 1] and lines[number:] == before[number:]
    assert check.harness.config_line(path)[2] == "shipped,multicast=off"


def _submission_with_line(tmp_path, line):
    path = tmp_path / "submission.py"
    path.write_text((ROOT / "submission.py").read_text().replace('SM100_CONFIG = "shipped"', line, 1))
    return path


@pytest.mark.parametrize("line, said", [
    ('SM100_CONFIG = "bogus"', "of submission.py (`SM100_CONFIG = \"bogus\"`): unknown configuration 'bogus'"),
    ('SM100_CONFIG = "cta_group=3"', "cta_group must be 1 or 2, got 3"),
    ("SM100_CONFIG = shipped", "(`SM100_CONFIG = shipped`): SM100_CONFIG must be a quoted text"),
])
def test_a_malformed_config_line_is_one_line_on_any_machine(tmp_path, line, said):
    path = _submission_with_line(tmp_path, line)
    done = run_tool("--submission", str(path))
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("check.py: ") and said in done.stderr
    assert f"line {check.harness.config_line(ROOT / 'submission.py')[0]} of submission.py" in done.stderr


@pytest.mark.parametrize("text, said", [("bogus=1", "--config bogus=1: 'bogus=1': expected field=value"),
                                        pytest.param("cta_group=x", "--config cta_group=x: 'cta_group=x': cta_group is an integer (fields: ",
                                                     marks=pytest.mark.long)])
def test_config_is_checked_before_the_gpu_is_looked_for(text, said):
    done = run_tool("--config", text)
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"check.py: {said}") and "CUDA" not in done.stderr
    done = run_tool("--config", "cublas")  # a rung of the file: valid, then the GPU is looked for
    assert done.stderr == NO_CUDA_LINE


# ---------------------------------------------------------------- the emulator's first check (issue 48)


def test_under_the_emulator_the_ladder_ends_with_the_wraps_stage():
    """--emulate: the stages that fit the emulator, then eval.py's wrap cases at their SM pairs (each row says how
    many); a GPU's ladder has no wraps stage (its benchmarks wrap the pipelines at its own worker count)."""
    emulated = check.ladder_for(True)
    assert [case.stage for case in emulated if case.stage not in check.EMULATED_STAGES[:-1]] == ["wraps"] * 3
    wraps = emulated[-3:]
    assert [(case.name, case.workers) for case in wraps] == [("wrap_64", 1), ("wrap_192", 1), ("wrap_2pairs", 6)]
    for case, (spec, pairs, _) in zip(wraps, check.harness.WRAP_CASES):
        assert check.case_spec(case).rsplit(";", 1)[0] == spec.rsplit(";", 1)[0] and case.workers == pairs
    assert "wraps" not in {case.stage for case in check.ladder_for(False)}
    assert check.format_row(wraps[0], check.Result("PASS", 0.0, 1.0, runs_as="shipped,cluster_pairs=1")).endswith(
        "  (1 SM pair; runs as shipped,cluster_pairs=1)")
    steps = check.next_steps(wraps[2], check.Result("RACE", None, 1.0), emulate=True)
    assert "--workers 6 --spec \"m: [129, 300]; n: [256, 256]; k: [2304, 256]; g: 2; seed: 1\"" in steps[1]


def test_races_go_with_emulate():
    done = run_tool("--no-races")
    assert done.returncode == 2 and done.stderr == ("check.py: --races/--no-races go with --emulate (race detection is "
                                                    "the emulator's)\n")


@pytest.mark.skipif(sys.version_info < (3, 10), reason="the DSL needs Python 3.10+")
@pytest.mark.parametrize("plant", [None, pytest.param("early_release", marks=pytest.mark.long),
                                   pytest.param("no_tail_fence", marks=pytest.mark.long),
                                   pytest.param("no_dealloc_barrier", marks=pytest.mark.long)])
def test_the_first_wrap_case_under_the_emulator(tmp_path, plant):
    """`check.py --emulate --case wrap_64`: the unmodified kernel passes with races on and its row says the
    configuration it ran as; each race of tests/kernel/planted_races.py is a RACE naming both accesses."""
    from planted_races import PLANTS, plant as planted

    args = ["--emulate", "--case", "wrap_64"] + (["--submission", str(planted(tmp_path, plant))] if plant else [])
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "check.py"), *args], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    row, *message = done.stdout.splitlines()
    assert row.startswith("wraps          wrap_64 ") and row.endswith(
        "  (1 SM pair; runs as shipped,token_variants=64/128,cluster_pairs=1)"), done.stdout + done.stderr[-2000:]
    if plant is None:
        assert done.returncode == 0 and " PASS " in row and not message, done.stdout
    else:
        assert done.returncode == 1 and " RACE " in row and message[0].startswith("    RACE race: "), done.stdout
        assert PLANTS[plant][2] in message[0], message
