/* cdrt_shim.c: a replacement for nvidia-cutlass-dsl's runtime library (4.3.5: lib/libcuda_dialect_runtime.so,
 * 4.5.2: lib/libcute_dsl_runtime.so), selected with CUTE_DSL_LIBS=<path of the built .so>. It exports the
 * union of both versions' `_cuda*` / `_cu*` wrappers (the symbols the DSL's generated host code links against).
 *
 * The wheel's library wraps a statically linked cudart; that cudart needs the driver's private export
 * tables (cuGetExportTable, UUIDs 6bd5fb6c-5bf4-e74a-8987-d93912fd9df9 and f8cff951-2146-8b4e-b9e2-
 * fb469e7c0dd9), which no stub provides, and fails with cudaErrorNotSupported / InsufficientDriver.
 * Here each `_cuda*` wrapper that the DSL's generated host code calls is forwarded to the driver API
 * (the stub libcuda.so.1 from custub.c, or a real driver). The generated host code itself (TMA descriptor
 * encoding, parameter packing, launch configuration) is untouched.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef int CUresult;
extern CUresult cuInit(unsigned);
extern CUresult cuCtxGetDevice(int *);
extern CUresult cuDeviceGetAttribute(int *, int, int);
extern CUresult cuDevicePrimaryCtxRetain(void **, int);
extern CUresult cuCtxSetCurrent(void *);
extern CUresult cuCtxGetCurrent(void **);
extern CUresult cuLibraryLoadData(void **, const void *, void *, void **, unsigned, void *, void **, unsigned);
extern CUresult cuLibraryUnload(void *);
extern CUresult cuLibraryGetKernel(void **, void *, const char *);
extern CUresult cuKernelGetAttribute(int *, int, void *, int);
extern CUresult cuKernelSetAttribute(int, int, void *, int);
extern CUresult cuFuncSetAttribute(void *, int, int);
extern CUresult cuLaunchKernelEx(const void *, void *, void **, void **);
extern CUresult cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
extern CUresult cuMemAlloc_v2(unsigned long long *, size_t);
extern CUresult cuMemFree_v2(unsigned long long);
extern CUresult cuCtxSynchronize(void);
extern CUresult cuStreamSynchronize(void *);
extern CUresult cuGetErrorName(CUresult, const char **);

static int device = 0;
static void ensure_context(void) {
  static int done;
  void *ctx = NULL;
  if (done) return;
  done = 1;
  cuInit(0);
  cuCtxGetCurrent(&ctx);
  if (!ctx && cuDevicePrimaryCtxRetain(&ctx, device) == 0) cuCtxSetCurrent(ctx);
}

/* cudaLaunchConfig_t and CUlaunchConfig differ only in dynamicSmemBytes (size_t vs unsigned int) */
typedef struct { unsigned gx, gy, gz, bx, by, bz; size_t smem; void *stream; void *attrs; unsigned nattrs; } rt_cfg;
typedef struct { unsigned gx, gy, gz, bx, by, bz, smem; void *stream; void *attrs; unsigned nattrs; } drv_cfg;

int _cudaGetDevice(int *d) { ensure_context(); *d = device; return 0; }
int _cudaSetDevice(int d) { device = d; ensure_context(); return 0; }
int _cudaDeviceGetAttribute(int *v, int attr, int d) { ensure_context(); return cuDeviceGetAttribute(v, attr, d); }
int _cudaLibraryLoadData(void **lib, const void *code, void *jo, void **jov, unsigned njo, void *lo, void **lov, unsigned nlo) {
  ensure_context();
  return cuLibraryLoadData(lib, code, NULL, NULL, 0, NULL, NULL, 0);
}
int _cudaLibraryUnload(void *lib) { return cuLibraryUnload(lib); }
int _cudaLibraryGetKernel(void **k, void *lib, const char *name) { return cuLibraryGetKernel(k, lib, name); }
int _cuKernelGetAttribute(int *v, int attr, void *k, int d) { return cuKernelGetAttribute(v, attr, k, d); }
int _cudaFuncSetAttribute(void *f, int attr, int v) { return cuKernelSetAttribute(attr, v, f, device); }
int _cudaKernelSetAttributeForDevice(void *k, int attr, int v, int d) { return cuKernelSetAttribute(attr, v, k, d); }
int _cudaLaunchKernelEx(const rt_cfg *c, void *k, void **args) {
  drv_cfg d = {c->gx, c->gy, c->gz, c->bx, c->by, c->bz, (unsigned)c->smem, c->stream, c->attrs, c->nattrs};
  return cuLaunchKernelEx(&d, k, args, NULL);
}
int _cudaLaunchKernel(void *k, unsigned long long grid_xy, unsigned grid_z, unsigned long long block_xy, unsigned block_z,
                      void **args, size_t smem, void *stream) {
  return cuLaunchKernel(k, (unsigned)grid_xy, (unsigned)(grid_xy >> 32), grid_z, (unsigned)block_xy, (unsigned)(block_xy >> 32),
                        block_z, (unsigned)smem, stream, args, NULL);
}
int _cudaMalloc(void **p, size_t n) { unsigned long long d; int r = cuMemAlloc_v2(&d, n); *p = (void *)d; return r; }
int _cudaFree(void *p) { return cuMemFree_v2((unsigned long long)p); }
int _cudaDeviceSynchronize(void) { return cuCtxSynchronize(); }
int _cudaStreamSynchronize(void *s) { return cuStreamSynchronize(s); }

