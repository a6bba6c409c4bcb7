"""Compile a submission's sm_100a (B200) kernels without a GPU and check their PTX and SASS.

    python tools/inspect_sm100.py [--submission FILE] [--groups 1,2,3] [--config TEXT ...] [--keep DIR]

For each configuration and group count, this calls the submission's `compile_sm100(num_groups,
config)` with CUTE_DSL_ARCH=sm_100a. `--config TEXT` is repeatable, one configuration each, in
Sm100Config.parse's syntax ("shipped", "safe", "safe,pdl=on", "multicast=off,cluster_pairs=1");
without it, the file's SM100_CONFIG line. A submission without Sm100Config is compiled as
`compile_sm100(num_groups)` and takes no --config. CuTe DSL writes every compiled module's cubin, PTX and host IR; each
`cute.compile` inside `compile_sm100` is kept apart, so a group count may compile several kernel
variants. Loading a module needs a B200 driver: without one that last step fails after the files
are written, and `cute.compile` returns None here (so `compile_sm100` must not use its result
beyond keeping it). cuobjdump (PyPI nvidia-cuda-cuobjdump + nvidia-cuda-nvdisasm) disassembles each
cubin. One row per kernel: threads per CTA, registers, shared memory (static + the launch's
dynamic bytes), PTX counts of tcgen05.mma, tcgen05.mma.cta_group::2 and tensormap.replace, SASS
counts of block-scaled MMAs (UTC*MMA), TMA loads (UTMALDG) and stores (UTMASTG), scale copies to
TMEM (UTCCP) and local-memory loads and stores (LDL/STL).

A kernel fails if it spills to local memory or needs more than 232448 B of shared memory. A GEMM
kernel (one whose PTX issues tcgen05.mma) also fails if its MMA is not of the configuration's
cta_group (cta_group::2 without a configuration), if it rewrites tensor maps (tensormap.replace),
if it has no TMA loads or no block-scaled MMA in SASS, or if it runs fewer than 6 warps. A group
count fails if none of its kernels issues tcgen05.mma.

Each field of the configuration must show in the PTX (config_problems): cta_group 1 leaves no
`cta_group::2` and no `.multicast::cluster` anywhere (no pair); multicast on needs a multicast TMA
load (cp.async.bulk.tensor...multicast::cluster), off forbids one (a 2-CTA tcgen05.commit still
multicasts its arrival); pdl needs griddepcontrol, off forbids it; l2_hints needs createpolicy,
off forbids it; epilogue "tma_last" loads TMEM by inline tcgen05.ld and stores a worker's last
tile by TMA (UTMASTG in the SASS), "atoms" does neither. Every GEMM kernel prefetches its first
record's descriptors (prefetch.tensormap). So SM100_SAFE has no cta_group::2, no
.multicast::cluster, no griddepcontrol and no createpolicy. token_variants, descriptors, jobs,
warmers, self_warm, cluster_pairs and lean_walk have no single PTX mark; their compiles get every
other check.
Exit status: 0 all good, 1 a check failed, 2 bad use (one line: a submission that cannot be imported, a
malformed SM100_CONFIG line or --config) or cuobjdump/nvdisasm missing.
`--keep DIR` writes, per compiled module, gG_cI.cubin, .ptx and .sass (the full SASS) into DIR;
with several --config, into DIR/CONFIG/ (CONFIG as the table's config column writes it).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import importlib.util
import inspect
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_GROUPS = (1, 2, 3, 4, 5, 8, 16, 32)
SM100_SMEM_PER_BLOCK = 232448  # 227 KiB: the opt-in maximum of shared memory per block
MIN_GEMM_THREADS = 192  # 6 warps: TMA, MMA and 4 epilogue warps
KERNEL_WIDTH = 32  # the kernel column: short_kernel_name's width
PTX_COUNTS = {
    "mma": r"\btcgen05\.mma\b",
    "mma_2cta": r"\btcgen05\.mma\.cta_group::2\b",
    "tmap_repl": r"\btensormap\.replace\b",
}
# Counted in the PTX for config_problems, not shown in the table.
PTX_FEATURES = {
    "mma_1cta": r"\btcgen05\.mma\.cta_group::1\b",
    "cta_group_2": r"\bcta_group::2\b",
    "multicast": r"\.multicast::cluster\b",
    "tma_load_multicast": r"\bcp\.async\.bulk\.tensor\.[^;]*\.multicast::cluster\b",
    "griddepcontrol": r"\bgriddepcontrol\.",
    "createpolicy": r"\bcreatepolicy\.",
    "prefetch_tensormap": r"\bprefetch\.tensormap\b",
    # ptxas prints inline assembly between these markers; the library's copy atoms emit tcgen05.ld
    # without them.
    "inline_tmem_load": r"// begin inline asm\s*\n\s*tcgen05\.ld\b",
}
SASS_COUNTS = {
    "UTC*MMA": r"\bUTC\w*MMA\b",
    "UTMALDG": r"\bUTMALDG\b",
    "UTMASTG": r"\bUTMASTG\b",
    "UTCCP": r"\bUTCCP\b",
    "LDL": r"\bLDL\b",
    "STL": r"\bSTL\b",
}


@dataclasses.dataclass
class Kernel:
    name: str
    threads: int | None  # from the PTX's .reqntid / .maxntid
    registers: int
    local_bytes: int  # LOCAL + STACK of the resource usage
    static_smem: int
    dynamic_smem: int | None  # from the host IR's launch; None if no launch of it was found
    counts: dict  # PTX_COUNTS, PTX_FEATURES and SASS_COUNTS names -> occurrences

    @property
    def smem(self) -> int | None:
        return None if self.dynamic_smem is None else self.static_smem + self.dynamic_smem

    @property
    def issues_mma(self) -> bool:
        return self.counts["mma"] > 0


# ---------------------------------------------------------------------------------------------
# Reading the compiler's output (pure functions of text; tests/kernel/test_inspect_sm100.py feeds them
# synthetic PTX, SASS, resource usage and IR).


def split_ptx_entries(ptx: str) -> dict[str, str]:
    """Kernel name -> its PTX, from its `.entry` line up to the next `.entry` (or the end)."""
    starts = list(re.finditer(r"^\s*(?:\.visible\s+)?\.entry\s+([\w$]+)", ptx, re.MULTILINE))
    ends = [match.start() for match in starts[1:]] + [len(ptx)]
    return {match[1]: ptx[match.start():end] for match, end in zip(starts, ends)}


def ptx_threads(entry: str) -> int | None:
    """Threads per CTA that the entry declares (.reqntid, else .maxntid), None if neither."""
    for directive in ("reqntid", "maxntid"):
        match = re.search(rf"\.{directive}\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?", entry)
        if match:
            return int(match[1]) * int(match[2] or 1) * int(match[3] or 1)
    return None


def split_sass_functions(sass: str) -> dict[str, str]:
    """Kernel name -> its SASS, as `cuobjdump --dump-sass` prints it (`Function : NAME` headers)."""
    starts = list(re.finditer(r"^\s*Function\s*:\s*([\w$]+)", sass, re.MULTILINE))
    ends = [match.start() for match in starts[1:]] + [len(sass)]
    return {match[1]: sass[match.start():end] for match, end in zip(starts, ends)}


def parse_resource_usage(text: str) -> dict[str, dict[str, int]]:
    """`cuobjdump --dump-resource-usage` -> kernel name -> {REG, STACK, SHARED, LOCAL, ...}."""
    usage, name = {}, None
    for line in text.splitlines():
        header = re.match(r"\s*Function\s+([\w$]+)\s*:", line)
        if header:
            name = header[1]
        elif name and "REG:" in line:
            usage[name] = {key: int(value) for key, value in re.findall(r"(\w+(?:\[\d+\])?):(\d+)", line)}
            name = None
    return usage


def _ir_value(ir_lines: list[str], before: int, token: str) -> int | None:
    """The integer an SSA value of the host IR holds, if it is a constant (possibly extended or
    cast); searched backwards from line `before`, where the function using it is."""
    named_constant = re.fullmatch(r"%c(\d+)_i\d+(?:_\d+)?", token)
    if named_constant:
        return int(named_constant[1])
    definition = re.compile(rf"^\s*{re.escape(token)} = (arith\.\w+) (%[\w.]+|-?\d+)")
    for index in range(before - 1, -1, -1):
        match = definition.match(ir_lines[index])
        if match:
            op, operand = match[1], match[2]
            if op == "arith.constant":
                return int(operand)
            if op in ("arith.extsi", "arith.extui", "arith.trunci", "arith.index_cast"):
                return _ir_value(ir_lines, index, operand)
            return None
    return None


def launch_dynamic_smem(ir: str) -> dict[str, int | None]:
    """Kernel name -> dynamic shared memory bytes of its launch in the host IR
    (`cuda.launch_cfg.create ... dynamicSmemBytes = %x` and `cuda.launch_ex @kernels::@NAME<%cfg>`)."""
    lines = ir.splitlines()
    smem_of_config = {}
    kernels = {}
    for index, line in enumerate(lines):
        config = re.match(r"\s*(%[\w.]+) = cuda\.launch_cfg\.create\b.*dynamicSmemBytes = (%[\w.]+)", line)
        if config:
            smem_of_config[config[1]] = _ir_value(lines, index, config[2])
        launch = re.search(r"cuda\.launch_ex @[\w$]+::@([\w$]+)<(%[\w.]+)>", line)
        if launch:
            kernels[launch[1]] = smem_of_config.get(launch[2])
    return kernels


def short_kernel_name(name: str, module: str = "submission", width: int = 32) -> str:
    """A compiled kernel's name as the table shows it: CuTe DSL names a kernel
    kernel_cutlass_<function>_<module><Class>_object_at_<its arguments' types>; the row reads
    `Class.function`, or the name's head before the arguments, cut to `width` characters."""
    core = name.removeprefix("kernel_cutlass_").split("_object_at_")[0]
    method = re.fullmatch(rf"(\w+?)_{re.escape(module)}([A-Z]\w*)", core)
    short = f"{method[2]}.{method[1]}" if method else core
    return short if len(short) <= width else short[: width - 3] + "..."


