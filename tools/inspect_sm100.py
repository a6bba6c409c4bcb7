"""Compile the sm_100a kernel for every configuration task.yml selects and check its SASS. No GPU needed.

    python tools/inspect_sm100.py [--task task.yml] [--submission submission.py]

For each group count in task.yml's tests and benchmarks (the kernel is compiled per group count), this
compiles with CUTE_DSL_ARCH=sm_100a, keeps the cubin, disassembles it with cuobjdump (PyPI
nvidia-cuda-cuobjdump + nvidia-cuda-nvdisasm) and prints per kernel: threads per CTA, registers per
thread, shared memory, and counts of block-scaled MMAs (UTC*MMA), TMA loads (UTMALDG), TMA stores
(UTMASTG), scale copies to TMEM (UTCCP) and local-memory loads/stores (LDL/STL).
Exit status 1 if any kernel spills to local memory, lacks the block-scaled MMA or TMA loads, or needs
more shared memory than an SM has; 2 if the tools are missing.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SM100_SMEM_PER_BLOCK = 232448  # 227 KiB: the opt-in maximum of dynamic shared memory per block
SASS_COUNTS = {
    "UTC*MMA": r"\bUTC\w*MMA\b",
    "UTMALDG": r"\bUTMALDG\b",
    "UTMASTG": r"\bUTMASTG\b",
    "UTCCP": r"\bUTCCP\b",
    "LDL": r"\bLDL\b",
    "STL": r"\bSTL\b",
}


def group_counts(task_path: str) -> list[int]:
    """The distinct group counts of task.yml's tests and benchmarks (each is one compiled kernel)."""
    with open(task_path) as f:
        text = f.read()
    counts = sorted({int(g) for g in re.findall(r"[\"']?\bg[\"']?\s*:\s*(\d+)", text)})
    if not counts:
        raise SystemExit(f"error: no group counts found in {task_path}")
    return counts


def find_tool(name: str) -> str | None:
    """A CUDA binary on PATH or shipped inside the PyPI nvidia-* packages."""
    found = shutil.which(name)
    if found:
        return found
    for site in sys.path:
        hits = glob.glob(os.path.join(site, "nvidia", "*", "bin", name)) + glob.glob(
            os.path.join(site, "nvidia", "*", "*", "bin", name)
        )
        if hits:
            return hits[0]
    return None


def compile_to_cubin(submission, num_groups: int, dump_dir: str):
    """Compile for sm_100a; return (cubin path, kernel object, seconds). Loading the module needs a
    B200 driver, so on a machine without one the JIT step fails after the cubin is written."""
    # Every compile writes the same file name, so a new cubin is told by its modification time.
    def cubins():
        return {(path, os.stat(path).st_mtime_ns) for path in glob.glob(os.path.join(dump_dir, "*.cubin"))}

    before = cubins()
    kernel = submission.Sm100GroupedGemm(num_groups)
    start = time.perf_counter()
    # The failed load prints driver noise from native code on fd 2: keep it, show it only on failure.
    noise = tempfile.TemporaryFile(mode="w+")
    saved_stderr = os.dup(2)
    os.dup2(noise.fileno(), 2)
    try:
        submission.cute.compile(
            kernel,
            submission._null_ptr(submission.cutlass.Int32),
            submission._null_ptr(submission.cutlass.Int64),
            submission._null_ptr(submission.cutlass.Int64),
            submission.cutlass.Int32(1),
            submission.cutlass.Int32(1),
            submission.cuda.CUstream(0),
        )
    except Exception as error:  # noqa: BLE001 - only a load failure after the cubin was written is fine
        if not cubins() - before:
            os.dup2(saved_stderr, 2)
            noise.seek(0)
            sys.stderr.write(noise.read())
            raise RuntimeError(f"compilation for G={num_groups} failed: {error}") from error
    finally:
        os.dup2(saved_stderr, 2)
        os.close(saved_stderr)
        noise.close()
    seconds = time.perf_counter() - start
    new = cubins() - before
    if len(new) != 1:
        raise RuntimeError(f"expected one new cubin for G={num_groups}, found {len(new)}")
    return new.pop()[0], kernel, seconds


