"""Where NVIDIA's example (the emulator's ground truth) is found, and what happens where it is not: torch 2.11
ships no copy, so a named file, a CUTLASS checkout or FlashInfer's wheel data stands in; without any, one line
says what is needed, a skip for a user and a failure under CI (CI=true)."""

import types

import pytest
from _pytest.outcomes import Failed, Skipped

import conftest
from emulator import nvidia


@pytest.fixture
def torch_without_example(monkeypatch, tmp_path):
    """torch as 2.11 is: no vendored_templates/cutedsl copy; and no FlashInfer."""
    fake_torch = types.SimpleNamespace(__file__=str(tmp_path / "torch" / "__init__.py"), __version__="2.11.0+cu130")
    monkeypatch.setattr(nvidia, "torch", fake_torch)
    monkeypatch.setattr(nvidia.importlib.util, "find_spec", lambda name: None)
    monkeypatch.delenv(nvidia.ENV_VAR, raising=False)
    return tmp_path


def test_missing_example_is_one_line_saying_how_to_get_it(torch_without_example):
    with pytest.raises(nvidia.ExampleNotFound) as missing:
        nvidia.example_path()
    text = str(missing.value)
    assert "\n" not in text and "torch 2.11.0+cu130 ships no copy" in text
    assert nvidia.ENV_VAR in text and "github.com/NVIDIA/cutlass" in text and "flashinfer" in text


def test_a_cutlass_checkout_or_a_file_is_found(torch_without_example, monkeypatch):
    checkout = torch_without_example / "cutlass"
    example = checkout / nvidia.CHECKOUT_PATH / nvidia.EXAMPLE
    example.parent.mkdir(parents=True)
    example.write_text("# NVIDIA's example\n")
    monkeypatch.setenv(nvidia.ENV_VAR, str(checkout))
    assert nvidia.example_path() == example
    monkeypatch.setenv(nvidia.ENV_VAR, str(example))
    assert nvidia.example_path() == example


def test_flashinfers_wheel_data_is_found(torch_without_example, monkeypatch):
    package = torch_without_example / "flashinfer"
    example = package / "data/cutlass" / nvidia.CHECKOUT_PATH / nvidia.EXAMPLE
    example.parent.mkdir(parents=True)
    example.write_text("# NVIDIA's example\n")
    spec = types.SimpleNamespace(submodule_search_locations=[str(package)])
    monkeypatch.setattr(nvidia.importlib.util, "find_spec", lambda name: spec if name == "flashinfer" else None)
    assert nvidia.example_path() == example


@pytest.mark.parametrize("ci, outcome", [("true", Failed), ("", Skipped)])
def test_a_missing_ground_truth_fails_under_ci_and_skips_elsewhere(torch_without_example, monkeypatch, ci, outcome):
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome) as stopped:
        conftest.require_nvidia_example()
    assert "ships no copy" in str(stopped.value)


def test_the_example_of_this_machine_is_found():
    """Here (and in CI) the ground truth exists: the emulator's tests with NVIDIA's kernel run."""
    assert conftest.require_nvidia_example().is_file()
