"""Peers' CuTe DSL entries: a leaderboard file's own `custom_kernel(data)` run in the emulator on the board's
inputs, the way tools/emulate.py's `submission` route runs ours (stub driver, CPU tensors, inputs from
task.yml's generator with each c poisoned inside guard rows, every output checked against the exact
reference).

Peers' files carry no license: none is in this repository. Each is read from a path of the caller's (keep
copies outside the repository, e.g. /work/peers/); PEERS says where each comes from.

    case = PeerDsl(path, "m: [96, 128]; n: [128, 256]; k: [256, 512]; g: 2; seed: 1111")
    case.register(emu); emu.call(case.compiled, *case.args); case.compare()

`PeerDsl` follows the protocol of groundtruth/flashinfer.py's FlashInferMasked that tools/emulate.py's
`run_example_calls` drives (`register`, `compiled` and `args`, `with_inputs(seed)`, `compare(atol, rtol)`,
`warp_roles`, `seed`): `compiled(*args)` is one call of the peer's `custom_kernel` on the case's inputs, and
carries the PTX of the kernel that call launched (`__ptx__`), so `Emulator.take` finds it.

What the route changes around the peer's code, and nothing else (its source is executed as it is):
- **Its package installs.** A file that pip-installs at import (teelaitila's: apache-tvm-ffi and
  nvidia-cutlass-dsl 4.4.0.dev0) gets no subprocess: the calls are recorded (`PeerModule.installs`) and
  answered as done. The route runs under the DSL installed here (4.5.2 for teelaitila's: 4.3.5 lacks
  ClcDynamicPersistentTileScheduler).
- **TVM-FFI.** `--enable-tvm-ffi` is dropped from `cute.compile`'s options (TVM-FFI is not installed here,
  and the stub driver serves the DSL's own launch path); the compiled function is then called with the
  peer's torch tensors converted by DLPack (`from_dlpack`, dynamic layout), which is what TVM-FFI does at
  the call.
- **"cuda" tensors.** The peer's `torch` is a view of torch whose tensor creators (`torch.tensor`,
  `torch.empty`, ...) make on the CPU what the peer asks for on "cuda" (the emulator's global memory is host
  memory), and record it: the tensors are registered as global memory, and each creation is counted as the
  host work of the call it happened in (`HostWork`: a `torch.tensor(..., device="cuda")` from host data is a
  pageable host-to-device copy, which synchronizes the stream in PyTorch; `torch.cuda.synchronize` blocks).
"""

from __future__ import annotations

import copy
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
ATOL = RTOL = 1e-3
GUARD_ROWS = 2
POISON = 0x7E00  # fp16 NaN
GUARD = 0x5A5A

# Where each peer's file comes from, and its published B200 times (us; task.yml's benchmarks 1-4)
PEERS = {
    "teelaitila": {
        "get": "git clone https://github.com/teelaitila/nvfp4_gpumode && git -C nvfp4_gpumode show "
               "2bc5dce1130fdd53133fde5dc73fc5c51e4532d1:group_gemm/submissionv3.py > teelaitila_submissionv3.py",
        "published_us": (40.4, 28.3, 14.2, 11.0),
        "published_where": "group_gemm/worklog.md at 2bc5dce, section 'Benchmarks:' (the board's mean, "
                           "'⏱ 40.4 ± 0.39 µs' ...; best of runs '⚡' 39.7 / 27.4 / 13.3 / 10.6)",
        "marker": "class Sm100GroupedBlockScaledGemmKernel",
        # Its shared storage gives the CLC response (16 bytes, written by try_cancel) a field of one Int32: the
        # response covers the CLC mbarrier declared 8 bytes after it (the emulator's ERROR clc, "covers the
        # mbarrier"). The repair makes the field 4 x Int32, as NVIDIA's CLC examples declare theirs.
        "repairs": {"clc-response-16": (r"(MemRange\[cutlass\.Int32, )1(\])", r"\g<1>4\2")},
    },
}