def kernel_problems(kernel: Kernel, config=None) -> list[str]:
    """What is wrong with one kernel of a compile of `config` (a submission's Sm100Config; None
    for a submission without one, whose GEMM must then be 2-CTA)."""
    found = []
    if kernel.counts["LDL"] or kernel.counts["STL"] or kernel.local_bytes:
        found.append(f"spills to local memory ({kernel.counts['LDL']} LDL, {kernel.counts['STL']} STL, "
                     f"{kernel.local_bytes} B local)")
    if kernel.smem is None:
        found.append("shared memory unknown: no launch of this kernel found in the host IR")
    elif kernel.smem > SM100_SMEM_PER_BLOCK:
        found.append(f"needs {kernel.smem} B of shared memory > {SM100_SMEM_PER_BLOCK}")
    if kernel.issues_mma:
        if config is None or config.cta_group == 2:
            if kernel.counts["mma_2cta"] != kernel.counts["mma"]:
                found.append(f"tcgen05.mma is not cta_group::2 ({kernel.counts['mma_2cta']} of "
                             f"{kernel.counts['mma']} are)")
        elif kernel.counts["mma_1cta"] != kernel.counts["mma"]:
            found.append(f"tcgen05.mma is not cta_group::1 ({kernel.counts['mma_1cta']} of "
                         f"{kernel.counts['mma']} are)")
        if kernel.counts["tmap_repl"]:
            found.append(f"the GEMM kernel rewrites tensor maps "
                         f"({kernel.counts['tmap_repl']} tensormap.replace)")
        if not kernel.counts["UTMALDG"]:
            found.append("no TMA loads (UTMALDG)")
        if not kernel.counts["UTC*MMA"]:
            found.append("no block-scaled tcgen05 MMA in the SASS (UTC*MMA)")
        if kernel.threads is None or kernel.threads < MIN_GEMM_THREADS:
            found.append(f"{kernel.threads} threads per CTA, fewer than {MIN_GEMM_THREADS} (6 warps)")
    if config is not None:
        found += config_problems(kernel, config)
    return found


