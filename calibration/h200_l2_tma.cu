// How fast TMA loads are served from L2, on the H200: the figure the timed emulator's `l2_bytes_per_us`
// stands for. Is the limit the chip's (L2's ports: throughput flat in the number of SMs loading) or each
// SM's (throughput proportional to them)? Does it grow with the bytes each SM keeps in flight? Is a 2-D
// tensor box (128 rows of 128 B, 128-byte swizzle: a k-block of FP4 operand, as the GEMMs load it) served
// as fast as a 1-D bulk copy of the same bytes? And do SMs loading the same lines at once cost L2 once?
//
// Each CTA (one per SM: 1 thread, dynamic shared memory sized to keep the others off its SM) keeps
// `stages` loads of `box` bytes in flight, each completing on its own mbarrier, and re-issues a stage as
// soon as it lands. The source is a 32 MiB buffer read once before timing (L2 holds 60 MiB), so every
// timed load is an L2 hit. Throughput = bytes landed / event-timed kernel span (best of 3 launches); the SM
// clock over the same loop (CTA 0's clock64 against the global timer) turns a per-SM rate into bytes per cycle.
// Then from HBM: does the GEMM's walk (2-D boxes of 128 rows x 128 B, along rows 1024 or 3584 B apart: the
// weights' K of 2048 or 7168 FP4) stream as fast as 1-D copies of consecutive bytes?
//
// Build and run (the H200 machine):  nvcc -O3 -arch=sm_90a -std=c++17 calibration/h200_l2_tma.cu -o /tmp/l2tma -lcuda && /tmp/l2tma
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <algorithm>
#include <vector>
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
// Where a CTA's loads read, advanced once per load with no division (a single thread's 64-bit modulo is a
// chain of hundreds of cycles, which an earlier form of this program measured instead of the TMA unit).
// CTA x's k-th load reads chunk (x + k G) mod nchunks (distinct lines across the CTAs at any moment), or, with
// `same`, chunk k mod nchunks (every CTA the same line at about the same time); with `kblocks` > 1 (2-D only),
// CTA x walks the k-blocks of row block x, then of row block x + G, and so on (a GEMM's walk along K).
struct Cursor {
  uint32_t chunk, kblock, step, nchunks, kblocks;
  __device__ void advance() {
    if (kblocks > 1 && ++kblock < kblocks) return;
    kblock = 0;
    chunk += step;
    if (chunk >= nchunks) chunk -= nchunks;
  }
};

// one load of `box` bytes at the cursor into stage buffer `dst`; 2-D: rows [rows c, rows c + rows) of a matrix
// of 128-byte k-blocks (rows = box / 128), k-block `kblock`
__device__ __forceinline__ void load(bool tensor, const CUtensorMap* map, const char* src, uint32_t box,
                                     const Cursor& at, uint32_t dst, uint32_t b) {
  expect(b, box);
  if (tensor) {
    uint32_t column = at.kblock * 128, row = at.chunk * (box / 128);
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(dst), "l"(map), "r"(column), "r"(row), "r"(b) : "memory");
  } else {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src + (size_t)at.chunk * box), "r"(box), "r"(b) : "memory");
  }
}

// CTA 0 writes its SM clock's cycles and the global timer's nanoseconds over the timed loop into `span`.
// `nchunks` counts row blocks (of box / 128 rows) in 2-D.
__global__ void l2_loads(const __grid_constant__ CUtensorMap map, const char* src, uint32_t nchunks, uint32_t box,
                         int stages, int loads_per_cta, int tensor, int same, uint32_t kblocks, long long* span) {
  extern __shared__ __align__(1024) char stage_buf[];
  __shared__ __align__(8) uint64_t full[16];
  if (threadIdx.x) return;
  for (int s = 0; s < stages; s++) barrier_init(smem(&full[s]));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  Cursor next{same ? 0u : blockIdx.x % nchunks, 0u, same ? 1u : gridDim.x, nchunks, kblocks};
  long long c0 = clock64(), t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  for (int s = 0; s < stages && s < loads_per_cta; s++) {
    load(tensor, &map, src, box, next, smem(stage_buf + s * box), smem(&full[s]));
    next.advance();
  }
  int s = 0;
  uint32_t parity = 0;
  for (int k = 0; k < loads_per_cta; k++) {
    barrier_wait(smem(&full[s]), parity);
    if (k + stages < loads_per_cta) {
      load(tensor, &map, src, box, next, smem(stage_buf + s * box), smem(&full[s]));
      next.advance();
    }
    if (++s == stages) { s = 0; parity ^= 1; }
  }
  long long t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  if (blockIdx.x == 0) { span[0] = clock64() - c0; span[1] = t1 - t0; }
}

