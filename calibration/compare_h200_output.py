"""The Hopper kernel's outputs in the emulator against the same kernel's outputs on a real H200.

    python calibration/compare_h200_output.py --emulate build/h200_compare/emulated.pt      # this CPU, minutes
    python calibration/compare_h200_output.py --hardware OUT.pt                             # on the H200
    python calibration/compare_h200_output.py --compare build/h200_compare/emulated.pt OUT.pt
    python calibration/compare_h200_output.py --reference build/h200_compare/exact.pt       # the exact reference

Both halves build the same inputs on the CPU from fixed seeds (the hardware half then copies them to the
GPU with their strides) and run them through submission.custom_kernel: `--emulate` on an emulated H200
(tools/emulate.py's sm_90a route: the DSL's host code, the stub driver, the emulator), `--hardware` on the
GPU. Each c starts as fp16 NaN, so a cell the kernel did not write shows. Two kinds of data per shape:
- `board`: reference.generate_input's draws (drawn on the CPU on both sides). Its values make every
  partial sum exact in fp32 (reference.py), so any summation order gives the same fp32 sums: a
  difference here is a functional difference, not rounding.
- `wide`: the same layout with every FP4 code and e4m3 scales from 2^-6 to 1.875, so sums are not exact
  in fp32 and the tensor core's accumulation order and rounding can show (emulator/DESIGN.md, "sm_90a").
`--compare A B` prints, per case, the largest difference in fp16 ulps (distance between the two fp16
values in the ordered set of fp16 numbers), the largest absolute difference (an ulp is tiny near zero,
where a cancelling sum lands), how many elements differ and how many are NaN, then a summary.
`--reference` saves reference.ref_kernel's outputs on the CPU (float64 sums, one rounding to fp16: the
correctly rounded result), a third side to compare either with.
`--config TEXT` (default shipped) is the SM100_CONFIG text both halves run (see tools/emulate.py --arch).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

NAN_F16 = 0x7E00
SHAPES = [  # (name, spec): task.yml's tests 1, 4, 9 and the M edges of the long emulator matrix
    ("task1", "m: [96, 128]; n: [128, 256]; k: [256, 512]; g: 2; seed: 1111"),
    ("task4", "m: [80, 128, 256]; n: [384, 256, 128]; k: [256, 512, 256]; g: 3; seed: 1111"),
    ("task9", "m: [40, 56, 384, 512]; n: [512, 384, 256, 128]; k: [256, 256, 256, 256]; g: 4; seed: 1111"),
    ("m1", "m: [1]; n: [384]; k: [256]; g: 1; seed: 7"),
    ("m7_m40", "m: [7, 40]; n: [128, 384]; k: [768, 256]; g: 2; seed: 8"),
    ("m129", "m: [129, 255]; n: [256, 384]; k: [1024, 512]; g: 2; seed: 9"),
]
KINDS = ("board", "wide")


def make_inputs(spec: str, kind: str):
    """The inputs of one case on the CPU, each c filled with fp16 NaN."""
    import torch

    import eval as harness
    import reference

    values = harness.parse_spec_line(spec)
    harness.check_spec_values(values, spec)
    on_cpu = reference._data_device
    reference._data_device = lambda: torch.device("cpu")  # the GPU half draws on the CPU too
    try:
        data = reference.generate_input(**values)
        if kind == "wide":
            data = _widen(data, values["seed"])
    finally:
        reference._data_device = on_cpu
    for _, _, c in data[0]:
        c.view(torch.int16).fill_(NAN_F16)
    return data


def _widen(data, seed: int):
    """Board inputs with every FP4 code and positive e4m3 scales 2^-6 .. 1.875 (the same tensors, refilled),
    the reordered scales rebuilt from them."""
    import torch

    import reference

    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed + 1)  # the reordered scales' padding
    reordered = []
    for (a, b, _), (sfa, sfb), (m, n, k, l) in zip(data[0], data[1], data[3]):
        for fp4 in (a, b):
            codes = fp4.view(torch.uint8)
            codes.copy_(torch.randint(0, 256, codes.shape, dtype=torch.uint8, generator=generator))
        for scales in (sfa, sfb):
            exponent = torch.randint(1, 8, scales.shape, dtype=torch.uint8, generator=generator)
            mantissa = torch.randint(0, 8, scales.shape, dtype=torch.uint8, generator=generator)
            scales.view(torch.uint8).copy_((exponent << 3) | mantissa)
        reordered.append((reference.create_reordered_scale_factor_tensor(l, m, k, sfa),
                          reference.create_reordered_scale_factor_tensor(l, n, k, sfb)))
    return data[0], data[1], reordered, data[3]


def _cases():
    return [(f"{name}/{kind}", spec, kind) for name, spec in SHAPES for kind in KINDS]


def _save(path: Path, side: str, config: str, results: list) -> None:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"side": side, "config": config, "cases": results}, path)
    print(f"wrote {path} ({len(results)} cases)", flush=True)


def emulate_half(path: Path, config: str) -> int:
    """Every case through the emulated H200 (eager mode), outputs saved to `path`."""
    os.environ.setdefault("CUTE_DSL_DISABLE_FILE_CACHING", "1")
    from emulator import driver

    driver.install(gpu="H200")
    import emulate
    import emulator

    S = emulate.load_submission(ROOT / "submission.py")
    emulate.hopper_config(S, config)
    emulate.EmulatedH200(None).install(S)
    results = []
    for name, spec, kind in _cases():
        start = time.perf_counter()
        data = make_inputs(spec, kind)
        emu = emulator.Emulator(warp_roles=emulate.submission_roles(S))
        outputs, stats = emulate.emulated_call(S, data, [], emu)
        results.append({"name": name, "spec": spec, "data": kind, "c": [c.clone() for c in outputs]})
        print(f"{name}: {stats.instructions} warp instructions, {time.perf_counter() - start:.1f} s", flush=True)
    _save(path, "emulated H200", config, results)
    return 0


def hardware_half(path: Path, config: str) -> int:
    """Every case through the real kernel on this machine's GPU (compute capability 9.0)."""
    import torch

    import emulate
    import submission as S

    emulate.hopper_config(S, config)
    device = torch.device("cuda")
    name = torch.cuda.get_device_name(device)
    results = []
    for case, spec, kind in _cases():
        data = _to_device(make_inputs(spec, kind), device)
        outputs = S.custom_kernel(data)
        torch.cuda.synchronize()
        results.append({"name": case, "spec": spec, "data": kind, "c": [c.cpu() for c in outputs]})
        print(f"{case}: done", flush=True)
    _save(path, name, config, results)
    return 0


