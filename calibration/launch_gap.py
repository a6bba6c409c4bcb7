"""The gap between consecutive launches in the board's protocol, on a GPU: what a machine description's
`launch_gap_us` (a launch after the previous one completed) and `launch_gap_pdl_us` (a launch with the PDL
attribute, after every CTA of the previous one triggered) stand for.

    python calibration/launch_gap.py [--ctas N] [--spin-cycles C] [--repeats R] [--out FILE]

A kernel of our own (compiled here with torch's load_inline): each CTA stamps %globaltimer on entry (the
launch's first start: atomicMin) and on exit (its last end: atomicMax), spins `--spin-cycles` on clock64 in
between and, last of all, executes griddepcontrol.launch_dependents. It is called from Python as eval.py calls
custom_kernel: per repeat the board's L2 flush (utils.clear_l2_cache_large), a start event, 15 back-to-back
calls, an end event. Two forms: `plain` (cudaLaunchKernelEx, no attribute) and `pdl` (the programmatic stream
serialization attribute; the kernel's griddepcontrol.wait follows its entry stamp, so a launch may start before
the previous one ends). Per form it prints:

- gap: the median over calls 2-15 and the repeats of (this launch's first CTA start - the previous launch's
  last CTA end), from the globaltimer stamps (ns; the two stamps are one clock GPU-wide);
- per call: the events' elapsed / 15 (eval.py's figure) less the kernel's own span (median of last end - first
  start): the mean launch gap with the first call's gap after the flush counted once.

A spin short enough that the kernel ends before Python issues the next call shows the host's rate instead of
the GPU's gap (the gap then grows with the host's per-call time): the longer spin is the description's regime.

The H200's description took 928 / 480 ns (../shared/MACHINE-FACTS.md Table 2, a microbenchmark's); the board's
protocol, seen through torch.profiler (calibration/sm90_profile.py timeline), showed 1.4 us from a GEMM's end
to the next call's pre-pass. This measures both forms without a profiler attached.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

__global__ void stamp(unsigned long long* slots, int idx, long long spin, int wait) {
  unsigned long long t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  if (threadIdx.x == 0) atomicMin(&slots[2 * idx], t0);
  if (wait) asm volatile("griddepcontrol.wait;" ::: "memory");
  long long c0 = clock64();
  while (clock64() - c0 < spin) {}
  __syncthreads();
  unsigned long long t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  if (threadIdx.x == 0) atomicMax(&slots[2 * idx + 1], t1);
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

void launch(torch::Tensor slots, int64_t idx, int64_t ctas, int64_t spin, bool pdl) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(ctas);
  config.blockDim = dim3(128);
  config.stream = at::cuda::getCurrentCUDAStream();
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = pdl ? 1 : 0;
  cudaLaunchKernelEx(&config, stamp, reinterpret_cast<unsigned long long*>(slots.data_ptr<int64_t>()), (int)idx,
                     (long long)spin, (int)pdl);
}
"""
CPP_SOURCE = "void launch(torch::Tensor slots, int64_t idx, int64_t ctas, int64_t spin, bool pdl);"
CALLS = 15  # eval.py's back-to-back calls per flush


def measure(ext, utils, torch, ctas: int, spin: int, pdl: bool, repeats: int) -> dict:
    slots = torch.empty(2 * CALLS, dtype=torch.int64, device="cuda")
    gaps, spans, per_call = [], [], []
    for repeat in range(repeats + 1):  # the first repeat warms up and is dropped
        slots[0::2] = torch.iinfo(torch.int64).max
        slots[1::2] = 0
        torch.cuda.synchronize()
        utils.clear_l2_cache_large()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for call in range(CALLS):
            ext.launch(slots, call, ctas, spin, pdl)
        end.record()
        torch.cuda.synchronize()
        if repeat == 0:
            continue
        t = slots.tolist()
        starts, ends = t[0::2], t[1::2]
        gaps += [(starts[i] - ends[i - 1]) / 1000 for i in range(1, CALLS)]
        spans += [(ends[i] - starts[i]) / 1000 for i in range(CALLS)]
        per_call.append(start.elapsed_time(end) * 1000 / CALLS)
    span = statistics.median(spans)
    return {"form": "pdl" if pdl else "plain", "ctas": ctas, "spin_cycles": spin, "repeats": repeats,
            "gap_median_us": statistics.median(gaps), "gap_p10_us": sorted(gaps)[len(gaps) // 10],
            "gap_p90_us": sorted(gaps)[9 * len(gaps) // 10], "span_median_us": span,
            "per_call_mean_us": statistics.mean(per_call), "per_call_median_us": statistics.median(per_call),
            "per_call_less_span_us": statistics.mean(per_call) - span}


def main() -> int:
    parser = argparse.ArgumentParser(prog="launch_gap.py", description=__doc__.split("\n")[0])
    parser.add_argument("--ctas", type=int, action="append", help="CTAs per launch (repeatable; default: 1 and the SM count)")
    parser.add_argument("--spin-cycles", type=int, action="append",
                        help="clock64 cycles each CTA spins (repeatable; default 10000 and 40000)")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--out", metavar="FILE", help="also write the rows as JSON")
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("launch_gap.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    from torch.utils.cpp_extension import load_inline  # after the check: importing it may warn on stderr

    import utils

    ext = load_inline("launch_gap", CPP_SOURCE, cuda_sources=CUDA_SOURCE, functions=["launch"],
                      extra_cuda_cflags=["-O3", "-arch=sm_90a" if torch.cuda.get_device_capability()[0] == 9
                                         else "-arch=sm_100a"], verbose=False)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    print(f"{torch.cuda.get_device_name(0)}, {sms} SMs; eval.py's protocol: flush, 15 calls from Python, events")
    for ctas in args.ctas or [1, sms]:
        for spin in args.spin_cycles or [10000, 40000]:
            for pdl in (False, True):
                row = measure(ext, utils, torch, ctas, spin, pdl, args.repeats)
                rows.append(row)
                print(f"{row['form']:5} ctas={ctas:3} spin={spin:6}: gap median {row['gap_median_us']:.3f} us "
                      f"(p10 {row['gap_p10_us']:.3f}, p90 {row['gap_p90_us']:.3f}), kernel span {row['span_median_us']:.3f} us, "
                      f"per call mean {row['per_call_mean_us']:.3f} / median {row['per_call_median_us']:.3f} us, "
                      f"per call less span {row['per_call_less_span_us']:.3f} us", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
