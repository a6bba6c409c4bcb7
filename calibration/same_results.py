"""Does a change to the emulator leave every result as it was? Record a set of cases' results before the change,
compare after: every simulated figure and every functional verdict must be bit-identical.

    python calibration/same_results.py record DIR [--only NAME,..]     # before: DIR/NAME.txt per case
    python calibration/same_results.py compare DIR [--only NAME,..]    # after: exit 1 on any difference
    python calibration/same_results.py list

Each case is one command of tools/emulate.py (or groundtruth/peer_dsl.py), run in a fresh process (one at a
time: each is one core's work) with probes that print, besides the command's own output:
- `outputs`: a SHA-256 of every output tensor the case compares against the reference (and its guard rows),
  bit for bit, taken where the route compares (emulate._compare, peer_dsl.compare_outputs, the example cases'
  `compare`);
- `stream`: per launch, its instruction count, and, timed, every figure unrounded (Clock.figures, the
  stream's figures), each CTA's start and exit and each warp's final time (repr of the float).
What is recorded is the command's output with the host's own figures taken out (`seconds=`, `rate=`) and the
probes' lines. A peer's file that is not on this machine skips its case (said, not failed).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEERS = Path(os.environ.get("PEERS_DIR", "/work/peers"))
# teelaitila's entry needs nvidia-cutlass-dsl 4.5.2 (groundtruth/peer_dsl.py): a Python that has it
DSL_452_PYTHON = os.environ.get("DSL_452_PYTHON", "/work/venv452/bin/python")
SMALL_B200 = "m: [128]; n: [256]; k: [512]; g: 1; seed: 1"
TWO_GROUPS = "m: [40, 200]; n: [512, 512]; k: [1024, 1024]; g: 2; seed: 2"
PEER_SPEC = "m: [96, 128]; n: [256, 256]; k: [256, 256]; g: 2; seed: 1111"

# name -> (entry: "emulate" or "peer_dsl", arguments, a file it needs or None)
CASES = {
    "nvidia-eager": ("emulate", ["nvidia"], None),
    "nvidia-adversarial": ("emulate", ["nvidia", "--mode", "adversarial", "--seed", "3"], None),
    "nvidia-races": ("emulate", ["nvidia", "--races"], None),
    "nvidia-timed": ("emulate", ["nvidia", "--time"], None),
    "ours-small": ("emulate", ["submission", "--time", "--spec", SMALL_B200], None),
    "ours-two-groups": ("emulate", ["submission", "--time", "--spec", TWO_GROUPS], None),
    "ours-stream": ("emulate", ["submission", "--time", "--calls", "2", "--spec", TWO_GROUPS], None),
    "ours-adversarial": ("emulate", ["submission", "--mode", "adversarial", "--seed", "2", "--spec", SMALL_B200], None),
    "ours-benchmark4": ("emulate", ["benchmarks", "--timing-only", "--calls", "2", "--only", "4"], None),
    "hopper-small": ("emulate", ["submission", "--arch", "sm_90a", "--time",
                                 "--spec", "m: [40]; n: [512]; k: [512]; g: 1; seed: 7"], None),
    "hopper-timing-only": ("emulate", ["submission", "--arch", "sm_90a", "--timing-only", "--spec",
                                       "m: [64, 128]; n: [1024, 1024]; k: [1024, 1024]; g: 2; seed: 7"], None),
    "flashinfer-timed": ("emulate", ["flashinfer", "--groups", "2", "--masked-m", "100,37", "--nk", "256,256",
                                     "--masked-m-slack", "1", "--time"], None),
    "peer-v6b": ("emulate", ["peer", "--source", str(PEERS / "gau-nernst" / "submission_v6b.py"), "--time",
                             "--spec", PEER_SPEC], PEERS / "gau-nernst" / "submission_v6b.py"),
    "peer-dsl": ("peer_dsl", [str(PEERS / "teelaitila_submissionv3.py"), "--repair", "clc-response-16", "--time",
                              "--spec", PEER_SPEC], PEERS / "teelaitila_submissionv3.py"),
}

HOST_FIGURES = re.compile(r"(seconds=)[0-9.]+|(rate=)\S+")


# --------------------------------------------------------------------------------------------------
# the probes (in the case's own process)
# --------------------------------------------------------------------------------------------------


def _tensor_bytes(t) -> bytes:
    import numpy as np
    import torch

    if isinstance(t, torch.Tensor):
        t = t.detach().cpu().contiguous()
        return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return np.ascontiguousarray(t).tobytes()


def _digest_tensors(tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        if t is not None:
            h.update(_tensor_bytes(t))
    return h.hexdigest()[:24]


def _print_outputs(where: str, tensors) -> None:
    print(f"[same_results] outputs ({where}): {_digest_tensors(tensors)}", flush=True)


def _stream_digest(stream) -> str:
    """Every launch's instruction count; timed, every figure and every CTA's and warp's times, unrounded."""
    rows = [("launch", i, s.instructions, s.ctas, s.warps) for i, s in enumerate(stream.launches)]
    clock = stream.clock
    if clock is not None:
        rows.append(("stream", repr(sorted((k, repr(v)) for k, v in (stream.timing or {}).items()))))
        for state in clock.states:
            grid = state.grid
            rows.append(("figures", state.index, repr(sorted((k, repr(v)) for k, v in clock.figures(grid).items()))))
            for cta in grid.ctas:
                rows.append(("cta", state.index, cta.label, repr(clock.cta_start.get(cta)), repr(clock.cta_end.get(cta)),
                             clock.sm_of.get(cta), tuple(repr(w.time) for w in cta.warps)))
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:24]


