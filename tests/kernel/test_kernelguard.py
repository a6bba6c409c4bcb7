"""KernelGuard, the board's screen for gamed submissions (PyPI `kernelguard`, gpu-mode/kernelbot
#473, #499, #500): submission.py must be classified "valid" under its default and strict profiles,
run the way the board runs it, `kernelguard --api-mode < submission.py`."""
import importlib.util
import json
import subprocess
import sys

import pytest

from conftest import ROOT, missing

if sys.version_info < (3, 11):
    pytest.skip("kernelguard needs Python 3.11 or later", allow_module_level=True)


@pytest.fixture(autouse=True)
def kernelguard_installed():
    if importlib.util.find_spec("kernelguard") is None:
        missing("kernelguard is not installed (pip install -r requirements.txt)")

PROFILES = ("default", "strict")

# Two small submissions that KernelGuard must not call valid: they show that the verdict is read
# right and that --profile reaches the detector.
RESULT_CACHE = """\
from reference import ref_kernel

_cache = {}

def custom_kernel(data):
    key = data[0][0][0].data_ptr()
    if key in _cache:
        return _cache[key]
    _cache[key] = ref_kernel(data)
    return _cache[key]
"""
GRAPH_REPLAY = """\
import torch

def custom_kernel(data):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = [c for _, _, c in data[0]]
    graph.replay()
    return out
"""


def verdict(code: str, profile: str) -> dict:
    """KernelGuard's JSON verdict on `code` (as the kernelguard command, from this Python)."""
    done = subprocess.run([sys.executable, "-m", "kernelguard", "--profile", profile, "--api-mode"], input=code,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("profile", PROFILES)
def test_submission_is_valid(profile):
    result = verdict((ROOT / "submission.py").read_text(), profile)
    assert result["classification"] == "valid", result["matched_patterns"]
    assert result["should_filter"] is False


@pytest.mark.parametrize("profile", PROFILES)
def test_a_result_cache_keyed_by_data_ptr_is_caught(profile):
    result = verdict(RESULT_CACHE, profile)
    assert result["classification"] == "hacked" and result["should_filter"] is True
    assert "POINTER_REPLAY" in {match["pattern"] for match in result["matched_patterns"]}


def test_the_strict_profile_is_stricter():
    """CUDA-graph replay is a telemetry signal by default and suspicious under strict."""
    assert [verdict(GRAPH_REPLAY, profile)["classification"] for profile in PROFILES] == ["low_confidence",
                                                                                         "suspicious"]
