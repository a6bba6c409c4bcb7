// The rate at which one SM's TMA stores (cp.async.bulk.tensor shared -> global) drain, by box shape and by how
// many stores a warp keeps in flight, on a Hopper GPU (sm_90a): the figure the timed emulator's
// `tma_store_bytes_per_cycle` stands for. calibration/hopper_tma_store.cu timed one store per warp at a time (each store
// waited for before the next); an epilogue issues a tile's boxes back to back, so this program lets each warp keep
// IN_FLIGHT stores outstanding (`wait_group.read IN_FLIGHT - 1` before each issue, as a ring of staging buffers
// would) and reads bytes per cycle per SM, from the first issue to `wait_group 0` (every write done).
//
// Boxes: the B200 kernel's epilogue box (32 rows of 64 bytes: 32 weight rows x 32 tokens of C^T) and wider or
// taller ones of the same and larger sizes, so that a per-row, per-box and per-byte cost can be told apart.
// Every store reads the same shared memory (nothing rewrites it) and writes fresh lines of a 64 MiB matrix (the
// every-SM cases write more than 64 MiB and wrap around it, so L2 absorbs part of their writes).
// Cases: 1 warp and 4 warps of 1 CTA (the SM's store unit alone; L2 absorbs the writes), and 4 warps on every SM
// (L2 and HBM shared).
//
// The loop's address arithmetic (a runtime division per store) costs about 110 cycles an iteration: one warp's
// small-box rows are the loop's, not the unit's.
//
//   nvcc -O3 -arch=sm_90a -std=c++17 calibration/hopper_tma_store_rate.cu -o /tmp/tma_store_rate -lcuda && /tmp/tma_store_rate
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("ERR %s @%d\n", cudaGetErrorString(e_), __LINE__); exit(1); } } while (0)

constexpr int ITERATIONS = 128, MAX_BOX_BYTES = 32768;
constexpr size_t ROW_BYTES = 8192, ROWS = 8192;  // 64 MiB of fp16

template <int IN_FLIGHT>
__global__ void stores(const __grid_constant__ CUtensorMap map, int box_columns, int box_rows, unsigned long long* cycles) {
  __shared__ __align__(128) char box[MAX_BOX_BYTES];
  for (int i = threadIdx.x; i < MAX_BOX_BYTES; i += blockDim.x) box[i] = char(i);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x % 32 != 0) return;
  int warps = blockDim.x / 32, warp = threadIdx.x / 32;
  int total_warps = gridDim.x * warps, global_warp = blockIdx.x * warps + warp;
  int per_row = int(ROW_BYTES / 2) / box_columns, positions = per_row * int(ROWS) / box_rows;
  uint32_t src = (uint32_t)__cvta_generic_to_shared(box);
  unsigned long long start = clock64();
  for (int i = 0; i < ITERATIONS; ++i) {
    int p = (global_warp + i * total_warps) % positions;  // fresh lines for every store
    int column = p % per_row * box_columns, row = p / per_row * box_rows;
    if (IN_FLIGHT > 0) asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(IN_FLIGHT > 0 ? IN_FLIGHT - 1 : 0) : "memory");
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(&map), "r"(column), "r"(row), "r"(src) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  unsigned long long end = clock64();
  cycles[blockIdx.x * 4 + warp] = end - start;
}

int main() {
  int sms, clock_khz;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s, %d SMs, clock attribute %.0f MHz\n", prop.name, sms, clock_khz / 1e3);
  char* c;
  CK(cudaMalloc(&c, ROW_BYTES * ROWS));
  unsigned long long* d_cycles;
  CK(cudaMalloc(&d_cycles, sms * 4 * sizeof(unsigned long long)));
  unsigned long long* h = new unsigned long long[sms * 4];
  // (rows, bytes per row): the kernel's box first, then the same 2 KB cut otherwise, then larger boxes
  struct Shape { int rows, row_bytes; } shapes[] = {{32, 64}, {16, 128}, {8, 256}, {32, 128}, {32, 256}, {128, 64},
                                                    {64, 128}, {128, 256}, {256, 128}};
  struct Case { const char* name; int ctas, warps; } cases[] = {{"1 warp, 1 SM", 1, 1}, {"4 warps, 1 SM", 1, 4},
                                                               {"4 warps, every SM", sms, 4}};
  printf("%-10s %-18s %-9s %14s %16s\n", "box", "case", "in flight", "cycles/store", "bytes/cycle/SM");
  for (const Shape& s : shapes) {
    CUtensorMap map;
    cuuint64_t dims[2] = {ROW_BYTES / 2, ROWS}, strides[1] = {ROW_BYTES};
    cuuint32_t box[2] = {cuuint32_t(s.row_bytes / 2), cuuint32_t(s.rows)}, unit[2] = {1, 1};
    CUresult r = cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, c, dims, strides, box, unit,
                                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                        CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) { printf("ERR cuTensorMapEncodeTiled %d (box %dx%d)\n", (int)r, s.rows, s.row_bytes); return 1; }
    for (const Case& k : cases) {
      for (int in_flight : {1, 4, 0}) {
        for (int repeat = 0; repeat < 2; ++repeat) {  // the first warms up
          if (in_flight == 1) stores<1><<<k.ctas, 32 * k.warps>>>(map, s.row_bytes / 2, s.rows, d_cycles);
          else if (in_flight == 4) stores<4><<<k.ctas, 32 * k.warps>>>(map, s.row_bytes / 2, s.rows, d_cycles);
          else stores<0><<<k.ctas, 32 * k.warps>>>(map, s.row_bytes / 2, s.rows, d_cycles);
          CK(cudaDeviceSynchronize());
          CK(cudaMemcpy(h, d_cycles, k.ctas * 4 * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
          if (!repeat) continue;
          double rate_sum = 0, per_store_sum = 0;  // per SM: its bytes over its slowest warp's cycles
          for (int b = 0; b < k.ctas; ++b) {
            double worst = 0;
            for (int w = 0; w < k.warps; ++w) worst = h[b * 4 + w] > worst ? h[b * 4 + w] : worst;
            rate_sum += double(k.warps) * ITERATIONS * s.rows * s.row_bytes / worst;
            per_store_sum += worst / ITERATIONS;
          }
          char shape[32], flight[16];
          snprintf(shape, sizeof shape, "%dx%dB", s.rows, s.row_bytes);
          snprintf(flight, sizeof flight, in_flight ? "%d" : "all", in_flight);
          printf("%-10s %-18s %-9s %14.0f %16.1f\n", shape, k.name, flight, per_store_sum / k.ctas, rate_sum / k.ctas);
        }
      }
    }
  }
  return 0;
}
