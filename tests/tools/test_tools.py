"""Every tool in tools/ (what a user runs) and calibration/ (the instruments that measured the machine
descriptions) says what it does under --help, and a tool that needs a CUDA GPU says so in one line and
exits non-zero when there is none."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT

FOLDERS = ("tools", "calibration")
PATHS = {path.name: path for folder in FOLDERS for path in (ROOT / folder).glob("*.py")}
TOOLS = sorted(PATHS)
# Tool -> arguments of an ordinary run; each needs a CUDA GPU.
CUDA_TOOLS = {
    "bench_h200.py": ["--only", "4"],
    "check.py": [],
    "h200_dirty_l2.py": ["--repeats", "1"],
    "h200_timing_cases.py": ["--out", os.devnull],
    "host_time.py": ["--rounds", "2"],
    "launch_gap.py": ["--repeats", "1"],
    "sm90_profile.py": ["tiles"],
}


def run_tool(name, *args, env=None):
    return subprocess.run([sys.executable, str(PATHS[name]), *args], cwd=ROOT, env=env, text=True,
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=120)


@pytest.mark.parametrize("name", TOOLS)
def test_help_says_what_the_tool_does(name):
    done = run_tool(name, "--help")
    assert done.returncode == 0, done.stderr
    usage, _, rest = done.stdout.partition("\n\n")
    assert usage.startswith(f"usage: {name}")
    description = rest.strip().splitlines()[0]
    assert len(description.split()) >= 6, f"{name}: no description after the usage line"


def test_every_cuda_tool_is_listed():
    needs_cuda = {name for name in TOOLS if "needs a CUDA GPU" in PATHS[name].read_text()}
    assert needs_cuda == set(CUDA_TOOLS)


@pytest.mark.parametrize("name", sorted(CUDA_TOOLS))
def test_without_a_gpu_a_cuda_tool_says_so_in_one_line(name):
    done = run_tool(name, *CUDA_TOOLS[name], env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert done.returncode != 0
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "needs a CUDA GPU" in done.stderr and "Traceback" not in done.stderr
