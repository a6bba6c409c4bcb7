// How long a TMA store (cp.async.bulk.tensor shared -> global) of the GEMMs' epilogue box takes on a Hopper GPU
// (sm_90a), the figure the timed emulator's `tma_store_latency` stands for: from the store's issue to
// cp.async.bulk.wait_group.read 0 (the box's shared memory may be rewritten) and to cp.async.bulk.wait_group 0
// (its writes are done). The box is the B200 kernel's: 32 rows of 64 bytes (32 weight rows x 32 tokens of
// fp16 C^T; C's contiguous mode is the weights), 2 KB, no swizzle.
//
// Each warp's lane 0 issues a store, commits it and waits; the loop carries the wait, so the time per
// iteration is one store's latency. Cases: 1 warp on 1 SM; 4 warps of one CTA (the epilogue's 4 warps, each
// its own box); every SM with 4 warps at once. Each warp stores to its own place in a 64 MiB matrix, moving
// on by a box every iteration (fresh lines).
//
// Then the direct epilogue's way for comparison: the same 2 KB per warp stored from registers.
//
//   nvcc -O3 -arch=sm_90a -std=c++17 calibration/hopper_tma_store.cu -o /tmp/tma_store -lcuda && /tmp/tma_store
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("ERR %s @%d\n", cudaGetErrorString(e_), __LINE__); exit(1); } } while (0)

constexpr int BOX_ROWS = 32, BOX_BYTES = 64, ITERATIONS = 256;
constexpr size_t ROW_BYTES = 8192, ROWS = 8192;  // 64 MiB of C

template <bool READ_ONLY>
__global__ void stores(const __grid_constant__ CUtensorMap map, unsigned long long* cycles) {
  __shared__ __align__(128) char box[4][BOX_ROWS * BOX_BYTES];
  int warp = threadIdx.x / 32;
  for (int i = threadIdx.x; i < 4 * BOX_ROWS * BOX_BYTES; i += blockDim.x) (&box[0][0])[i] = char(i);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x % 32 != 0) return;
  uint32_t src = (uint32_t)__cvta_generic_to_shared(box[warp]);
  int column = (warp * BOX_BYTES) % ROW_BYTES / 2;  // in fp16 elements
  int row = blockIdx.x * BOX_ROWS * 8 % ROWS;
  unsigned long long start = clock64();
  for (int i = 0; i < ITERATIONS; ++i) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(&map), "r"(column), "r"(row), "r"(src) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    if (READ_ONLY)
      asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    else
      asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    column += 4 * BOX_BYTES / 2;
    if (column * 2 >= (int)ROW_BYTES) { column = (warp * BOX_BYTES) % ROW_BYTES / 2; row = (row + BOX_ROWS) % ROWS; }
  }
  unsigned long long end = clock64();
  cycles[blockIdx.x * 4 + warp] = end - start;
}

// The same bytes stored from registers (st.global.v4, each warp instruction 512 contiguous bytes: four 128-byte
// lines), as the direct epilogue stores them: every lane of each warp, 2 KB per warp per iteration; the loop's
// issue rate under the store queue's back-pressure over 256 iterations is the SM's store throughput.
__global__ void direct_stores(char* c, unsigned long long* cycles) {
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  char* base = c + (size_t(blockIdx.x) * 4 + warp) * ITERATIONS * 2048;
  uint4 v = make_uint4(lane, warp, blockIdx.x, 0);
  __syncthreads();
  unsigned long long start = clock64();
  for (int i = 0; i < ITERATIONS; ++i)
#pragma unroll
    for (int q = 0; q < 4; ++q)
      asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" :: "l"(base + i * 2048 + q * 512 + lane * 16),
                   "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
  __threadfence();
  unsigned long long end = clock64();
  if (lane == 0) cycles[blockIdx.x * 4 + warp] = end - start;
}

int main() {
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  char* c;
  CK(cudaMalloc(&c, ROW_BYTES * ROWS));
  unsigned long long* d_cycles;
  CK(cudaMalloc(&d_cycles, sms * 4 * sizeof(unsigned long long)));
  CUtensorMap map;
  cuuint64_t dims[2] = {ROW_BYTES / 2, ROWS}, strides[1] = {ROW_BYTES};
  cuuint32_t box[2] = {BOX_BYTES / 2, BOX_ROWS}, unit[2] = {1, 1};
  CUresult r = cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, c, dims, strides, box, unit,
                                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                      CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) { printf("ERR cuTensorMapEncodeTiled %d\n", (int)r); return 1; }
  unsigned long long* h = new unsigned long long[sms * 4];
  struct Case { const char* name; int ctas, warps; } cases[] = {{"1 warp, 1 SM", 1, 1}, {"4 warps, 1 SM", 1, 4},
                                                               {"4 warps, every SM", sms, 4}};
  for (int repeat = 0; repeat < 2; ++repeat) {  // the first round warms up
    for (const Case& k : cases) {
      for (int read_only = 1; read_only >= 0; --read_only) {
        if (read_only) stores<true><<<k.ctas, 32 * k.warps>>>(map, d_cycles);
        else stores<false><<<k.ctas, 32 * k.warps>>>(map, d_cycles);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(h, d_cycles, k.ctas * 4 * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
        double sum = 0, worst = 0;
        for (int b = 0; b < k.ctas; ++b)
          for (int w = 0; w < k.warps; ++w) {
            double per = double(h[b * 4 + w]) / ITERATIONS;
            sum += per;
            worst = per > worst ? per : worst;
          }
        if (repeat)
          printf("TMA store 2 KB box (32 x 64 B), %s, to %s: %.0f cycles per store (mean over warps), worst warp %.0f\n",
                 k.name, read_only ? "wait_group.read 0" : "wait_group 0", sum / (k.ctas * k.warps), worst);
      }
    }
  }
  for (int repeat = 0; repeat < 2; ++repeat) {
    for (int ctas : {1, sms}) {
      direct_stores<<<ctas, 128>>>(c, d_cycles);
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(h, d_cycles, ctas * 4 * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
      double worst = 0;
      for (int i = 0; i < ctas * 4; ++i) worst = h[i] > worst ? h[i] : worst;
      if (repeat)
        printf("st.global.v4 of 2 KB per warp per iteration, 4 warps, %s: %.0f cycles per iteration (worst warp), "
               "%.1f bytes per cycle per SM\n", ctas == 1 ? "1 SM" : "every SM", worst / ITERATIONS,
               4 * 2048.0 * ITERATIONS / worst);
    }
  }
  return 0;
}