KIND = "a CuTe DSL entry with its own custom_kernel"  # what recognizes() accepts (groundtruth/peers.py)


def make_case(path, source_text: str, spec: str, *, repairs: tuple = (), seed_shift: int = 0,
              row: tuple | None = None) -> "PeerDsl":
    """The route's case (groundtruth/peers.py): the file at `path` (the DSL reads its kernels' source from
    it), `repairs` named in PEERS, `seed_shift` added to the spec's seed; `row` is a CUDA entry's option."""
    if row is not None:
        raise ValueError("--row picks a CUDA entry's LAUNCH instance; a CuTe DSL entry compiles its own")
    case = PeerDsl(path, spec, seed=None if not seed_shift else _spec_seed(spec) + seed_shift, repairs=tuple(repairs))
    name = which_peer(source_text)
    case.note = (f"peer: {name or Path(path).name}, CuTe DSL entry through its own custom_kernel"
                 + (f"; repaired: {', '.join(repairs)}" if repairs else ""))
    return case


def _spec_seed(spec: str) -> int:
    import eval as harness

    return harness.parse_spec_line(spec)["seed"]


def recognizes(source_text: str) -> bool:
    """A CuTe DSL leaderboard file: it imports cutlass's cute, compiles with `cute.compile` and defines
    `custom_kernel`; not a load_inline CUDA one, not this project's (which defines compile_sm100: the
    `submission` route runs it)."""
    return ("import cutlass.cute" in source_text and "cute.compile(" in source_text
            and "def custom_kernel(" in source_text and "load_inline" not in source_text
            and "\ndef compile_sm100" not in source_text)


def which_peer(source_text: str) -> str | None:
    return next((name for name, peer in PEERS.items() if peer["marker"] in source_text), None)


# --------------------------------------------------------------------------------------------------
# The peer's view of torch: "cuda" tensors on the CPU, and what a call does on the host
# --------------------------------------------------------------------------------------------------


@dataclass
class HostWork:
    """What one call of the peer's custom_kernel did on the host that a GPU run would pay for: pageable
    host-to-device copies (torch.tensor of host data on "cuda": PyTorch synchronizes the stream after the
    copy), device allocations (torch.empty and kin on "cuda"), explicit synchronizations, compilations."""

    copies: list = field(default_factory=list)  # (what, bytes)
    allocations: list = field(default_factory=list)  # (what, bytes)
    synchronizations: int = 0
    compilations: int = 0

    @property
    def blocks(self) -> bool:
        """Does the call wait for the GPU on the host (a synchronizing copy or a synchronize)?"""
        return bool(self.copies) or self.synchronizations > 0

    def describe(self) -> str:
        parts = []
        if self.compilations:
            parts.append(f"{self.compilations} compilation(s)")
        if self.copies:
            parts.append(f"{len(self.copies)} pageable host-to-device copies ({sum(b for _, b in self.copies)} B; "
                         "each synchronizes the stream)")
        if self.allocations:
            parts.append(f"{len(self.allocations)} device allocation(s) ({sum(b for _, b in self.allocations)} B)")
        if self.synchronizations:
            parts.append(f"{self.synchronizations} torch.cuda.synchronize")
        return "; ".join(parts) if parts else "nothing that waits for the GPU"


def _on_cuda(device) -> bool:
    if device is None:
        return False
    return str(device).startswith("cuda")