# (count, what it is, the field that needs it): a switch that is on must show in the GEMM's PTX,
# one that is off must not show in any kernel (a stray griddepcontrol in a helper kernel would
# still make the launch wait).
SWITCH_MARKS = (
    ("tma_load_multicast", "multicast TMA load (cp.async.bulk.tensor .multicast::cluster)", "multicast"),
    ("griddepcontrol", "griddepcontrol", "pdl"),
    ("createpolicy", "createpolicy", "l2_hints"),
)


def config_problems(kernel: Kernel, config) -> list[str]:
    """Where the kernel's PTX contradicts a field of `config` (see the top of this file)."""
    counts, found = kernel.counts, []
    for count, what, field in SWITCH_MARKS:
        if getattr(config, field) and kernel.issues_mma and not counts[count]:
            found.append(f"{field}=on but no {what}")
        elif not getattr(config, field) and counts[count]:
            found.append(f"{field}=off but {counts[count]} {what}")
    if config.cta_group == 1:
        for count, what in (("cta_group_2", "cta_group::2"), ("multicast", ".multicast::cluster")):
            if counts[count]:
                found.append(f"cta_group=1 but {counts[count]} {what}")
    if kernel.issues_mma:
        if not counts["prefetch_tensormap"]:
            found.append("no prefetch.tensormap (the TMA warp prefetches its first record's descriptors)")
        if config.epilogue == "tma_last" and not counts["inline_tmem_load"]:
            found.append(f"epilogue={config.epilogue} but no inline-asm tcgen05.ld")
        elif config.epilogue == "atoms" and counts["inline_tmem_load"]:
            found.append(f"epilogue={config.epilogue} but {counts['inline_tmem_load']} inline-asm tcgen05.ld")
        if config.epilogue == "tma_last" and not counts["UTMASTG"]:
            found.append(f"epilogue={config.epilogue} but no TMA store (UTMASTG)")
        elif config.epilogue == "atoms" and counts["UTMASTG"]:
            found.append(f"epilogue={config.epilogue} but {counts['UTMASTG']} TMA store(s) (UTMASTG)")
    return found