// One thread, one load at a time: the SM cycles from issue to the mbarrier's completion for `rounds` loads of
// `box` bytes at pseudo-random chunks of a source of 2^log2_chunks chunks (L2 holding none of it: HBM misses)
__global__ void miss_latency(const char* src, int log2_chunks, uint32_t box, int rounds, long long* cycles) {
  __shared__ __align__(128) char buf[16384];
  __shared__ __align__(8) uint64_t full;
  if (threadIdx.x) return;
  barrier_init(smem(&full));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  uint32_t state = 12345u, parity = 0, mask = (1u << log2_chunks) - 1;
  for (int r = 0; r < rounds; r++) {
    state = state * 1664525u + 1013904223u;
    const char* at = src + (size_t)((state >> 8) & mask) * box;
    long long c0 = clock64();
    expect(smem(&full), box);
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(smem(buf)), "l"(at), "r"(box), "r"(smem(&full)) : "memory");
    barrier_wait(smem(&full), parity);
    cycles[r] = clock64() - c0;
    parity ^= 1;
  }
}

// a (rows x row_bytes) byte matrix read in boxes of box_rows x 128 B, 128-byte swizzle (the GEMMs' operand boxes)
static CUtensorMap tensor_map(char* base, size_t rows, int row_bytes, int box_rows) {
  CUtensorMap map;
  cuuint64_t dims[2] = {(cuuint64_t)row_bytes, rows}, strides[1] = {(cuuint64_t)row_bytes};
  cuuint32_t box[2] = {128, (cuuint32_t)box_rows}, unit[2] = {1, 1};
  CUresult r = cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, base, dims, strides, box, unit,
                                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) { printf("ERR cuTensorMapEncodeTiled %d\n", (int)r); exit(1); }
  return map;
}