def install_probes() -> None:
    import emulator
    from emulator import launch

    original = launch.execute_stream

    def execute_stream(*args, **kwargs):
        stream = original(*args, **kwargs)
        kinds = "timed" if stream.clock is not None else "untimed"
        print(f"[same_results] stream ({kinds}, {len(stream.launches)} launch(es), "
              f"{sum(s.instructions for s in stream.launches)} instructions): {_stream_digest(stream)}", flush=True)
        return stream

    launch.execute_stream = execute_stream
    emulator.execute_stream = execute_stream

    import emulate

    compare = emulate._compare

    def _compare(pairs):
        pairs = list(pairs)
        _print_outputs("emulate._compare", [t for out, _, guard in pairs for t in (out, guard)])
        return compare(pairs)

    emulate._compare = _compare

    def wrap_method(cls, attrs):
        method = cls.compare

        def compare(self, *args, **kwargs):
            tensors = []
            for attr in attrs:
                value = getattr(self, attr, None)
                tensors.extend(value if isinstance(value, (list, tuple)) else [value])
            _print_outputs(f"{cls.__name__}.compare", tensors)
            return method(self, *args, **kwargs)

        cls.compare = compare

    try:
        from groundtruth import peer_dsl

        outputs = peer_dsl.compare_outputs

        def compare_outputs(outs, data, guards, *args, **kwargs):
            _print_outputs("peer_dsl.compare_outputs", [*outs, *guards])
            return outputs(outs, data, guards, *args, **kwargs)

        peer_dsl.compare_outputs = compare_outputs
    except ImportError:
        pass
    make_emulator = emulate.make_emulator

    def make_emulator_probed(*args, **kwargs):
        # the example cases' modules are imported by now (after the stub driver is installed)
        for module, cls, attrs in (("groundtruth.flashinfer", "FlashInferMasked", ("c",)),
                                   ("groundtruth.nvidia_grouped", "NvidiaGrouped", ("c",)),
                                   ("groundtruth.peer_cuda", "PeerCudaCase", ("outputs", "buffers"))):
            mod = sys.modules.get(module)
            if mod is not None and not getattr(getattr(mod, cls), "_probed", False):
                wrap_method(getattr(mod, cls), attrs)
                getattr(mod, cls)._probed = True
        return make_emulator(*args, **kwargs)

    emulate.make_emulator = make_emulator_probed


def run_case(entry: str, argv: list) -> int:
    sys.path[:0] = [str(ROOT), str(ROOT / "tools")]
    os.chdir(ROOT)
    if entry == "emulate":
        import emulate

        install_probes()
        return emulate.main(argv)
    from groundtruth import peer_dsl

    install_probes()
    return peer_dsl.main(argv)


# --------------------------------------------------------------------------------------------------
# record and compare
# --------------------------------------------------------------------------------------------------


def normalized(text: str) -> str:
    return HOST_FIGURES.sub(lambda m: (m.group(1) or m.group(2)) + "*", text)


def run_one(name: str) -> tuple:
    entry, argv, needs = CASES[name]
    python = DSL_452_PYTHON if entry == "peer_dsl" else sys.executable
    if needs is not None and not Path(needs).exists() or not Path(python).exists():
        return None, 0.0
    start = time.perf_counter()
    done = subprocess.run([python, __file__, "_case", entry, *argv], cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    text = done.stdout + f"[same_results] exit {done.returncode}\n"
    if "Traceback" in done.stderr:
        text += done.stderr[-3000:]
    return normalized(text), seconds


def main(argv=None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "_case":
        return run_case(argv[1], argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("record", "compare", "list"))
    parser.add_argument("dir", type=Path, nargs="?")
    parser.add_argument("--only", default=None, metavar="NAME,..")
    args = parser.parse_args(argv)
    names = list(CASES) if args.only is None else args.only.split(",")
    if args.action == "list":
        for name in CASES:
            print(name, " ".join(CASES[name][1]))
        return 0
    if args.dir is None:
        parser.error("record and compare need DIR")
    args.dir.mkdir(parents=True, exist_ok=True)
    differ = 0
    for name in names:
        text, seconds = run_one(name)
        if text is None:
            print(f"{name}: skipped (needs {CASES[name][2]})", flush=True)
            continue
        path = args.dir / f"{name}.txt"
        if args.action == "record":
            path.write_text(text)
            print(f"{name}: recorded in {seconds:.1f} s", flush=True)
            continue
        if not path.exists():
            print(f"{name}: no record in {args.dir}", flush=True)
            differ += 1
            continue
        before = path.read_text()
        if before == text:
            print(f"{name}: same ({seconds:.1f} s)", flush=True)
        else:
            differ += 1
            (args.dir / f"{name}.now.txt").write_text(text)
            import difflib

            print(f"{name}: DIFFERS ({seconds:.1f} s)", flush=True)
            sys.stdout.writelines(list(difflib.unified_diff(before.splitlines(True), text.splitlines(True),
                                                            "before", "now", n=1))[:40])
    print(json.dumps({"cases": len(names), "differ": differ}))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
