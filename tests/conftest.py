"""Shared set-up: the repository root on sys.path, helpers to run eval.py as the board does, and the
poisoned-output and reference helpers of the GPU result tests."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# One thread per test process (and the processes they start): the emulator is single-threaded, and under
# `-n auto` NumPy's and torch's thread pools would only fight each other for the cores (tools/emulate.py).
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The tests are laid out like the code (emulator/, groundtruth/, kernel/, harness/, tools/); a test may
# import another folder's shapes or helpers (test_schedule walks test_emulator_submission's shapes).
for folder in sorted(Path(__file__).resolve().parent.iterdir()):
    if folder.is_dir() and folder.name != "__pycache__":
        sys.path.insert(1, str(folder))
# The tools a user runs and the calibration instruments, importable by the tests that check them.
sys.path += [str(ROOT / "tools"), str(ROOT / "calibration")]

HARNESS_FILES = ("eval.py", "task.py", "task.yml", "reference.py", "utils.py")


@pytest.fixture
def harness_dir(tmp_path: Path) -> Path:
    """A copy of the harness with the reference-backed submission and without tools/, so that
    eval.py's runs here depend on nothing a teammate is editing."""
    for name in HARNESS_FILES:
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "ref_submission.py", tmp_path / "tests" / "ref_submission.py")
    shutil.copy(ROOT / "tests" / "ref_submission.py", tmp_path / "submission.py")
    return tmp_path


def run_eval(cwd: Path, *args: str, timeout: int = 300, script="eval.py", env=None) -> subprocess.CompletedProcess:
    """`python SCRIPT ARGS` in cwd, locally (no POPCORN_FD)."""
    env = {k: v for k, v in (env or os.environ).items() if k not in ("POPCORN_FD", "POPCORN_SEED")}
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, env=env, text=True,
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=timeout)


def run_popcorn(cwd: Path, mode: str, spec: str, seed=None, timeout: int = 300, script="eval.py"):
    """Run SCRIPT as the board does: spec file argument, results on the file descriptor named by
    POPCORN_FD. Returns (completed process, {key: value} of the result lines, the raw lines)."""
    (cwd / "spec.txt").write_text(spec)
    env = {k: v for k, v in os.environ.items() if k != "POPCORN_SEED"}
    if seed is not None:
        env["POPCORN_SEED"] = str(seed)
    with open(cwd / "popcorn.out", "w") as out:
        env["POPCORN_FD"] = str(out.fileno())
        done = subprocess.run([sys.executable, str(script), mode, "spec.txt"], cwd=cwd, env=env,
                              text=True, capture_output=True, stdin=subprocess.DEVNULL,
                              pass_fds=[out.fileno()], timeout=timeout)
    lines = (cwd / "popcorn.out").read_text().splitlines()
    result = {}
    for line in lines:
        key, _, value = line.partition(":")
        result[key.strip()] = value.strip()
    return done, result, lines


def poisoned(data):
    """data with every c filled with NaN, so an output the kernel did not write fails the check."""
    for _, _, c in data[0]:
        c.fill_(float("nan"))
    return data


def expected(data):
    """The reference result, written into fresh copies of c so `data` stays untouched."""
    import torch

    import reference

    abc = [(a, b, torch.empty_like(c)) for a, b, c in data[0]]
    return reference.ref_kernel((abc, data[1], data[2], data[3]))


def missing(message: str):
    """Something a test needs is not installed here: one line saying what, a skip for a user, a failure under CI
    (CI=true), where everything is installed, so that CI never hides a regression behind a skip."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI needs it: {message}", pytrace=False)
    pytest.skip(message)


def require_nvidia_example():
    """NVIDIA's example (groundtruth/nvidia.py's ground truth), or `missing` with what is needed."""
    from groundtruth.nvidia import ExampleNotFound, example_path

    try:
        return example_path()
    except ExampleNotFound as not_found:
        missing(str(not_found))


@pytest.fixture
def nvidia_example():
    return require_nvidia_example()


def require_matplotlib():
    """matplotlib (optional for users: the pictures need it; .ci/run installs it), or `missing`."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        missing("matplotlib is not installed (pip install matplotlib; .ci/run installs it): the test draws a picture")


@pytest.fixture
def without_matplotlib(tmp_path):
    """An environment in which `import matplotlib` fails, whether or not it is installed."""
    shadow = tmp_path / "shadow"
    (shadow / "matplotlib").mkdir(parents=True)
    (shadow / "matplotlib" / "__init__.py").write_text("raise ImportError('matplotlib hidden for this test')\n")
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(shadow), os.environ.get("PYTHONPATH", "")]))


# A GPU machine, simulated: a library with the real driver's soname (libcuda.so.1) in a folder of its own, found
# by name as ld.so finds NVIDIA's, and loaded by every Python process at start-up (sitecustomize), before any of
# our code runs: the worst case, where `import torch` itself loads the driver (the H200's torch 2.11 does).
# The entry points must see it, run the emulated part in a fresh process with the stub preloaded, and there
# the same start-up load must get the stub.
GPU_DRIVER_C = "int cuInit(unsigned flags) { return 100; /* CUDA_ERROR_NO_DEVICE */ }\n"
SITECUSTOMIZE = "import ctypes\nctypes.CDLL('libcuda.so.1', mode=ctypes.RTLD_GLOBAL)\n"


@pytest.fixture(scope="session")
def gpu_machine_env(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpu-machine")
    (folder / "driver.c").write_text(GPU_DRIVER_C)
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(folder / "libcuda.so.1"),
                    str(folder / "driver.c")], check=True, capture_output=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join(filter(None, [str(folder), os.environ.get("LD_LIBRARY_PATH")])),
               PYTHONPATH=os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])))
    probe = subprocess.run([sys.executable, "-c", "from emulator import driver\nprint(driver.real_driver_loaded())"],
                           capture_output=True, text=True, cwd=ROOT, env=env)
    assert probe.stdout.strip() == str(folder / "libcuda.so.1"), probe.stdout + probe.stderr[-2000:]
    return env


def quick_first(values, ids=None):
    """A parametrization's values with all but the first under `-m long`: README's quick command runs one
    case of each family, the long matrix all of them."""
    values = list(values)
    return [values[0]] + [pytest.param(*(v if isinstance(v, tuple) else (v,)), marks=pytest.mark.long,
                                       id=None if ids is None else ids[i + 1]) for i, v in enumerate(values[1:])]


@pytest.fixture(scope="session")
def shipped_inspection(tmp_path_factory):
    """tools/inspect_sm100.py on the shipped configuration at every default group count, with --keep: one
    compile per group count, shared by the tests that read it (test_submission, test_inspect_sm100).
    Returns the finished process and the folder of cubin, PTX and SASS."""
    keep = tmp_path_factory.mktemp("shipped-sm100a")
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "inspect_sm100.py"), "--config", "shipped",
                           "--keep", str(keep)], capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    return done, keep


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: without xdist, nothing to answer
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker more than half again the cores. Many tests spend most of their time waiting on
    a child process (eval.py, emulate.py, a DSL compile), so a worker per core leaves cores idle: on 2 cores
    3 workers take the quick suite from 5 min 25 s to the figure in BENCHMARKS.md."""
    cores = os.cpu_count() or 1
    return cores + (cores + 1) // 2