def group_count_problems(kernels: list[Kernel]) -> list[str]:
    if not any(kernel.issues_mma for kernel in kernels):
        return ["no kernel issues tcgen05.mma"]
    return []


def ptx_counts(entry: str) -> dict[str, int]:
    """PTX_COUNTS and PTX_FEATURES names -> occurrences in one kernel's PTX."""
    return {key: len(re.findall(pattern, entry)) for key, pattern in {**PTX_COUNTS, **PTX_FEATURES}.items()}


def kernels_of_module(ptx: str, sass: str, usage: str, ir: str) -> list[Kernel]:
    """The kernels of one compiled module, from its PTX, SASS, resource usage and host IR."""
    ptx_entries, sass_functions = split_ptx_entries(ptx), split_sass_functions(sass)
    resources, dynamic_smem = parse_resource_usage(usage), launch_dynamic_smem(ir)
    kernels = []
    for name, fields in resources.items():
        ptx_text, sass_text = ptx_entries.get(name, ""), sass_functions.get(name, "")
        counts = ptx_counts(ptx_text)
        counts.update({key: len(re.findall(pattern, sass_text)) for key, pattern in SASS_COUNTS.items()})
        kernels.append(Kernel(
            name=name, threads=ptx_threads(ptx_text), registers=fields.get("REG", 0),
            local_bytes=fields.get("LOCAL", 0) + fields.get("STACK", 0),
            static_smem=fields.get("SHARED", 0), dynamic_smem=dynamic_smem.get(name), counts=counts))
    return kernels