const char *cuda_dialect_get_error_name(int e) { const char *s = "?"; cuGetErrorName(e, &s); return s; }
void cuda_dialect_print_on_error(int e) { if (e) fprintf(stderr, "cuda_dialect: error %d (%s)\n", e, cuda_dialect_get_error_name(e)); }
void cuda_dialect_assert_success(int e) { if (e) { cuda_dialect_print_on_error(e); abort(); } }

/* The rest of the union of both versions' wrappers: forwarded where the emulator needs them, harmless
   otherwise (events and streams are no-ops: a launch is queued, never run, by the stub driver). */
extern CUresult cuDeviceGet(int *, int);
extern CUresult cuDeviceGetCount(int *);
extern CUresult cuMemcpy(unsigned long long, unsigned long long, size_t);
extern CUresult cuMemsetD8(unsigned long long, unsigned char, size_t);
extern CUresult cuTensorMapEncodeTiled(void *, int, unsigned, void *, const unsigned long long *, const unsigned long long *,
                                       const unsigned *, const unsigned *, int, int, int, int);
int _cuDeviceGet(int *d, int ordinal) { ensure_context(); return cuDeviceGet(d, ordinal); }
int _cudaGetDeviceCount(int *n) { ensure_context(); return cuDeviceGetCount(n); }
int _cuTensorMapEncodeTiled(void *map, int dtype, unsigned rank, void *gaddr, const unsigned long long *dims,
                            const unsigned long long *strides, const unsigned *box, const unsigned *estride, int interleave,
                            int swizzle, int l2, int oob) {
  return cuTensorMapEncodeTiled(map, dtype, rank, gaddr, dims, strides, box, estride, interleave, swizzle, l2, oob);
}
int _cudaMallocAsync(void **p, size_t n, void *stream) { return _cudaMalloc(p, n); }
int _cudaMallocHost(void **p, size_t n) { *p = malloc(n); return *p ? 0 : 2; }
int _cudaMallocManaged(void **p, size_t n, unsigned flags) { return _cudaMalloc(p, n); }
int _cudaFreeAsync(void *p, void *stream) { return _cudaFree(p); }
int _cudaFreeHost(void *p) { free(p); return 0; }
int _cudaMemcpy(void *dst, const void *src, size_t n, int kind) { return cuMemcpy((unsigned long long)dst, (unsigned long long)src, n); }
int _cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *stream) { return _cudaMemcpy(dst, src, n, kind); }
int _cudaMemset(void *dst, int value, size_t n) { return cuMemsetD8((unsigned long long)dst, (unsigned char)value, n); }
int _cudaMemsetAsync(void *dst, int value, size_t n, void *stream) { return _cudaMemset(dst, value, n); }
int _cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, const void *f, int block, size_t smem) { *n = 1; return 0; }
int _cudaStreamCreate(void **s) { static int storage; *s = &storage; return 0; }
int _cudaStreamDestroy(void *s) { return 0; }
int _cudaStreamWaitEvent(void *s, void *e, unsigned flags) { return 0; }
int _cudaStreamAddCallback(void *s, void *cb, void *data, unsigned flags) { return 801; }
int _cudaStreamBeginCapture(void *s, int mode) { return 801; }
int _cudaStreamEndCapture(void *s, void **graph) { return 801; }
int _cudaGraphInstantiate(void **exec, void *graph, unsigned long long flags) { return 801; }
int _cudaGraphLaunch(void *exec, void *stream) { return 801; }
int _cudaGraphDestroy(void *graph) { return 0; }
int _cudaGraphExecDestroy(void *exec) { return 0; }
int _cudaEventCreate(void **e) { static int storage; *e = &storage; return 0; }
int _cudaEventDestroy(void *e) { return 0; }
int _cudaEventRecord(void *e, void *s) { return 0; }
int _cudaEventElapsedTime(float *ms, void *a, void *b) { *ms = 0; return 0; }
int _cudaProfilerStart(void) { return 0; }
int _cudaProfilerStop(void) { return 0; }
void cuda_dialect_init_library_once(void) { ensure_context(); }
void cuda_dialect_unload_library_once(void) {}
