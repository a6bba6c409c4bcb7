"""Ground truth for the emulator: kernels known to run on B200s, each launched through its own host code.

- `nvidia`: NVIDIA's dense_blockscaled_gemm_persistent.py (CUTLASS v4.3.5's example, torch's copy).
- `nvidia_grouped`: NVIDIA's grouped_blockscaled_gemm.py (FlashInfer 0.6.17's wheel; DSL 4.5.2).
- `flashinfer`: FlashInfer's masked grouped NVFP4 GEMM (the flashinfer-python beside this DSL).
- `peers`, `peer_cuda`: other entrants' submissions, by kind of file: CUDA C++ compiled with torch's load_inline
  (nvcc's PTX, a Python twin of the host code; `cuda_toolkit` finds nvcc from PyPI).

These runners use the emulator (emulator/) as a user does, through the stub driver; the emulator's core
imports none of them. tools/emulate.py is their command line.
"""