# ---------------------------------------------------------------------------------------------
# Compiling.


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


@contextlib.contextmanager
def each_compile_kept_apart(dump_dir: Path, modules: list[Path]):
    """While active, each cute.compile moves the files CuTe DSL wrote into dump_dir (every module
    gets the same file names) into a folder of its own, appended to `modules`. A compile that
    fails only because the module cannot be loaded (no B200 driver), after its cubin is written,
    returns None instead of raising, so that compile_sm100 goes on to its next variant."""
    from cutlass.base_dsl.compiler import CompileCallable

    original = CompileCallable._compile

    def compile_and_keep(self, *args, **kwargs):
        try:
            result = original(self, *args, **kwargs)
        except Exception:
            if not any(dump_dir.glob("*.cubin")):
                raise
            result = None
        folder = Path(tempfile.mkdtemp(prefix="module", dir=dump_dir))
        for path in dump_dir.iterdir():
            if path.is_file():
                path.rename(folder / path.name)
        modules.append(folder)
        return result

    CompileCallable._compile = compile_and_keep
    try:
        yield
    finally:
        CompileCallable._compile = original


@contextlib.contextmanager
def native_stderr_held_back():
    """A failed module load prints driver noise from native code on fd 2: hold it back, and show
    it only if the block raises."""
    with tempfile.TemporaryFile(mode="w+") as noise:
        saved = os.dup(2)
        sys.stderr.flush()
        os.dup2(noise.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            noise.seek(0)
            sys.stderr.write(noise.read())
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _only_file(folder: Path, pattern: str) -> Path | None:
    found = sorted(folder.glob(pattern))
    return found[0] if found else None


def inspect_module(folder: Path, cuobjdump: str, env: dict) -> tuple[list[Kernel], str]:
    """(kernels, full SASS) of the module CuTe DSL wrote into folder."""
    cubin = _only_file(folder, "*.cubin")
    usage = subprocess.run([cuobjdump, "--dump-resource-usage", str(cubin)], capture_output=True, text=True,
                           env=env, check=True).stdout
    sass = subprocess.run([cuobjdump, "--dump-sass", str(cubin)], capture_output=True, text=True, env=env,
                          check=True).stdout
    ptx_file, ir_file = _only_file(folder, "*.ptx"), _only_file(folder, "*.mlir")
    # PTX as CuTe DSL writes it ends in a NUL byte.
    ptx = ptx_file.read_bytes().decode(errors="replace") if ptx_file else ""
    ir = ir_file.read_text(errors="replace") if ir_file else ""
    return kernels_of_module(ptx, sass, usage, ir), sass


def load_submission(path: Path):
    spec = importlib.util.spec_from_file_location("submission", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["submission"] = module  # dataclasses look their module up while it is loading
    spec.loader.exec_module(module)
    return module


def parse_groups(text: str) -> list[int]:
    try:
        groups = [int(item) for item in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected group counts such as 1,2,8, got {text!r}") from None
    if not groups or min(groups) < 1:
        raise argparse.ArgumentTypeError(f"group counts must be positive, got {text!r}")
    return groups


def configurations(submission, texts: list[str] | None) -> list:
    """The configurations to compile, each --config text parsed by the submission's Sm100Config
    (by default its SM100_CONFIG line), without repeats; [None] for a submission whose
    compile_sm100 takes no configuration. Raises ValueError for a text it cannot parse, or for
    --config given to a submission without configurations."""
    config_class = getattr(submission, "Sm100Config", None)
    takes_config = len(inspect.signature(submission.compile_sm100).parameters) >= 2
    if config_class is None or not takes_config:
        if texts:
            raise ValueError("--config needs a submission that defines Sm100Config and "
                             "compile_sm100(num_groups, config)")
        return [None]
    if texts and any(text.strip() == "cublas" for text in texts):
        raise ValueError('--config cublas: the cuBLAS rung has no sm_100a kernel to inspect')
    texts = texts or [getattr(submission, "SM100_CONFIG", "shipped")]
    return list(dict.fromkeys(config_class.parse(text) for text in texts))


def _one_line(error: BaseException) -> str:
    """An import's exception as eval.py says it: type, message, the place in the user's file."""
    import eval as harness

    return harness._describe(error)


def config_line_problem(path: Path, texts: list[str] | None) -> str | None:
    """Without --config, the file's SM100_CONFIG line is what is compiled: '' if it is a quoted
    text, the one-line reason otherwise; None if it names the cuBLAS rung (nothing to inspect)."""
    import eval as harness

    if texts:
        return ""
    try:
        line = harness.config_line(path)
    except ValueError as error:
        return str(error)
    if line is not None and line[2].strip() == "cublas":
        return None
    return ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="inspect_sm100.py", description=__doc__.splitlines()[0],
                                     epilog="See the top of tools/inspect_sm100.py for every check.")
    parser.add_argument("--submission", type=Path, default=ROOT / "submission.py", metavar="FILE",
                        help="file defining compile_sm100(num_groups) "
                             "(default: the repository's submission.py)")
    parser.add_argument("--groups", type=parse_groups, default=list(DEFAULT_GROUPS), metavar="G,G,...",
                        help=f"group counts to compile (default: {','.join(map(str, DEFAULT_GROUPS))})")
    parser.add_argument("--config", action="append", metavar="TEXT",
                        help="a configuration to compile, as Sm100Config.parse reads it ('safe', "
                             "'shipped,pdl=off', 'multicast=off,cluster_pairs=1'); repeat for several "
                             "(default: the file's SM100_CONFIG)")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="write each compiled module's cubin, PTX and SASS into DIR")
    args = parser.parse_args(argv)

    cuobjdump, nvdisasm = find_tool("cuobjdump"), find_tool("nvdisasm")
    if not cuobjdump or not nvdisasm:
        print("inspect_sm100.py: cuobjdump/nvdisasm not found "
              "(pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)", file=sys.stderr)
        return 2
    if not args.submission.is_file():
        print(f"inspect_sm100.py: no such file: {args.submission}", file=sys.stderr)
        return 2
    tool_env = dict(os.environ, PATH=os.path.dirname(nvdisasm) + os.pathsep + os.environ.get("PATH", ""))

    dump_dir = Path(tempfile.mkdtemp(prefix="inspect_sm100_"))
    # CuTe DSL reads these when it is imported, so they are set before the submission is loaded.
    os.environ.update(CUTE_DSL_ARCH="sm_100a", CUTE_DSL_KEEP_CUBIN="1", CUTE_DSL_KEEP_PTX="1",
                      CUTE_DSL_KEEP_IR="1", CUTE_DSL_DUMP_DIR=str(dump_dir))
    # The submission imports the board's files (task, reference, utils), which are this repository's;
    # its own folder, which may lie outside, comes next.
    sys.path[:0] = [str(ROOT), str(args.submission.resolve().parent)]
    problem = config_line_problem(args.submission, args.config)
    if problem is None:
        print(f'inspect_sm100.py: {args.submission.name} runs SM100_CONFIG = "cublas" (cuBLAS per group, no '
              "sm_100a kernel): nothing to inspect; --config shipped inspects the kernel")
        shutil.rmtree(dump_dir, ignore_errors=True)
        return 0
    if problem:
        print(f"inspect_sm100.py: {problem}", file=sys.stderr)
        shutil.rmtree(dump_dir, ignore_errors=True)
        return 2
    try:
        submission = load_submission(args.submission)
    except Exception as error:  # one line and exit 2, as eval.py, check.py and emulate.py say it
        shutil.rmtree(dump_dir, ignore_errors=True)
        print(f"inspect_sm100.py: cannot import {args.submission.name}: {_one_line(error)}", file=sys.stderr)
        return 2
    if not callable(getattr(submission, "compile_sm100", None)):
        print(f"inspect_sm100.py: {args.submission} defines no compile_sm100: no sm_100a kernel to inspect",
              file=sys.stderr)
        shutil.rmtree(dump_dir, ignore_errors=True)
        return 2
    import eval as harness

    # without --config the file's line is compiled: a malformed one is said as every tool says it (exit 2)
    problem = "" if args.config else harness.config_problem(submission, args.submission)
    try:
        configs = [] if problem else configurations(submission, args.config)
    except ValueError as error:
        problem = str(error)
    if problem:
        print(f"inspect_sm100.py: {problem}", file=sys.stderr)
        shutil.rmtree(dump_dir, ignore_errors=True)
        return 2
    labels = [config.describe() if config else "-" for config in configs]
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)

    width = max(9, *map(len, labels))
    columns = ["groups", "kernel".ljust(KERNEL_WIDTH), "config".ljust(width), "compile_s", "threads", "regs", "smem_B", *PTX_COUNTS,
               *SASS_COUNTS]
    call = "compile_sm100(G)" if configs == [None] else "compile_sm100(G, config)"
    print(f"sm_100a kernels of {args.submission.name}: {call}, PTX from CuTe DSL, SASS via cuobjdump")
    print(" ".join(f"{name:>9}" for name in columns) + "  verdict")
    failures = 0
    try:
        for (config, label), groups in itertools.product(zip(configs, labels), args.groups):
            modules: list[Path] = []
            start = time.perf_counter()
            with native_stderr_held_back(), each_compile_kept_apart(dump_dir, modules):
                submission.compile_sm100(groups) if config is None else submission.compile_sm100(groups, config)
            seconds = time.perf_counter() - start
            kernels = []
            for index, folder in enumerate(modules):
                module_kernels, sass = inspect_module(folder, cuobjdump, tool_env)
                kernels += module_kernels
                if args.keep:
                    # one folder per configuration, named by its text ("/" in 64/128 is not a folder)
                    keep = args.keep / label.replace("/", "+") if len(configs) > 1 else args.keep
                    keep.mkdir(exist_ok=True)
                    stem = keep / f"g{groups}_c{index}"
                    shutil.copy(_only_file(folder, "*.cubin"), stem.with_suffix(".cubin"))
                    if _only_file(folder, "*.ptx"):
                        shutil.copy(_only_file(folder, "*.ptx"), stem.with_suffix(".ptx"))
                    stem.with_suffix(".sass").write_text(sass)
            for kernel in kernels:
                found = kernel_problems(kernel, config)
                failures += bool(found)
                cells = [groups, short_kernel_name(kernel.name, submission.__name__).ljust(KERNEL_WIDTH), label.ljust(width), f"{seconds:.1f}", kernel.threads, kernel.registers,
                         "?" if kernel.smem is None else kernel.smem,
                         *(kernel.counts[name] for name in (*PTX_COUNTS, *SASS_COUNTS))]
                verdict = "FAIL: " + "; ".join(found) if found else "ok"
                print(" ".join(f"{cell!s:>9}" for cell in cells) + "  " + verdict)
            for problem in group_count_problems(kernels):
                failures += 1
                print(f"{groups:>9} {'':>{KERNEL_WIDTH}} {label.ljust(width)} FAIL: {problem}")
    finally:
        shutil.rmtree(dump_dir, ignore_errors=True)
    if args.keep:
        folder = f"{args.keep}/<config>" if len(configs) > 1 else str(args.keep)
        print(f"cubin, PTX and SASS of each module: {folder}/g<G>_c<module>.{{cubin,ptx,sass}}")
    rows = len(configs) * len(args.groups)
    print(f"FAIL: {failures} problem(s) in {rows} compile(s)" if failures else f"PASS: {rows} compile(s) inspected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
