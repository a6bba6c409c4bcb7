// Per-warp issue cost of the instructions a TMA-store epilogue places between its stores, on a Hopper GPU
// (sm_90a): bar.warp.sync, fence.proxy.async.shared::cta, cp.async.bulk.commit_group and
// cp.async.bulk.wait_group.read 0 with nothing outstanding. The emulator's machine descriptions charge each
// of them a cost class (emulator/clock.py, cost_class); this measures what one warp pays for one: a loop of
// them (with an add, which nvcc folds: the bare loop is 0.22 cycles per iteration) less the same loop without.
//
//   nvcc -O3 -arch=sm_90a -std=c++17 calibration/hopper_warp_ops.cu -o /tmp/warp_ops && /tmp/warp_ops
//
// One line per instruction and warp count (1 warp, and 4 warps of one CTA, one per sub-partition):
//   <instruction> warps=<W>: <cycles> cycles per instruction per warp (loop with it <a>, without <b>)

#include <cstdio>
#include <cuda_runtime.h>

#define UNROLL 32
constexpr int ITERATIONS = 4096;

template <int OP>
__device__ __forceinline__ void op() {
  if constexpr (OP == 1) asm volatile("bar.warp.sync -1;" ::: "memory");
  if constexpr (OP == 2) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  if constexpr (OP == 3) asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  if constexpr (OP == 4) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

// OP 0: the loop alone (the baseline).
template <int OP>
__global__ void loop(unsigned long long* cycles, unsigned* sink) {
  unsigned x = threadIdx.x;
  __syncthreads();
  unsigned long long start = clock64();
  for (int i = 0; i < ITERATIONS; ++i) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      asm volatile("add.u32 %0, %0, 1;" : "+r"(x));
      op<OP>();
    }
  }
  unsigned long long end = clock64();
  if (threadIdx.x % 32 == 0) cycles[threadIdx.x / 32] = end - start;
  if (x == 0xFFFFFFFFu) sink[0] = x;  // keeps the chain
}

template <int OP>
double per_warp(int warps, unsigned long long* d_cycles, unsigned* d_sink) {
  unsigned long long h[4] = {};
  loop<OP><<<1, 32 * warps>>>(d_cycles, d_sink);
  cudaDeviceSynchronize();
  cudaMemcpy(h, d_cycles, sizeof(h), cudaMemcpyDeviceToHost);
  unsigned long long worst = 0;
  for (int w = 0; w < warps; ++w) worst = h[w] > worst ? h[w] : worst;
  return double(worst) / (double(ITERATIONS) * UNROLL);
}

int main() {
  unsigned long long* d_cycles;
  unsigned* d_sink;
  cudaMalloc(&d_cycles, 4 * sizeof(unsigned long long));
  cudaMalloc(&d_sink, sizeof(unsigned));
  const char* names[] = {"add chain", "bar.warp.sync", "fence.proxy.async.shared::cta", "cp.async.bulk.commit_group",
                         "cp.async.bulk.wait_group.read 0"};
  for (int warps : {1, 4}) {
    for (int repeat = 0; repeat < 2; ++repeat) {  // the first round warms the clocks and the code up
      double base = per_warp<0>(warps, d_cycles, d_sink);
      double with[4] = {per_warp<1>(warps, d_cycles, d_sink), per_warp<2>(warps, d_cycles, d_sink),
                        per_warp<3>(warps, d_cycles, d_sink), per_warp<4>(warps, d_cycles, d_sink)};
      if (repeat == 0) continue;
      printf("%s warps=%d: %.2f cycles per iteration\n", names[0], warps, base);
      for (int i = 0; i < 4; ++i)
        printf("%s warps=%d: %.2f cycles per instruction per warp (loop with it %.2f, without %.2f)\n", names[i + 1],
               warps, with[i] - base, with[i], base);
    }
  }
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    printf("CUDA error: %s\n", cudaGetErrorString(err));
    return 1;
  }
  return 0;
}
