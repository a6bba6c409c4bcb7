"""Check and time the Hopper kernel (sm90_kernel.py) on its own, without submission.py.

    python tools/sm90_check.py                 # correctness on every shape, then timings
    python tools/sm90_check.py --cases test0,test8 --no-time   # a small run (for compute-sanitizer)

Inputs follow the contract of reference.generate_input (FP4 bytes masked with 0xBB, scales 1 or 2,
scales in the 128x4 blocked layout with random padding rows); `full` cases use every e2m1 value
and a wider range of e4m3 scales.  The reference dequantizes in float64: nibble value x scale,
float64 matmul, fp16.  c is filled with NaN first and checked in full.  Timings follow eval.py's
benchmark protocol: 15 inputs, L2 flushed, events around 15 back-to-back calls, median of repeats.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TESTS = [  # task.yml tests: (m, n, k) per group
    ((96, 128), (128, 256), (256, 512)),
    ((256, 72), (512, 384), (256, 256)),
    ((128, 128), (128, 256), (512, 256)),
    ((80, 128, 256), (384, 256, 128), (256, 512, 256)),
    ((64, 72, 96), (128, 384, 512), (512, 512, 256)),
    ((64, 256, 128), (768, 128, 256), (512, 256, 512)),
    ((128, 128, 64), (256, 512, 512), (768, 256, 768)),
    ((128,) * 4, (128,) * 4, (512, 256, 512, 256)),
    ((40, 56, 384, 512), (512, 384, 256, 128), (256,) * 4),
    ((512, 384, 256, 128), (256,) * 4, (512, 768, 512, 768)),
]
BENCHMARKS = [
    ((80, 176, 128, 72, 64, 248, 96, 160), (4096,) * 8, (7168,) * 8),
    ((40, 76, 168, 72, 164, 148, 196, 160), (7168,) * 8, (2048,) * 8),
    ((192, 320), (3072,) * 2, (4096,) * 2),
    ((128, 384), (4096,) * 2, (1536,) * 2),
]
EXTRA = {  # shapes outside task.yml
    "one_group": ((77,), (256,), (512,)),
    "m1": ((1, 1), (128, 256), (256, 256)),
    "m300": ((300,), (384,), (512,)),
    "n256_k256": ((33, 200), (256, 256), (256, 256)),
    "g16": (tuple(range(8, 8 + 16 * 19, 19)), (128, 256) * 8, (256, 512) * 8),
    "full_values": ((72, 260), (256, 128), (512, 768)),
}
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def case_shapes(name):
    if name.startswith("test"):
        return TESTS[int(name[4:])]
    if name.startswith("bench"):
        return BENCHMARKS[int(name[5:]) - 1]
    return EXTRA[name]


def _blocked_scales(sf, rows, k, gen):
    """The (1, ceil(rows/128), ceil(k/64), 32, 4, 4) blocked buffer holding sf[r, kk], padding rows
    random, returned as the (32, 4, rest_m, 4, rest_k, 1) permuted view of the contract."""
    rb, kb = -(-rows // 128), -(-k // 64)
    buf = torch.randint(1, 3, (1, rb, kb, 32, 4, 4), generator=gen, dtype=torch.int8).to(torch.float8_e4m3fn)
    r = torch.arange(rows).view(-1, 1)
    kk = torch.arange(k // 16).view(1, -1)
    buf.view(torch.uint8)[0, r // 128, kk // 4, r % 32, (r % 128) // 32, kk % 4] = sf.view(torch.uint8)
    return buf.cuda().permute(3, 4, 1, 5, 2, 0)


def _fp4_and_scales(rows, k, gen, full):
    data = torch.randint(0, 256, (rows, k // 2), generator=gen, dtype=torch.uint8)
    if full:
        # every e2m1 value; e4m3 scales 2^-3 .. 2^2 with random mantissas
        sf = torch.randint(4 << 3, 9 << 3, (rows, k // 16), generator=gen, dtype=torch.uint8)
        sf = sf.view(torch.float8_e4m3fn)
    else:
        data &= 0b1011_1011
        sf = torch.randint(1, 3, (rows, k // 16), generator=gen, dtype=torch.int8).to(torch.float8_e4m3fn)
    return data, sf


def make_input(shapes, seed=1111, full=False):
    """(abc, sf, sf_reordered, problem_sizes) like reference.generate_input, plus the exact
    reference outputs (fp16, from float64)."""
    gen = torch.Generator().manual_seed(seed)
    abc, sfs, sfr, sizes, refs = [], [], [], [], []
    for m, n, k in zip(*shapes):
        a8, sfa = _fp4_and_scales(m, k, gen, full)
        b8, sfb = _fp4_and_scales(n, k, gen, full)
        a = a8.cuda().view(1, m, k // 2).permute(1, 2, 0).view(torch.float4_e2m1fn_x2)
        b = b8.cuda().view(1, n, k // 2).permute(1, 2, 0).view(torch.float4_e2m1fn_x2)
        c = torch.randn((1, m, n), generator=gen).half().cuda().permute(1, 2, 0)
        abc.append((a, b, c))
        sfs.append((sfa.view(m, k // 16, 1), sfb.view(n, k // 16, 1)))
        sfr.append((_blocked_scales(sfa, m, k, gen), _blocked_scales(sfb, n, k, gen)))
        sizes.append((m, n, k, 1))
        refs.append(reference(a8, sfa, b8, sfb))
    return (abc, sfs, sfr, sizes), refs


def _dequant64(data8, sf):
    lut = E2M1.double().cuda()
    d = data8.cuda()
    vals = torch.stack((lut[(d & 15).long()], lut[(d >> 4).long()]), dim=-1).flatten(1)
    return vals * sf.cuda().double().repeat_interleave(16, dim=1)


def reference(a8, sfa, b8, sfb):
    return (_dequant64(a8, sfa) @ _dequant64(b8, sfb).T).half()


def max_violation(out, ref):
    """max over elements of |out - ref| / (1e-3 + 1e-3 |ref|) (<= 1 passes); NaN counts as inf."""
    out, ref = out.double(), ref.double()
    err = (out - ref).abs() / (1e-3 + 1e-3 * ref.abs())
    return float(torch.where(torch.isnan(err), torch.inf, err).max())


def run_case(name):
    """Max error/tolerance of one case run through submission.custom_kernel, c poisoned with NaN."""
    import submission

    data, refs = make_input(case_shapes(name), full=name == "full_values")
    for _, _, c in data[0]:
        c.fill_(float("nan"))
    submission.custom_kernel(data)
    torch.cuda.synchronize()
    return max(max_violation(c[:, :, 0], r) for (_, _, c), r in zip(data[0], refs))


def time_benchmark(shapes, repeats=30):
    """eval.py's protocol: 15 inputs, flush L2, events around 15 calls, elapsed / 15; median; and
    the host time of one call (median of 200)."""
    import submission

    inputs = [make_input(shapes, seed=1111 + 42 * i)[0] for i in range(15)]
    for data in inputs:
        submission.custom_kernel(data)
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    times = []
    for _ in range(repeats):
        flush.zero_()
        torch.cuda._sleep(3_000_000)  # like eval.py's long flush: the host gets ahead of the GPU
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for data in inputs:
            submission.custom_kernel(data)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000 / 15)
    host = []
    for _ in range(200):
        t0 = time.perf_counter()
        submission.custom_kernel(inputs[0])
        host.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times), statistics.median(host)


def main():
    parser = argparse.ArgumentParser(prog="sm90_check.py", description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(
        [f"test{i}" for i in range(len(TESTS))] + [f"bench{i + 1}" for i in range(len(BENCHMARKS))]
        + list(EXTRA)))
    parser.add_argument("--no-time", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        sys.exit("sm90_check.py needs a CUDA GPU of compute capability 9.0 (H100/H200)")
    ok = True
    for name in args.cases.split(","):
        t0 = time.time()
        v = run_case(name)
        ok &= v <= 1.0
        print(f"{name:12s} max err/tol {v:8.4f} {'PASS' if v <= 1.0 else 'FAIL'} ({time.time() - t0:.1f} s)", flush=True)
    if not args.no_time:
        print(f"{'bench':8s} {'us/call':>9s} {'host us':>8s}")
        for i, shapes in enumerate(BENCHMARKS):
            dev_us, host_us = time_benchmark(shapes)
            print(f"bench{i + 1:<3d} {dev_us:9.1f} {host_us:8.1f}", flush=True)
    print("ALL PASS" if ok else "FAILURES")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