def inspect_cubin(cubin: str, cuobjdump: str, nvdisasm_dir: str) -> dict:
    env = dict(os.environ, PATH=nvdisasm_dir + os.pathsep + os.environ.get("PATH", ""))
    usage = subprocess.run([cuobjdump, "--dump-resource-usage", cubin], capture_output=True, text=True, env=env, check=True).stdout
    sass = subprocess.run([cuobjdump, "--dump-sass", cubin], capture_output=True, text=True, env=env, check=True).stdout
    kernel_usage = [line for line in usage.splitlines() if "REG:" in line]
    if len(kernel_usage) != 1:
        raise RuntimeError(f"expected one kernel in {cubin}, found {len(kernel_usage)}")
    fields = dict(re.findall(r"(\w+(?:\[\d\])?):(\d+)", kernel_usage[0]))
    row = {name: len(re.findall(pattern, sass)) for name, pattern in SASS_COUNTS.items()}
    row["regs"] = int(fields["REG"])
    row["local_bytes"] = int(fields.get("LOCAL", 0)) + int(fields.get("STACK", 0))
    row["static_smem"] = int(fields.get("SHARED", 0))
    return row


def problems(row: dict) -> list[str]:
    found = []
    if row["LDL"] or row["STL"] or row["local_bytes"]:
        found.append("spills to local memory")
    if not row["UTC*MMA"]:
        found.append("no block-scaled tcgen05 MMA")
    if not row["UTMALDG"]:
        found.append("no TMA loads")
    if row["smem"] > SM100_SMEM_PER_BLOCK:
        found.append(f"needs {row['smem']} B of shared memory > {SM100_SMEM_PER_BLOCK}")
    return found


def load_submission(path: str):
    spec = importlib.util.spec_from_file_location("submission", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["submission"] = module  # dataclasses look their module up while it is loading
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default=os.path.join(ROOT, "task.yml"))
    parser.add_argument("--submission", default=os.path.join(ROOT, "submission.py"))
    args = parser.parse_args(argv)

    cuobjdump, nvdisasm = find_tool("cuobjdump"), find_tool("nvdisasm")
    if not cuobjdump or not nvdisasm:
        print("error: cuobjdump/nvdisasm not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)", file=sys.stderr)
        return 2

    dump_dir = tempfile.mkdtemp(prefix="inspect_sm100_")
    # CuTe DSL reads these when it is imported, so they are set before the submission is loaded.
    os.environ.update(CUTE_DSL_ARCH="sm_100a", CUTE_DSL_KEEP_CUBIN="1", CUTE_DSL_DUMP_DIR=dump_dir)
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.submission)))
    submission = load_submission(args.submission)

    header = f"{'groups':>6} {'compile_s':>9} {'threads':>7} {'regs':>4} {'smem_B':>7} " + " ".join(
        f"{name:>7}" for name in SASS_COUNTS
    ) + "  verdict"
    print("sm_100a kernels (one per group count in task.yml), SASS via cuobjdump")
    print(header)
    failures = 0
    try:
        for groups in group_counts(args.task):
            cubin, kernel, seconds = compile_to_cubin(submission, groups, dump_dir)
            row = inspect_cubin(cubin, cuobjdump, os.path.dirname(nvdisasm))
            row["smem"] = row["static_smem"] + kernel.shared_storage.size_in_bytes()
            found = problems(row)
            failures += bool(found)
            counts = " ".join(f"{row[name]:>7}" for name in SASS_COUNTS)
            print(
                f"{groups:>6} {seconds:>9.1f} {kernel.threads_per_cta:>7} {row['regs']:>4} {row['smem']:>7} {counts}  "
                + ("ok" if not found else "FAIL: " + "; ".join(found))
            )
    finally:
        shutil.rmtree(dump_dir, ignore_errors=True)
    print(f"stages: {kernel.num_ab_stage} operand, {kernel.num_acc_stage} accumulator, {kernel.num_c_stage} epilogue")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