class HostTorch:
    """torch for the peer's module: its tensor creators make "cuda" tensors on the CPU and report them
    (`on_tensor(tensor, what, copied)`); `cuda.synchronize` is counted. Everything else is torch's."""

    FROM_DATA = ("tensor", "as_tensor")
    CREATORS = ("empty", "zeros", "ones", "full", "arange", "empty_strided", "randn", "rand", "randint")

    def __init__(self, on_tensor, on_synchronize):
        self._on_tensor = on_tensor

        class Cuda:
            def __getattr__(self, name):
                return getattr(torch.cuda, name)

            @staticmethod
            def synchronize(*args, **kwargs):
                on_synchronize()

            @staticmethod
            def is_available():
                return True

        self.cuda = Cuda()

    def __getattr__(self, name):
        value = getattr(torch, name)
        if name in self.FROM_DATA or name in self.CREATORS:
            copied = name in self.FROM_DATA

            def create(*args, **kwargs):
                cuda = _on_cuda(kwargs.get("device"))
                if cuda:
                    kwargs["device"] = "cpu"
                tensor = value(*args, **kwargs)
                if cuda:
                    self._on_tensor(tensor, f"torch.{name}", copied)
                return tensor

            return create
        return value


# --------------------------------------------------------------------------------------------------
# The peer's module
# --------------------------------------------------------------------------------------------------


class PeerCompiled:
    """A function the peer compiled (cute.compile, TVM-FFI dropped): called with the peer's torch tensors, which
    become cute tensors by DLPack; its PTX is `__ptx__`."""

    def __init__(self, compiled, module):
        self.compiled = compiled
        self.module = module

    @property
    def __ptx__(self):
        return self.compiled.__ptx__

    def __call__(self, *args):
        from cutlass.cute.runtime import from_dlpack

        self.module.last_compiled = self
        converted = [from_dlpack(a, assumed_align=16) if isinstance(a, torch.Tensor) else a for a in args]
        return self.compiled(*converted)


class PeerModule:
    """A peer's file loaded as a module with the route's seams (module docstring): `module` is it,
    `installs` the pip commands its import asked for, `kernels` the kernel objects it compiled (for warp
    roles), `tensors` every "cuda" tensor it made, `work` the host work of the current call."""

    def __init__(self, path: Path, repairs: tuple = ()):
        import cutlass.cute as cute

        self.path = Path(path)
        self.source = self.path.read_text()
        self.repairs = tuple(repairs)
        peer = PEERS.get(which_peer(self.source) or "", {})
        for name in self.repairs:
            known = peer.get("repairs", {})
            if name not in known:
                raise ValueError(f"repair {name!r}: this file's are {sorted(known) or 'none'}")
            pattern, replacement = known[name]
            self.source, count = re.subn(pattern, replacement, self.source)
            if count != 1:
                raise ValueError(f"repair {name!r}: {count} matches of {pattern!r} in {path} (one expected)")
        loaded = self.path
        if self.repairs:  # the DSL reads a kernel's source from its file: the repaired text gets a file of its own
            loaded = Path(tempfile.mkdtemp(prefix="peer_dsl_")) / f"{self.path.stem}__{'__'.join(self.repairs)}.py"
            loaded.write_text(self.source)
        if not recognizes(self.source):
            raise ValueError(f"{path}: not a CuTe DSL leaderboard file (cute.compile, custom_kernel)")
        self.installs: list = []
        self.kernels: list = []
        self.tensors: list = []
        self.work = HostWork()
        self.last_compiled = None
        name = f"peer_dsl_{self.path.stem}"
        spec = importlib.util.spec_from_file_location(name, loaded)
        module = importlib.util.module_from_spec(spec)
        saved = subprocess.check_call, subprocess.call, subprocess.run, os.system

        def refuse(*args, **kwargs):
            command = args[0] if args else kwargs.get("args")
            words = command if isinstance(command, (list, tuple)) else str(command).split()
            if "pip" in [str(w) for w in words] or any(str(w).endswith("pip") for w in words):
                self.installs.append(" ".join(str(w) for w in words))
                return 0
            raise RuntimeError(f"{path}: a subprocess at import ({command!r}) is not run by the emulator's route")

        if str(ROOT) not in sys.path:  # leaderboard files import the harness's task.py
            sys.path.insert(0, str(ROOT))
        subprocess.check_call = subprocess.call = os.system = refuse
        subprocess.run = lambda *a, **k: subprocess.CompletedProcess(a[0] if a else k.get("args"), refuse(*a, **k))
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        finally:
            subprocess.check_call, subprocess.call, subprocess.run, os.system = saved
        if not hasattr(module, "custom_kernel"):
            raise ValueError(f"{path}: defines no custom_kernel")
        self.module = module
        module.torch = HostTorch(self._made, self._synchronized)
        peer = self

        class Cute:
            """The peer's `cute`: compile drops --enable-tvm-ffi and returns a PeerCompiled."""

            def __getattr__(self, name):
                return getattr(cute, name)

            @staticmethod
            def compile(*args, options=None, **kwargs):
                if options:
                    options = " ".join(o for o in options.split() if o != "--enable-tvm-ffi")
                if args:
                    peer.kernels.append(args[0])
                peer.work.compilations += 1
                return PeerCompiled(cute.compile(*args, **kwargs, **({"options": options} if options else {})), peer)

        module.cute = Cute()

    def _made(self, tensor, what, copied) -> None:
        self.tensors.append(tensor)
        nbytes = tensor.numel() * tensor.element_size()
        (self.work.copies if copied else self.work.allocations).append((what, nbytes))

    def _synchronized(self) -> None:
        self.work.synchronizations += 1

    def warp_roles(self) -> dict:
        """{warp: role} from the last kernel object it compiled, where it names them as NVIDIA's examples do
        (tma_warp_id, mma_warp_id, epilog_warp_id, sched_warp_id); {} otherwise."""
        if not self.kernels:
            return {}
        kernel = self.kernels[-1]
        roles = {}
        for attribute, role in (("epilog_warp_id", "epilogue"), ("tma_warp_id", "TMA"), ("mma_warp_id", "MMA"),
                                ("sched_warp_id", "scheduler")):
            ids = getattr(kernel, attribute, None)
            for w in (ids if isinstance(ids, (tuple, list)) else () if ids is None else (ids,)):
                roles[int(w)] = role
        return roles


