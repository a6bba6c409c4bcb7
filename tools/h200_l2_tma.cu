// How fast TMA loads are served from L2, on the H200: the figure the timed emulator's `l2_bytes_per_us`
// stands for. Is the limit the chip's (L2's ports: throughput flat in the number of SMs loading) or each
// SM's (throughput proportional to them)? Does it grow with the bytes each SM keeps in flight? Is a 2-D
// tensor box (128 rows of 128 B, 128-byte swizzle: a k-block of FP4 operand, as the GEMMs load it) served
// as fast as a 1-D bulk copy of the same bytes? And do SMs loading the same lines at once cost L2 once?
//
// Each CTA (one per SM: 1 thread, dynamic shared memory sized to keep the others off its SM) keeps
// `stages` loads of `box` bytes in flight, each completing on its own mbarrier, and re-issues a stage as
// soon as it lands. The source is a 32 MiB buffer read once before timing (L2 holds 60 MiB), so every
// timed load is an L2 hit. Throughput = bytes landed / event-timed kernel span (best of 3 launches).
//
// Build and run (the H200 machine):  nvcc -O3 -arch=sm_90a -std=c++17 tools/h200_l2_tma.cu -o /tmp/l2tma -lcuda && /tmp/l2tma
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("ERR %s @%d\n", cudaGetErrorString(e_), __LINE__); exit(1); } } while (0)

__device__ __forceinline__ uint32_t smem(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void barrier_init(uint32_t b) { asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b) : "memory"); }
__device__ __forceinline__ void barrier_wait(uint32_t b, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done) : "r"(b), "r"(parity) : "memory");
}
__device__ __forceinline__ void expect(uint32_t b, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(bytes) : "memory");
}
// one load of `box` bytes, chunk `chunk` of the source, into stage buffer `dst`
__device__ __forceinline__ void load(bool tensor, const CUtensorMap* map, const char* src, int box, size_t chunk,
                                     uint32_t dst, uint32_t b) {
  expect(b, box);
  if (tensor) {  // chunk c: rows [128 c, 128 c + 128) of a (rows x 128 B) matrix
    int row = (int)(chunk * 128);
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(dst), "l"(map), "r"(0), "r"(row), "r"(b) : "memory");
  } else {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src + chunk * box), "r"(box), "r"(b) : "memory");
  }
}

// CTA x's k-th load reads chunk (x + k G) mod nchunks (distinct lines across the CTAs at any moment), or,
// with `same`, chunk k mod nchunks (every CTA the same line at about the same time).
__global__ void l2_loads(const __grid_constant__ CUtensorMap map, const char* src, size_t nchunks, int box,
                         int stages, int loads_per_cta, int tensor, int same) {
  extern __shared__ __align__(1024) char stage_buf[];
  __shared__ __align__(8) uint64_t full[16];
  if (threadIdx.x) return;
  for (int s = 0; s < stages; s++) barrier_init(smem(&full[s]));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  size_t G = gridDim.x;
  auto chunk_of = [&](size_t k) { return same ? k % nchunks : (blockIdx.x + k * G) % nchunks; };
  for (int s = 0; s < stages && s < loads_per_cta; s++)
    load(tensor, &map, src, box, chunk_of(s), smem(stage_buf + s * box), smem(&full[s]));
  for (int k = 0; k < loads_per_cta; k++) {
    int s = k % stages;
    barrier_wait(smem(&full[s]), (k / stages) & 1);
    if (k + stages < loads_per_cta)
      load(tensor, &map, src, box, chunk_of(k + stages), smem(stage_buf + s * box), smem(&full[s]));
  }
}

int main() {
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t source_bytes = 32u << 20;
  char* src;
  CK(cudaMalloc(&src, source_bytes));
  CK(cudaMemset(src, 1, source_bytes));
  CUtensorMap map;
  {
    cuuint64_t dims[2] = {128, source_bytes / 128}, strides[1] = {128};
    cuuint32_t box[2] = {128, 128}, unit[2] = {1, 1};
    CUresult r = cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, src, dims, strides, box, unit,
                                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) { printf("ERR cuTensorMapEncodeTiled %d\n", (int)r); return 1; }
  }
  CK(cudaFuncSetAttribute(l2_loads, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  printf("H200 TMA loads from L2 (%d SMs, a 32 MiB source already in L2)\n", sms);
  printf("| kind | SMs loading | loads in flight per SM | KiB in flight per SM | lines | TB/s | GB/s per SM |\n");
  printf("| --- | --- | --- | --- | --- | --- | --- |\n");
  auto run = [&](int tensor, int ctas, int stages, int same) {
    const int box = 16384;
    int loads = 4096;  // 64 MiB per CTA: long against the launch and the fill
    size_t nchunks = source_bytes / box;
    // dynamic shared memory of 200 KiB keeps one CTA per SM whatever the stage count
    l2_loads<<<ctas, 32, 200 * 1024>>>(map, src, nchunks, box, stages, loads / 8, tensor, same);  // warm L2
    CK(cudaDeviceSynchronize());
    float best = 1e30f;
    for (int rep = 0; rep < 3; rep++) {
      cudaEventRecord(e0);
      l2_loads<<<ctas, 32, 200 * 1024>>>(map, src, nchunks, box, stages, loads, tensor, same);
      cudaEventRecord(e1);
      CK(cudaEventSynchronize(e1));
      float ms;
      cudaEventElapsedTime(&ms, e0, e1);
      if (ms < best) best = ms;
    }
    double bytes = (double)ctas * loads * box;
    double tbs = bytes / (best * 1e-3) / 1e12;
    printf("| %s | %d | %d | %d | %s | %.2f | %.1f |\n", tensor ? "2-D tensor 128x128 B, swizzle 128B" : "1-D bulk 16 KiB",
           ctas, stages, stages * box / 1024, same ? "the same for every SM" : "distinct", tbs, tbs * 1e3 / ctas);
  };
  for (int tensor = 0; tensor < 2; tensor++) {
    for (int ctas : {1, 8, 16, 33, 66, 99, sms}) run(tensor, ctas, 4, 0);
    for (int stages : {1, 2, 8, 12}) run(tensor, sms, stages, 0);
    run(tensor, sms, 4, 1);
    run(tensor, sms, 8, 1);
  }
  printf("DONE\n");
  return 0;
}