def reference_half(path: Path) -> int:
    """Every case through the exact reference on the CPU."""
    from reference import ref_kernel

    results = []
    for name, spec, kind in _cases():
        outputs = ref_kernel(make_inputs(spec, kind))
        results.append({"name": name, "spec": spec, "data": kind, "c": [c.clone() for c in outputs]})
    _save(path, "exact reference (CPU, float64)", "-", results)
    return 0


def _to_device(data, device):
    """Each tensor copied to `device` with its shape and strides (the kernel checks the board's layouts)."""
    import torch

    def move(t):
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device).copy_(t)

    return ([tuple(move(t) for t in group) for group in data[0]], [tuple(move(t) for t in g) for g in data[1]],
            [tuple(move(t) for t in g) for g in data[2]], data[3])


def ulp_distance(x, y):
    """|x - y| in fp16 ulps: the distance of their bit patterns in the ordered set of fp16 values (+0 and
    -0 are one value); NaN where either is NaN."""
    import torch

    def ordered(t):
        bits = t.contiguous().view(torch.int16).to(torch.int32)
        magnitude = bits & 0x7FFF
        return torch.where(bits < 0, -magnitude, magnitude)

    distance = (ordered(x) - ordered(y)).abs().to(torch.float64)
    return torch.where(x.isnan() | y.isnan(), torch.full_like(distance, float("nan")), distance)


def compare(path_a: Path, path_b: Path) -> int:
    import torch

    a, b = torch.load(path_a), torch.load(path_b)
    print(f"A: {path_a} ({a['side']}, config {a['config']})\nB: {path_b} ({b['side']}, config {b['config']})")
    cases_b = {case["name"]: case for case in b["cases"]}
    print(f"{'case':<16} {'elements':>9} {'differ':>8} {'max ulps':>9} {'max |A-B|':>10} {'NaN A':>6} {'NaN B':>6}")
    worst = {kind: 0.0 for kind in KINDS}
    total_differ = 0
    for case in a["cases"]:
        other = cases_b.get(case["name"])
        if other is None:
            print(f"{case['name']:<16} missing in B")
            continue
        elements = differ = nan_a = nan_b = 0
        largest = absolute = 0.0
        for x, y in zip(case["c"], other["c"]):
            gap = (x.double() - y.double()).abs()
            if (~gap.isnan()).any():
                absolute = max(absolute, float(gap[~gap.isnan()].max()))
            distance = ulp_distance(x, y)
            elements += x.numel()
            nan_a += int(x.isnan().sum())
            nan_b += int(y.isnan().sum())
            differ += int((distance.nan_to_num(nan=1.0) != 0).sum())
            if (~distance.isnan()).any():
                largest = max(largest, float(distance[~distance.isnan()].max()))
        worst[case["data"]] = max(worst[case["data"]], largest)
        total_differ += differ
        print(f"{case['name']:<16} {elements:>9} {differ:>8} {largest:>9.0f} {absolute:>10.3g} {nan_a:>6} {nan_b:>6}")
    print("largest difference: " + ", ".join(f"{kind} data {worst[kind]:.0f} ulps" for kind in KINDS)
          + f"; {total_differ} elements differ in all")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--emulate", type=Path, metavar="OUT.pt", help="run the cases in the emulator (CPU)")
    what.add_argument("--hardware", type=Path, metavar="OUT.pt", help="run the cases on this GPU")
    what.add_argument("--reference", type=Path, metavar="OUT.pt", help="the exact reference's outputs (CPU)")
    what.add_argument("--compare", type=Path, nargs=2, metavar=("A.pt", "B.pt"))
    parser.add_argument("--config", default="shipped", metavar="TEXT", help="SM100_CONFIG text (pdl, jobs)")
    args = parser.parse_args(argv)
    if args.emulate:
        return emulate_half(args.emulate, args.config)
    if args.hardware:
        return hardware_half(args.hardware, args.config)
    if args.reference:
        return reference_half(args.reference)
    return compare(*args.compare)


if __name__ == "__main__":
    sys.exit(main())