_modules: dict = {}


def load(path, repairs: tuple = ()) -> PeerModule:
    """The peer's module, loaded once per path and repairs (PEERS[...]["repairs"] names) in this process (its
    caches, compiled kernels included, live across calls as they do on the board)."""
    key = (str(Path(path).resolve()), tuple(repairs))
    if key not in _modules:
        _modules[key] = PeerModule(Path(path), tuple(repairs))
    return _modules[key]


# --------------------------------------------------------------------------------------------------
# The board's inputs and the check
# --------------------------------------------------------------------------------------------------


def board_inputs(spec: str, seed: int | None = None):
    """The board's inputs for SPEC ("m: [..]; n: [..]; k: [..]; g: G; seed: S"; `seed` replaces S), from
    reference.generate_input on the CPU, each c poisoned with NaN inside GUARD_ROWS guard rows. Returns
    (data, guard buffers, the seed used)."""
    sys.path.insert(0, str(ROOT)) if str(ROOT) not in sys.path else None
    import eval as harness
    from reference import generate_input

    values = harness.parse_spec_line(spec)
    harness.check_spec_values(values, spec)
    if seed is not None:
        values["seed"] = seed
    data = generate_input(**values)
    guards, abc = [], []
    for (a, b, _), (m, n, _, _) in zip(data[0], data[3]):
        buffer = torch.full(((m + 2 * GUARD_ROWS) * n,), GUARD, dtype=torch.int16)
        buffer[GUARD_ROWS * n:(GUARD_ROWS + m) * n] = POISON
        abc.append((a, b, buffer.view(torch.float16)[GUARD_ROWS * n:(GUARD_ROWS + m) * n].view(m, n, 1)))
        guards.append(buffer)
    return (abc, data[1], data[2], data[3]), guards, values["seed"]


