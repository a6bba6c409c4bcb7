"""Where NVIDIA's example (the emulator's ground truth) is found, and what happens where it is not: torch 2.11
ships no copy, so a named file or a CUTLASS checkout stands in; FlashInfer's wheels carry a later form of it,
passed over; without a v4.3.5 copy, one line says what is needed (and what was passed over), a skip for a user
and a failure under CI (CI=true)."""

import types

import pytest
from _pytest.outcomes import Failed, Skipped

import conftest
from groundtruth import nvidia


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
    assert nvidia.ENV_VAR in text and "github.com/NVIDIA/cutlass" in text and "skipped" not in text


def test_a_cutlass_checkout_or_a_file_is_found(torch_without_example, monkeypatch):
    checkout = torch_without_example / "cutlass"
    example = checkout / nvidia.CHECKOUT_PATH / nvidia.EXAMPLE
    example.parent.mkdir(parents=True)
    example_with_can_implement(example, V435_PARAMS)
    monkeypatch.setenv(nvidia.ENV_VAR, str(checkout))
    assert nvidia.example_path() == example
    monkeypatch.setenv(nvidia.ENV_VAR, str(example))
    assert nvidia.example_path() == example


def example_with_can_implement(path, params: str):
    path.write_text("class Sm100BlockScaledPersistentDenseGemmKernel:\n"
                    f"    @staticmethod\n    def can_implement({params}):\n        return True\n")
    return path


V435_PARAMS = ("ab_dtype, sf_dtype, sf_vec_size, c_dtype, mma_tiler_mn, cluster_shape_mn, m, n, k, l, a_major, "
               "b_major, c_major")
LATER_PARAMS = ("mnkl, ab_dtype, sf_dtype, c_dtype, a_major, b_major, c_major, sf_vec_size, mma_tiler_mn, "
                "cluster_shape_mn")  # FlashInfer 0.6.7.post3's and 0.6.17's copies


def test_flashinfers_later_form_is_passed_over(torch_without_example, monkeypatch):
    """The H200 machine (torch 2.11) found FlashInfer's copy, a later form, and every test that drives NVIDIA's
    kernel failed with a TypeError: a copy whose can_implement is not v4.3.5's is passed over for the next
    candidate, and with none left the one-line error names it."""
    package = torch_without_example / "flashinfer"
    in_wheel = package / "data/cutlass" / nvidia.CHECKOUT_PATH / nvidia.EXAMPLE
    in_wheel.parent.mkdir(parents=True)
    example_with_can_implement(in_wheel, LATER_PARAMS)
    spec = types.SimpleNamespace(submodule_search_locations=[str(package)])
    monkeypatch.setattr(nvidia.importlib.util, "find_spec", lambda name: spec if name == "flashinfer" else None)
    with pytest.raises(nvidia.ExampleNotFound, match=r"v4\.3\.5's form not found .*skipped.*flashinfer/data"):
        nvidia.example_path()
    v435 = example_with_can_implement(torch_without_example / "v435.py", V435_PARAMS)
    monkeypatch.setenv(nvidia.ENV_VAR, str(v435))
    assert nvidia.example_path() == v435
    example_with_can_implement(in_wheel, V435_PARAMS)  # a wheel that carried v4.3.5's form would do
    monkeypatch.delenv(nvidia.ENV_VAR)
    assert nvidia.example_path() == in_wheel


@pytest.mark.parametrize("ci, outcome", [("true", Failed), ("", Skipped)])
def test_a_missing_ground_truth_fails_under_ci_and_skips_elsewhere(torch_without_example, monkeypatch, ci, outcome):
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome) as stopped:
        conftest.require_nvidia_example()
    assert "ships no copy" in str(stopped.value)


def test_the_example_of_this_machine_is_found():
    """Here (and in CI) the ground truth exists: the emulator's tests with NVIDIA's kernel run."""
    assert conftest.require_nvidia_example().is_file()