int main() {
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t l2_source = 32u << 20, hbm_source = 2048ull << 20, evict = 256u << 20;
  char *src, *other;
  long long* span;
  CK(cudaMalloc(&src, hbm_source));
  CK(cudaMalloc(&other, evict));
  CK(cudaMalloc(&span, 16));
  CK(cudaMemset(src, 1, hbm_source));
  CK(cudaMemset(other, 2, evict));
  CK(cudaFuncSetAttribute(l2_loads, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const CUtensorMap none = tensor_map(src, l2_source / 128, 128, 128);
  // dynamic shared memory of 200 KiB keeps one CTA per SM whatever the stage count
  auto timed = [&](const CUtensorMap& map, uint32_t nchunks, uint32_t box, int ctas, int stages, int loads,
                   int tensor, int same, uint32_t kblocks, bool cold, double* cycles_per_ns) {
    float best = 1e30f;
    long long h[2] = {0, 1};
    for (int rep = 0; rep < 3; rep++) {
      if (cold)  // evict the source with clean lines: read another 256 MiB
        l2_loads<<<sms, 32, 200 * 1024>>>(none, other, evict / 16384, 16384, 4, (int)(evict / 16384 / sms), 0, 0, 1,
                                          span);
      cudaEventRecord(e0);
      l2_loads<<<ctas, 32, 200 * 1024>>>(map, src, nchunks, box, stages, loads, tensor, same, kblocks, span);
      cudaEventRecord(e1);
      CK(cudaEventSynchronize(e1));
      float ms;
      cudaEventElapsedTime(&ms, e0, e1);
      if (ms < best) { best = ms; CK(cudaMemcpy(h, span, 16, cudaMemcpyDeviceToHost)); }
    }
    *cycles_per_ns = (double)h[0] / h[1];
    return (double)ctas * loads * box / (best * 1e-3) / 1e12;  // TB/s
  };
  printf("H200 TMA loads from L2 (%d SMs, a 32 MiB source already in L2)\n", sms);
  printf("| kind | KiB per load | SMs loading | loads in flight per SM | KiB in flight per SM | lines | TB/s | GB/s per SM | SM clock GHz | bytes per SM cycle |\n");
  printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  auto l2_run = [&](int tensor, uint32_t box, int ctas, int stages, int same) {
    const int loads = (int)((64u << 20) / box);  // 64 MiB per CTA: long against the launch and the fill
    CUtensorMap map = tensor_map(src, l2_source / 128, 128, box / 128);
    double ghz;
    l2_loads<<<ctas, 32, 200 * 1024>>>(map, src, l2_source / box, box, stages, loads / 8, tensor, same, 1, span);
    double tbs = timed(map, l2_source / box, box, ctas, stages, loads, tensor, same, 1, false, &ghz);
    double per_sm = tbs * 1e3 / ctas;
    printf("| %s | %u | %d | %d | %u | %s | %.2f | %.1f | %.3f | %.1f |\n",
           tensor ? "2-D tensor, rows of 128 B, swizzle 128B" : "1-D bulk", box / 1024, ctas, stages,
           stages * box / 1024, same ? "the same for every SM" : "distinct", tbs, per_sm, ghz, per_sm / ghz);
  };
  for (int tensor = 0; tensor < 2; tensor++) {
    for (int ctas : {1, 16, 66, sms}) l2_run(tensor, 16384, ctas, 4, 0);
    for (int stages : {1, 2, 8, 12}) l2_run(tensor, 16384, sms, stages, 0);
    for (int stages : {2, 4, 6}) l2_run(tensor, 32768, sms, stages, 0);
    l2_run(tensor, 16384, sms, 8, 1);
  }
  // From HBM: a 2 GiB source, L2 emptied of it (with clean lines) before each launch. The GEMM's walk (2-D boxes
  // of 128 rows x 128 B along rows of `pitch` bytes) against 1-D bulk copies of 16 KiB of consecutive bytes.
  printf("\nH200 TMA loads from HBM (a 2 GiB source, L2 holding none of it; 16 KiB per load, 1 CTA per SM)\n");
  printf("| kind | row pitch B | loads in flight per SM | KiB in flight per SM | TB/s | SM clock GHz |\n");
  printf("| --- | --- | --- | --- | --- | --- |\n");
  const uint32_t box = 16384;
  for (int stages : {4, 8, 12}) {
    const int loads = (int)(hbm_source / box / sms / 2);  // 1 GiB in all
    double ghz, tbs = timed(none, hbm_source / box, box, sms, stages, loads, 0, 0, 1, true, &ghz);
    printf("| 1-D bulk, consecutive 16 KiB | - | %d | %u | %.2f | %.3f |\n", stages, stages * box / 1024, tbs, ghz);
    for (int pitch : {1024, 3584}) {
      CUtensorMap map = tensor_map(src, hbm_source / pitch, pitch, 128);
      tbs = timed(map, hbm_source / pitch / 128, box, sms, stages, loads, 1, 0, pitch / 128, true, &ghz);
      printf("| 2-D 128x128 B boxes along K | %d | %d | %u | %.2f | %.3f |\n", pitch, stages, stages * box / 1024,
             tbs, ghz);
    }
  }
  // HBM throughput against bytes in flight per SM (1-D copies of consecutive bytes): the table the clock's
  // loaded-latency rule is fitted to (emulator/machines/h200.py), measured before with hb.cu's modulo loop
  printf("\nH200 TMA loads from HBM against bytes in flight (1-D copies, 1 CTA per SM, L2 holding none of the source)\n");
  printf("| KiB per load | loads in flight per SM | KiB in flight per SM | TB/s |\n");
  printf("| --- | --- | --- | --- |\n");
  double last_ghz = 0;
  const int in_flight[][2] = {{4, 1}, {4, 2}, {8, 1}, {16, 1}, {4, 4}, {8, 2}, {8, 4}, {16, 2}, {16, 4}, {16, 8}};
  for (auto& row : in_flight) {
    uint32_t kib = row[0], bytes = kib * 1024;
    int stages = row[1], loads = (int)((512ull << 20) / bytes / sms);  // 512 MiB in all
    double tbs = timed(none, (uint32_t)(hbm_source / bytes), bytes, sms, stages, loads, 0, 0, 1, true, &last_ghz);
    printf("| %u | %d | %u | %.2f |\n", kib, stages, kib * stages, tbs);
  }
  // the latency of one HBM miss (the clock's tma_hbm_latency), in SM cycles and in nanoseconds at the clock
  // the loads above ran at
  printf("\nH200 TMA miss latency (1-D, one load at a time, random chunks of a 2 GiB source, L2 holding none of it)\n");
  printf("| bytes | median SM cycles | p10 | p90 | median ns at %.3f GHz |\n", last_ghz);
  printf("| --- | --- | --- | --- | --- |\n");
  for (uint32_t bytes : {4096u, 16384u}) {
    const int rounds = 400;
    long long* cycles;
    CK(cudaMalloc(&cycles, rounds * sizeof(long long)));
    l2_loads<<<sms, 32, 200 * 1024>>>(none, other, evict / 16384, 16384, 4, (int)(evict / 16384 / sms), 0, 0, 1, span);
    int log2_chunks = 0;
    while ((1ull << (log2_chunks + 1)) * bytes <= hbm_source) log2_chunks++;
    miss_latency<<<1, 32>>>(src, log2_chunks, bytes, rounds, cycles);
    CK(cudaDeviceSynchronize());
    std::vector<long long> h(rounds);
    CK(cudaMemcpy(h.data(), cycles, rounds * sizeof(long long), cudaMemcpyDeviceToHost));
    std::vector<long long> v(h.begin() + 8, h.end());
    std::sort(v.begin(), v.end());
    long long median = v[v.size() / 2];
    printf("| %u | %lld | %lld | %lld | %.0f |\n", bytes, median, v[v.size() / 10], v[v.size() * 9 / 10],
           median / last_ghz);
    CK(cudaFree(cycles));
  }
  printf("DONE\n");
  return 0;
}
