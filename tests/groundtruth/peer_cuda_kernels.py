"""A CUDA C++ kernel of the project's own, in the form the peers' entries take (torch's load_inline, a
`__grid_constant__` struct of tensor maps patched by the host), for the tests of the peer CUDA route
(tests/groundtruth/test_peer_cuda.py): nvcc from PyPI, its PTX in the emulator, maps from the stub driver's
cuTensorMapEncodeTiled, a launch through the stub's cuLaunchKernel.

The kernel: a cluster of two CTAs (`__cluster_dims__`), CTA x of the grid takes tile y of input
`in_maps[x % 2]` (a 2-D map of bytes, box BOX_COLS x BOX_ROWS, 128-byte swizzle) by one TMA load into shared
memory signalled on an mbarrier (expect-tx, a parity wait), adds `1 + x % 2` to every byte, and writes the
tile through `out_map` with a TMA store (bulk group, wait). It reads the struct as the peers' kernels do
(`cvta.param` of a map picked by index, `ld.param` of a field).
"""

BOX_COLS, BOX_ROWS, THREADS = 128, 8, 128

CUDA_SRC = r"""
#include <cudaTypedefs.h>
#include <cstdint>

struct Params {
  CUtensorMap in_maps[2];
  CUtensorMap out_map;
  int rows;
  int tile_bytes;
};

template <int BOX_COLS, int BOX_ROWS>
__global__ __cluster_dims__(2, 1, 1) __launch_bounds__(128)
void tile_add(const __grid_constant__ Params p, int bonus) {
  extern __shared__ __align__(1024) unsigned char tile[];
  __shared__ alignas(8) unsigned long long full;
  const unsigned smem = static_cast<unsigned>(__cvta_generic_to_shared(tile));
  const unsigned bar = static_cast<unsigned>(__cvta_generic_to_shared(&full));
  const int x = blockIdx.x, y = blockIdx.y;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar));
    asm volatile("fence.mbarrier_init.release.cluster;");
  }
  __syncthreads();
  if (threadIdx.x == 0 && y * BOX_ROWS < p.rows) {
    const CUtensorMap *map = p.in_maps + (x % 2);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(p.tile_bytes) : "memory");
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(smem), "l"(map), "r"(0), "r"(y * BOX_ROWS), "r"(bar) : "memory");
  }
  asm volatile(
    "{\n\t.reg .pred done;\n\t"
    "WAIT:\n\t"
    "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n\t"
    "@!done bra WAIT;\n\t}" :: "r"(bar) : "memory");
  for (int i = threadIdx.x; i < BOX_COLS * BOX_ROWS; i += blockDim.x)
    tile[i] = static_cast<unsigned char>(tile[i] + bonus + x % 2);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(&p.out_map), "r"(x * BOX_COLS), "r"(y * BOX_ROWS), "r"(smem) : "memory");
    asm volatile("cp.async.bulk.commit_group;");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}

template __global__ void tile_add<128, 8>(const __grid_constant__ Params, int);
"""

# The struct as the C++ compiler lays it out (groundtruth/peer_cuda.struct_layout's terms)
FIELDS = (("in_maps", "CUtensorMap", 2), ("out_map", "CUtensorMap", 1), ("rows", "int", 1), ("tile_bytes", "int", 1))

PYTHON_SOURCE = f'''"""A load_inline entry whose CUDA source is tests/groundtruth/peer_cuda_kernels.CUDA_SRC (the route's recognizer reads it)."""
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""{CUDA_SRC}"""

load_inline("tile_add", cpp_sources="", cuda_sources=CUDA_SRC, no_implicit_headers=True,
            extra_cuda_cflags=["-O3", "-gencode=arch=compute_100a,code=sm_100a", "-lineinfo"])
'''