def compare_outputs(outputs, data, guards, atol: float = ATOL, rtol: float = RTOL) -> tuple:
    """(verdict word, (worst error / tolerance, worst absolute error) or None, message): OUTSIDE if a guard
    row was written, FAIL on an output off the exact reference (reference.ref_kernel), else PASS."""
    from reference import ref_kernel

    if len(outputs) != len(data[3]):
        return "FAIL", None, f"{len(outputs)} outputs for {len(data[3])} groups"
    results = [out.to(torch.float64) for out in outputs]  # before ref_kernel writes into the same c tensors
    reference = [ref.to(torch.float64) for ref in ref_kernel(data)]
    worst = worst_ratio = 0.0
    for g, (out, ref, guard) in enumerate(zip(results, reference, guards)):
        n = out.shape[1]
        rows = guard.numel() // n
        outside = torch.cat([guard[:GUARD_ROWS * n], guard[(rows - GUARD_ROWS) * n:]])
        if (outside != GUARD).any():
            return "OUTSIDE", None, f"group {g}: {int((outside != GUARD).sum())} guard cells written"
        err = (out - ref).abs()
        tolerance = atol + rtol * ref.abs()
        bad = ~(err <= tolerance)
        worst = max(worst, float(torch.nan_to_num(err, nan=float("inf")).max()))
        worst_ratio = max(worst_ratio, float(torch.nan_to_num(err / tolerance, nan=float("inf")).max()))
        if bad.any():
            idx = tuple(int(i) for i in bad.nonzero()[0])
            return "FAIL", (worst_ratio, worst), (f"group {g}: {int(bad.sum())} of {bad.numel()} outputs wrong, "
                                                  f"first at {idx}: {float(out[idx])} vs {float(ref[idx])}")
    return "PASS", (worst_ratio, worst), ""


# --------------------------------------------------------------------------------------------------
# The case
# --------------------------------------------------------------------------------------------------


class PeerCall:
    """`compiled` of a PeerDsl: calling it is one call of the peer's custom_kernel on the case's inputs; its
    `__ptx__` is the PTX of the kernel that call launched (the peer's last compiled function called)."""

    def __init__(self, case: "PeerDsl"):
        self.case = case

    @property
    def __ptx__(self):
        compiled = self.case.peer.last_compiled
        return None if compiled is None else compiled.__ptx__

    def __call__(self, *args):
        return self.case.call()


class PeerDsl:
    """One board case (SPEC) of a peer's CuTe DSL file: its inputs, a call of its custom_kernel, the regions
    to register and the check. `seed`: the inputs' seed (default: SPEC's); `with_inputs(seed)` draws another
    call's inputs."""

    def __init__(self, path, spec: str, *, seed: int | None = None, repairs: tuple = ()):
        os.environ.setdefault("CUTE_DSL_KEEP_PTX", "1")
        self.peer = load(path, repairs)
        self.spec = spec
        self.data, self.guards, self.seed = board_inputs(spec, seed)
        self.outputs = None
        self.work = None  # HostWork of this case's call
        self.emulators: list = []
        self.compiled = PeerCall(self)
        self.args = ()
        self.warp_roles = {}
        self.warm()

    def warm(self) -> None:
        """Compile the peer's kernel for this shape (its first call does), so that `warp_roles` is known before
        an emulator is made; the launch it records is dropped."""
        from emulator import driver

        if self.peer.kernels and self.peer.last_compiled is not None:
            self.warp_roles = self.peer.warp_roles()
            return
        scratch, _, _ = board_inputs(self.spec, self.seed)
        self.peer.scratch = scratch  # kept alive: the peer may cache by id(data)
        self.peer.module.custom_kernel(scratch)
        driver.take_launches()
        self.warp_roles = self.peer.warp_roles()

    def with_inputs(self, seed: int) -> "PeerDsl":
        other = copy.copy(self)
        other.data, other.guards, other.seed = board_inputs(self.spec, seed)
        other.outputs = other.work = None
        other.compiled = PeerCall(other)
        other.emulators = self.emulators
        return other

    def register(self, emu) -> None:
        """The inputs, each c's guard buffer and, at each call, every tensor the peer made as global memory."""
        if emu not in self.emulators:
            self.emulators.append(emu)
        for group in (*self.data[0], *self.data[1], *self.data[2]):
            emu.register(*group)
        emu.register(*self.guards)

    def call(self):
        """The peer's custom_kernel on this case's inputs (its launch is recorded by the stub driver)."""
        peer = self.peer
        peer.work = self.work = HostWork()
        self.outputs = peer.module.custom_kernel(self.data)
        for emu in self.emulators:
            emu.register(*peer.tensors)
        return self.outputs

    def compare(self, atol: float = ATOL, rtol: float = RTOL) -> tuple:
        if self.outputs is None:
            return "FAIL", None, "custom_kernel was not called"
        return compare_outputs(self.outputs, self.data, self.guards, atol, rtol)


