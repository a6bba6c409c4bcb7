"""NVIDIA's CUDA compiler from PyPI, for the peers' CUDA C++ (groundtruth/peer_cuda.py) and our own test kernels.

The toolkit comes as wheels (requirements-test.txt): `nvidia-cuda-nvcc` (nvcc, ptxas, cudafe++, fatbinary,
nvlink), `nvidia-nvvm` (cicc, libnvvm, libdevice), `nvidia-cuda-crt` and `nvidia-cuda-runtime` (the
headers: cuda.h, cudaTypedefs.h, cuda_fp16.h, crt/), `nvidia-cuda-cccl` (libcu++, CUB, Thrust). Version 13
installs them all into one tree, `site-packages/nvidia/cu13/{bin,nvvm,include,lib}`, laid out as a CUDA
toolkit is: the wheel's `bin/nvcc.profile` finds cicc at `$(TOP)/nvvm/bin` and the headers at
`$(TOP)/include` and `$(TOP)/include/cccl` by itself, so nvcc runs from there with no PATH or -I set-up.
It still needs a host C++ compiler (g++ on PATH, or `-ccbin` from the CXX environment variable): nvcc hands
the host side of a `.cu` file to it even for `-ptx`.

    nvcc()                                   # the nvcc to run (NVFP4_NVCC, else the wheel's, else PATH's)
    compile_ptx(source, arch="sm_100a", flags=[...], include_dirs=[...])   # -> PTX text, cached
    assemble(ptx, arch="sm_100a")            # ptxas -> cubin bytes (the ELF the stub driver reads), cached

Results are cached in `$XDG_CACHE_HOME/nvfp4-emulator/nvcc/` (default ~/.cache) by the hash of the tool's
version, the source and the flags, never in the repository.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
from pathlib import Path


class ToolkitError(RuntimeError):
    """No nvcc, or it refused the source: the message says which and why (its first error lines)."""


def _wheel_bin() -> Path | None:
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations if spec else ()):
        candidate = Path(root) / "cu13" / "bin"
        if (candidate / "nvcc").exists():
            return candidate
    return None


def nvcc() -> str:
    """The nvcc to run: $NVFP4_NVCC, else the nvidia-cuda-nvcc wheel's, else the first on PATH."""
    for candidate in (os.environ.get("NVFP4_NVCC"), _wheel_bin() and str(_wheel_bin() / "nvcc"), shutil.which("nvcc")):
        if candidate and Path(candidate).exists():
            return candidate
    raise ToolkitError("no nvcc: pip install -r requirements-test.txt (nvidia-cuda-nvcc and the packages beside it), "
                       "or set NVFP4_NVCC")


def ptxas() -> str:
    """The ptxas beside nvcc()."""
    path = Path(nvcc()).parent / "ptxas"
    if not path.exists():
        raise ToolkitError(f"no ptxas beside {nvcc()}")
    return str(path)


def version() -> str:
    """nvcc's `release X.Y, VX.Y.Z` line."""
    done = subprocess.run([nvcc(), "--version"], capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if "release" in line]
    return lines[-1].strip() if lines else done.stdout.strip()


def _cache_dir() -> Path:
    folder = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "nvfp4-emulator" / "nvcc"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _cached(kind: str, key_parts: list, build) -> bytes:
    digest = hashlib.sha256()
    for part in key_parts:
        digest.update(part if isinstance(part, bytes) else str(part).encode())
        digest.update(b"\0")
    path = _cache_dir() / f"{digest.hexdigest()[:24]}.{kind}"
    if path.exists():
        return path.read_bytes()
    data = build()
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return data


def _host_compiler() -> list:
    cxx = os.environ.get("CXX")
    return ["-ccbin", cxx] if cxx else []


def _run(command: list, what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        errors = [line for line in (done.stderr + done.stdout).splitlines() if "error" in line.lower()]
        raise ToolkitError(f"{what} failed ({Path(command[0]).name} exit {done.returncode}): "
                           + "; ".join((errors or done.stderr.strip().splitlines() or ["?"])[:4]))


def compile_ptx(source: str, arch: str = "sm_100a", flags=(), include_dirs=()) -> str:
    """`nvcc -arch=ARCH -ptx` of a CUDA C++ source text: the PTX of every kernel the translation unit
    instantiates (host code is compiled by the host compiler and dropped)."""
    flags, include_dirs = list(flags), [str(d) for d in include_dirs]

    def build() -> bytes:
        with tempfile.TemporaryDirectory(prefix="nvfp4-nvcc-") as work:
            cu, out = Path(work) / "source.cu", Path(work) / "source.ptx"
            cu.write_text(source)
            _run([nvcc(), *_host_compiler(), f"-arch={arch}", "-ptx", *flags, *[f"-I{d}" for d in include_dirs],
                  str(cu), "-o", str(out)], "nvcc -ptx")
            return out.read_bytes()

    return _cached("ptx", [version(), arch, source, *flags, *include_dirs], build).decode()


def assemble(ptx: str, arch: str = "sm_100a") -> bytes:
    """ptxas of a PTX module: the cubin (an ELF image with each kernel's .nv.info: parameter layout, register
    count), which the stub driver loads as a real driver would."""

    def build() -> bytes:
        with tempfile.TemporaryDirectory(prefix="nvfp4-ptxas-") as work:
            src, out = Path(work) / "module.ptx", Path(work) / "module.cubin"
            src.write_text(ptx)
            _run([ptxas(), f"-arch={arch}", "-O3", str(src), "-o", str(out)], "ptxas")
            return out.read_bytes()

    return _cached("cubin", [version(), "ptxas", arch, ptx], build)
