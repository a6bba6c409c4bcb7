"""What every tool a user runs first says before it runs anything (issue 48): a refused command line is refused before
torch or CuTe DSL is imported (item 6), a malformed SM100_CONFIG line is one line with the same exit status from
every tool (item 5), and the tools' own texts say what they do: the race detection a first check has and what
--no-races gives up (item 2), --reference without the inspection, configuration texts that parse (item 7)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, run_eval

TOOLS = {"eval.py": ROOT / "eval.py", "check.py": ROOT / "tools" / "check.py",
         "emulate.py": ROOT / "tools" / "emulate.py", "inspect_sm100.py": ROOT / "tools" / "inspect_sm100.py"}


@pytest.fixture(scope="module")
def without_torch(tmp_path_factory):
    """An environment in which importing torch or CuTe DSL fails loudly (they take seconds): a command refused in it
    with its own one line was refused before either was imported."""
    shadow = tmp_path_factory.mktemp("no-torch")
    for name in ("torch", "cutlass"):
        (shadow / name).mkdir()
        (shadow / name / "__init__.py").write_text(f"raise ImportError('{name} imported before the refusal')\n")
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(shadow), os.environ.get("PYTHONPATH", "")]))


REFUSALS = [
    ("eval.py", ["test", "--onlyy", "3"], "eval.py: unrecognized arguments: --onlyy 3 (see python eval.py --help)"),
    ("eval.py", ["tset"], "eval.py: argument mode: invalid choice: 'tset'"),
    ("eval.py", ["test", "--only", "99"], "eval.py: --only 99: there are 13 (numbered 1 to 13)"),
    ("eval.py", ["test", "--submission", "nope.py"], "eval.py: submission file not found: nope.py"),
    ("eval.py", ["benchmark", "--no-races"], "eval.py: --races/--no-races apply to test (the emulator's)"),
    ("check.py", ["--emulatee"], "check.py: error: unrecognized arguments: --emulatee"),
    ("check.py", ["--emulate", "--case", "nope"], "check.py: unknown case 'nope' (see --list)"),
    ("check.py", ["--emulate", "--stage", "benchmarks"], "check.py: unknown stage 'benchmarks'"),
    ("check.py", ["--no-races"], "check.py: --races/--no-races go with --emulate"),
    ("emulate.py", ["submission", "--spek", "x"], "emulate.py submission: error: the following arguments are required: --spec"),
    ("inspect_sm100.py", ["--groups", "x"], "inspect_sm100.py: error: argument --groups"),
]


@pytest.mark.parametrize("tool, args, said", REFUSALS, ids=[f"{t} {' '.join(a)}" for t, a, _ in REFUSALS])
def test_a_refused_command_line_is_refused_before_torch_is_imported(without_torch, tool, args, said):
    """eval.py took 4 to 15 s to refuse a misspelled flag (it imported torch first); now under a second (the
    measure here is that torch and cutlass cannot be imported at all)."""
    done = subprocess.run([sys.executable, str(TOOLS[tool]), *args], capture_output=True, text=True, cwd=ROOT,
                          env=without_torch, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and said in done.stderr and "imported before the refusal" not in done.stderr, \
        done.stderr[-2000:]
    assert done.stdout == "" and done.stderr.strip().splitlines()[-1].startswith(said.split(":")[0]), done.stderr


def _fields():
    import submission

    return [field.name for field in submission.dataclasses.fields(submission.Sm100Config)]


@pytest.mark.parametrize("tool", ["eval.py", pytest.param("check.py", marks=pytest.mark.long),
                                  pytest.param("emulate.py", marks=pytest.mark.long),
                                  pytest.param("inspect_sm100.py", marks=pytest.mark.long)])
def test_a_malformed_config_line_is_one_line_and_exit_2_in_every_tool(tmp_path, tool):
    """The file's own line number, what is wrong, every field of Sm100Config; exit 2 (eval.py printed ten FAIL rows
    of a 300-character message and exited 1; emulate.py exited 5). check.py's and inspect_sm100.py's own tests
    check more of their wording."""
    import eval as harness

    source = (ROOT / "submission.py").read_text()
    path = tmp_path / "submission.py"
    path.write_text(source.replace('SM100_CONFIG = "shipped"', 'SM100_CONFIG = "bogus"', 1))
    number = harness.config_line(path)[0]
    args = {"eval.py": ["test", "--submission", str(path)], "check.py": ["--emulate", "--submission", str(path)],
            "emulate.py": ["submission", "--submission", str(path), "--spec", "m: [40]; n: [256]; k: [256]; g: 1; seed: 1"],
            "inspect_sm100.py": ["--submission", str(path), "--groups", "1"]}[tool]
    done = subprocess.run([sys.executable, str(TOOLS[tool]), *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, stdin=subprocess.DEVNULL)
    said = (f"{tool}: line {number} of submission.py (`SM100_CONFIG = \"bogus\"`): unknown configuration 'bogus': "
            f"shipped, safe, or field=value changes (fields: {', '.join(_fields())})\n")
    assert (done.returncode, done.stdout, done.stderr) == (2, "", said), done.stdout[-2000:] + done.stderr[-2000:]


def test_config_problem_names_the_line_and_every_field(tmp_path):
    """harness.config_problem, which all four say it with: the line, what is wrong, the fields where the message
    does not list them all; --config texts too; the cuBLAS rung and a good line are no problem."""
    import eval as harness
    import submission

    path = tmp_path / "v2.py"
    path.write_text("x = 1\nSM100_CONFIG = 'cta_group=3'\n")
    fields = ", ".join(_fields())
    assert harness.config_problem(submission, path) == (
        f"line 2 of v2.py (`SM100_CONFIG = 'cta_group=3'`): cta_group must be 1 or 2, got 3 (fields: {fields})")
    assert harness.config_problem(submission, path, "bogus=1").startswith("--config bogus=1: 'bogus=1': expected "
                                                                          f"field=value with a field of {fields}")
    assert not harness.config_problem(submission, path, "bogus=1").endswith(")")  # the fields once, not twice
    path.write_text("SM100_CONFIG = 'cublas'\n")
    assert harness.config_problem(submission, path) == ""
    path.write_text("SM100_CONFIG = shipped\n")
    assert "SM100_CONFIG must be a quoted text" in harness.config_problem(submission, path)
    assert harness.config_problem(submission, ROOT / "submission.py") == ""


def _help(tool: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(TOOLS[tool]), *args, "--help"], capture_output=True, text=True, cwd=ROOT,
                          timeout=60, env=dict(os.environ, COLUMNS="2000"))
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_first_check_says_its_race_detection_and_what_no_races_gives_up():
    """One line, the same in eval.py, check.py --emulate and emulate.py: faster, but a pass vouches only for the
    interleaving that ran."""
    import emulate
    import eval as harness

    assert harness.NO_RACES in " ".join(_help("eval.py").split())
    assert harness.NO_RACES in " ".join(_help("check.py").split())
    assert "--races, --no-races" in _help("emulate.py", "submission")
    assert " ".join(emulate.NO_RACES_HELP.split()) in " ".join(_help("emulate.py", "nvidia").split())
    assert "vouches only for the interleaving that ran" in emulate.NO_RACES_HELP
    for parse in (["submission", "--spec", "x"], ["nvidia"], ["flashinfer", "--groups", "1", "--masked-m", "1",
                                                               "--nk", "256,256"], ["nvidia-grouped", "--groups", "1",
                                                                                     "--mnk", "1,256,256"]):
        assert emulate.parse_args(parse).races and not emulate.parse_args(parse + ["--no-races"]).races, parse
    assert not emulate.parse_args(["nvidia", "--time", "--timing-only"]).races  # TIMED checks nothing
    assert not emulate.parse_args(["benchmarks"]).races


def test_reference_checks_the_harness_alone_in_the_help_too():
    text = " ".join(_help("eval.py").split())
    assert "(the reference) as the submission, and no sm_100a inspection" in text
    assert "--reference tests the harness alone with tests/ref_submission.py, without the sm_100a inspection" in text


CONFIG_TEXTS = re.compile(r"'((?:shipped|safe|[a-z_0-9]+=[a-z0-9/]+)(?:,[a-z_0-9]+=[a-z0-9/]+)*)'")


def test_the_configuration_texts_in_the_tools_help_parse_and_name_real_fields():
    """Item 7: every configuration text quoted in the tools' help and docstrings ('safe', 'shipped,pdl=off', ...)
    is one Sm100Config.parse reads, and inspect_sm100.py's list of the fields without a PTX mark, with those it
    checks, is every field (a field added or renamed fails here, not in a user's hands)."""
    import submission

    fields = set(_fields())
    texts = set()
    for tool, subcommands in (("eval.py", [()]), ("check.py", [()]), ("inspect_sm100.py", [()]),
                              ("emulate.py", [("submission",), ("benchmarks",)])):
        for sub in subcommands:
            text = _help(tool, *sub) + Path(TOOLS[tool]).read_text().split('"""')[1]
            texts |= set(CONFIG_TEXTS.findall(text.replace('"', "'")))
    assert {"safe", "shipped,pdl=off", "pdl=off,l2_hints=off", "multicast=off,cluster_pairs=1"} <= texts, texts
    for text in texts:
        submission.Sm100Config.parse(text)
    doc = (ROOT / "tools" / "inspect_sm100.py").read_text().split('"""')[1]
    unmarked = re.search(r"no createpolicy\. (.*?) have no single PTX mark", doc, re.S)[1]
    named = set(re.findall(r"[a-z][a-z_0-9]+", unmarked)) - {"and"}
    checked = {"cta_group", "multicast", "pdl", "l2_hints", "epilogue"}
    assert named | checked == fields and not named & checked, (named, fields)