# --------------------------------------------------------------------------------------------------
# Command line (until tools/emulate.py's `peer` subcommand dispatches here)
# --------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    """python -m groundtruth.peer_dsl FILE (--spec SPEC | --benchmark N) [--repair NAME] [--mode M | --time]
    [--timing-only] [--calls N] [--races] [--seed S]: the case through tools/emulate.py's run_example_calls
    (its verdict line and exit status)."""
    import argparse

    sys.path[:0] = [str(ROOT), str(ROOT / "tools")]
    import emulate as tool

    parser = argparse.ArgumentParser(prog="python -m groundtruth.peer_dsl", description=main.__doc__)
    parser.add_argument("file", type=Path)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--spec", metavar="SPEC")
    which.add_argument("--benchmark", type=int, metavar="N", help="task.yml's benchmark N (from 1)")
    parser.add_argument("--repair", action="append", default=[], metavar="NAME",
                        help="a known defect of the file repaired before it runs (PEERS[...]['repairs'])")
    parser.add_argument("--mode", choices=("eager", "adversarial", "timed"), default="eager")
    parser.add_argument("--time", action="store_true")
    parser.add_argument("--timing-only", action="store_true")
    parser.add_argument("--calls", type=int, default=1)
    parser.add_argument("--races", action="store_true")
    parser.add_argument("--seed", type=int, default=0, help="adversarial order")
    parser.add_argument("--flush-every", type=int, default=15)
    args = parser.parse_args(argv)
    if args.time or args.timing_only:
        args.mode = "timed"
    args.machine, args.set, args.timeline, args.ptx_filter, args.step_budget = "b200", [], None, None, None
    os.environ.setdefault("CUTE_DSL_DISABLE_FILE_CACHING", "1")
    from emulator import driver

    status = driver.rerun_with_stub(__file__, sys.argv[1:] if argv is None else list(argv))
    if status is not None:
        return status
    driver.install()
    import emulator

    spec = args.spec
    if args.benchmark:
        import eval as harness

        _, benchmarks, _ = harness.load_task(ROOT / "task.yml")
        spec = harness._spec_line(benchmarks[args.benchmark - 1])
    start = time.perf_counter()
    try:
        case = PeerDsl(args.file, spec, repairs=tuple(args.repair))
        (word, errors, message), stats = tool.run_example_calls(case, args, emulator)
    except emulator.HangError as e:
        print(e.report, flush=True)
        return tool.verdict("HANG", f"{e.message} seconds={time.perf_counter() - start:.1f}")
    except emulator.RaceError as e:
        return tool.verdict("RACE", f"{e} seconds={time.perf_counter() - start:.1f}")
    except emulator.EmulatorError as e:
        return tool.verdict("ERROR", f"{e} seconds={time.perf_counter() - start:.1f}")
    if message:
        print(message, flush=True)
    work = case.peer.work
    print(f"host work of the last call: {work.describe()}", flush=True)
    if stats.timing:
        import json

        print("timing: " + json.dumps({k: round(v, 4) if isinstance(v, float) else v
                                       for k, v in stats.timing.items()}), flush=True)
    return tool.verdict(word, tool.figures(errors, stats, time.perf_counter() - start,
                                           args.races and word in ("PASS", "FAIL", "OUTSIDE")))


if __name__ == "__main__":
    sys.exit(main())
