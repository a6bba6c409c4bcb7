"""The stub driver route (emulator/driver.py): what the DSL's host code hands to the emulator, and the one-line
failures of its set-up. Each test runs in a fresh process: the stub must be loaded before cutlass is."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def python(code: str, env=None, timeout=300):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=env)


def test_a_launch_is_recorded_with_the_dsls_own_parameters(nvidia_example):
    code = """
import struct
from emulator import driver
driver.install()
from groundtruth.nvidia import NvidiaExample
ex = NvidiaExample((256, 128), (2, 1), 512, 384, 1024, max_active_clusters=1)
driver.take_launches()
ex.compiled(*ex.args)
(launch,) = driver.take_launches()
print(launch.grid, launch.block, launch.cluster, launch.shared_bytes)
maps = [p for p in launch.params if len(p) == 128]
print(struct.unpack('<Q', maps[0][:8])[0] == ex.a.data_ptr(), struct.unpack('<Q', maps[1][:8])[0] == ex.b.data_ptr())
print(f'.entry {launch.kernel_name}(' in driver.kernel_ptx(ex.compiled, launch.kernel_name))
print(driver.take_launches() == [])
"""
    done = python(code)
    assert done.returncode == 0, done.stderr[-3000:]
    grid, words, ptx, emptied = done.stdout.strip().splitlines()[-4:]
    assert grid.startswith("(2, 1, 1) (192, 1, 1) (2, 1, 1) ")  # one cluster of the 2-CTA form, 6 warps
    assert int(grid.split()[-1]) > 200_000  # the stages fill the shared memory of a B200
    assert words == "True True"  # TMA descriptor word 0 is the tensor's address
    assert ptx == "True" and emptied == "True"


def test_no_c_compiler_is_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CC"}
    env.update(PATH=str(tmp_path), XDG_CACHE_HOME=str(tmp_path / "cache"))
    done = python("from emulator import driver\ntry:\n    driver.install()\nexcept driver.EmulatorSetupError as e:\n"
                  "    print(e)", env=env)
    assert done.stdout.strip() == "setup: no C compiler (set CC, or install cc/gcc/clang): the emulator's stub " \
                                  "driver is C, built on first use", done.stderr[-2000:]


def test_install_after_cutlass_is_refused():
    done = python("import cutlass\nfrom emulator import driver\ntry:\n    driver.install()\n"
                  "except driver.EmulatorSetupError as e:\n    print(e)")
    assert done.stdout.strip().endswith("must run before cutlass is imported"), done.stderr[-2000:]


def test_emulate_command_says_setup_errors_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CC"}
    env.update(PATH=str(tmp_path), XDG_CACHE_HOME=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "emulate.py"), "nvidia"], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, env=env)
    assert done.returncode == 4 and done.stdout.strip().splitlines() == [
        "ERROR setup: no C compiler (set CC, or install cc/gcc/clang): the emulator's stub driver is C, "
        "built on first use"], done.stdout + done.stderr[-2000:]


def test_emulate_runs_where_a_real_driver_is_already_loaded(gpu_machine_env, nvidia_example):
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "emulate.py"), "nvidia", "--mma-tiler", "128,128",
                           "--cluster", "1,1", "--clusters", "2", "--mnk", "256,128,256"], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, env=gpu_machine_env)
    assert done.returncode == 0 and done.stdout.strip().splitlines()[-1].startswith("PASS"), \
        done.stdout[-2000:] + done.stderr[-2000:]


@pytest.mark.long  # README's quick command within 4 minutes (issue 47): tools/emulate.py's case of the family stays quick
def test_check_emulate_runs_where_a_real_driver_is_already_loaded(gpu_machine_env):
    """check.py imports torch first and starts a process per case: each gets the stub."""
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "check.py"), "--emulate", "--stage", "one_tile"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env=gpu_machine_env)
    rows = [line for line in done.stdout.splitlines() if line.startswith("one_tile")]
    assert done.returncode == 0 and len(rows) == 1 and " PASS " in rows[0], done.stdout[-2000:] + done.stderr[-2000:]


def test_a_real_driver_in_the_stub_process_is_one_line(gpu_machine_env):
    """Where preloading cannot win (a driver loaded by path), the fresh process says so instead of looping."""
    env = dict(gpu_machine_env, NVFP4_EMULATOR_STUB_PROCESS="1")
    done = python("from emulator import driver\ntry:\n    driver.rerun_with_stub('x', [])\n"
                  "except driver.EmulatorSetupError as e:\n    print(e)", env=env)
    assert "was loaded even with the stub preloaded" in done.stdout, done.stdout + done.stderr[-2000:]
