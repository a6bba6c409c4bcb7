/* custub.c: the emulator's stub CUDA driver (libcuda.so.1) for a machine without a GPU.
 *
 * Enough of the driver API for nvidia-cutlass-dsl 4.3.5 and 4.5.2 to compile, "load" and "launch" an
 * sm_100a kernel: cuda-python's cuInit check, the entry points the DSL runtime shim (cdrt_shim.c) and
 * cudart reach through cuGetProcAddress_v2, and the queries of cutlass.utils.HardwareInfo. Device facts are
 * a B200's until emulator/driver.py names another GPU (custub_set_device: name, compute capability, SMs,
 * clocks, memory, L2, shared memory; the SM count alone with custub_set_sm_count). Device memory is host
 * memory. A launch is not executed: it is queued, with its configuration, attributes and a copy of its
 * parameter bytes (laid out from the cubin's .nv.info EIATTR_KPARAM_INFO), for emulator/driver.py to take
 * (custub_launch_count / custub_launch_get / custub_launch_param / custub_launch_clear), with what the launch
 * checks of emulator/limits.py need (custub_launch_kernel: the kernel's attributes as set, its cubin ELF).
 * cuTensorMapEncodeTiled writes the hardware's 128-byte map (emulator/tma.py's layout), as a real driver does.
 * CUSTUB_LOG=1 logs every call on stderr.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long u64;
enum { OK = 0, ERR_INVALID_VALUE = 1, ERR_NOT_INITIALIZED = 3, ERR_NOT_FOUND = 500, ERR_NOT_SUPPORTED = 801 };

static int log_on(void) { static int v = -1; if (v < 0) v = getenv("CUSTUB_LOG") != NULL; return v; }
#define LOG(...) do { if (log_on()) { fprintf(stderr, "[custub] " __VA_ARGS__); fputc('\n', stderr); } } while (0)

/* ---------------- init, version, device ---------------- */
CUresult cuInit(unsigned flags) { LOG("cuInit(%u)", flags); return OK; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; LOG("cuDriverGetVersion -> %d", *v); return OK; }
CUresult cuDeviceGetCount(int *n) { *n = 1; LOG("cuDeviceGetCount -> 1"); return OK; }
CUresult cuDeviceGet(CUdevice *d, int ordinal) { *d = ordinal; LOG("cuDeviceGet(%d)", ordinal); return ordinal == 0 ? OK : 101; }
/* The GPU this stub impersonates: a B200 unless custub_set_device names another (driver.py's DEVICES). */
static struct {
  char name[64];
  int major, minor, sm_count, clock_khz, memory_clock_khz, bus_width_bits, l2_bytes, smem_per_sm, smem_per_block_optin;
  size_t total_memory;
} device = {"NVIDIA B200", 10, 0, 148, 1965000, 3996000, 8192, 126 << 20, 233472, 232448, (size_t)180 << 30};
void custub_set_device(const char *name, int major, int minor, int sm_count, int clock_khz, int memory_clock_khz,
                       int bus_width_bits, int l2_bytes, int smem_per_sm, int smem_per_block_optin,
                       unsigned long long total_memory) {
  snprintf(device.name, sizeof device.name, "%s", name);
  device.major = major; device.minor = minor; device.sm_count = sm_count; device.clock_khz = clock_khz;
  device.memory_clock_khz = memory_clock_khz; device.bus_width_bits = bus_width_bits; device.l2_bytes = l2_bytes;
  device.smem_per_sm = smem_per_sm; device.smem_per_block_optin = smem_per_block_optin;
  device.total_memory = total_memory;
}
CUresult cuDeviceGetName(char *name, int len, CUdevice d) { snprintf(name, len, "%s (custub)", device.name); return OK; }
CUresult cuDeviceTotalMem(size_t *b, CUdevice d) { *b = device.total_memory; return OK; }
CUresult cuDeviceGetUuid(unsigned char *u, CUdevice d) { memset(u, 0x5a, 16); return OK; }
CUresult cuDeviceGetLuid(char *l, unsigned *mask, CUdevice d) { return ERR_NOT_SUPPORTED; }
CUresult cuDeviceGetPCIBusId(char *s, int len, CUdevice d) { snprintf(s, len, "0000:00:00.0"); return OK; }
CUresult cuDeviceComputeCapability(int *maj, int *min, CUdevice d) { *maj = device.major; *min = device.minor; return OK; }

void custub_set_sm_count(int n) { device.sm_count = n; }
static int device_attribute(int a) {
  switch (a) {
    case 1: return 1024;               /* max threads per block */
    case 2: case 3: return 1024;        /* max block dim x, y */
    case 4: return 64;                  /* max block dim z */
    case 5: return 0x7fffffff;          /* max grid x */
    case 6: case 7: return 65535;
    case 8: return 49152;               /* max shared per block */
    case 9: return 65536;               /* total constant memory */
    case 10: return 32;                 /* warp size */
    case 12: return 65536;              /* max registers per block */
    case 13: return device.clock_khz;   /* clock rate kHz */
    case 14: return 512;                /* texture alignment */
    case 16: return device.sm_count;    /* multiprocessor count */
    case 19: return 1;                  /* integrated = 0? (19 is concurrent kernels on some headers) */
    case 36: return device.memory_clock_khz; /* memory clock kHz */
    case 37: return device.bus_width_bits; /* bus width */
    case 38: return device.l2_bytes;    /* L2 size */
    case 39: return 2048;               /* max threads per SM */
    case 41: return 1;                  /* unified addressing */
    case 75: return device.major;       /* compute capability major */
    case 76: return device.minor;       /* minor */
    case 81: return device.smem_per_sm; /* max shared per SM */
    case 82: return 65536;              /* max registers per SM */
    case 97: return device.smem_per_block_optin; /* max shared per block opt-in */
    case 106: return 32;                /* max blocks per SM */
    case 120: return 1;                 /* cluster launch */
    default: return 0;
  }
}
CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice d) { *pi = device_attribute(attrib); LOG("cuDeviceGetAttribute(%d) -> %d", attrib, *pi); return OK; }

/* ---------------- contexts ---------------- */
static int the_ctx_storage;
static void *current_ctx = NULL;
CUresult cuDevicePrimaryCtxRetain(void **c, CUdevice d) { *c = &the_ctx_storage; LOG("cuDevicePrimaryCtxRetain"); return OK; }
CUresult cuDevicePrimaryCtxRelease(CUdevice d) { return OK; }
CUresult cuDevicePrimaryCtxReset(CUdevice d) { return OK; }
CUresult cuDevicePrimaryCtxSetFlags(CUdevice d, unsigned f) { return OK; }
CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned *f, int *active) { *f = 0; *active = current_ctx != NULL; return OK; }
CUresult cuCtxCreate(void **c, void *params, unsigned flags, CUdevice d) { *c = current_ctx = &the_ctx_storage; LOG("cuCtxCreate"); return OK; }
CUresult cuCtxDestroy(void *c) { return OK; }
CUresult cuCtxGetCurrent(void **c) { *c = current_ctx; LOG("cuCtxGetCurrent -> %p", current_ctx); return OK; }
CUresult cuCtxSetCurrent(void *c) { current_ctx = c; LOG("cuCtxSetCurrent(%p)", c); return OK; }
CUresult cuCtxPushCurrent(void *c) { current_ctx = c; return OK; }
CUresult cuCtxPopCurrent(void **c) { if (c) *c = current_ctx; return OK; }
CUresult cuCtxGetDevice(CUdevice *d) { *d = 0; return OK; }
CUresult cuCtxGetDevice_v2(CUdevice *d, void *ctx) { *d = 0; return OK; }
CUresult cuCtxGetApiVersion(void *c, unsigned *v) { *v = 13000; return OK; }
CUresult cuCtxGetFlags(unsigned *f) { *f = 0; return OK; }
CUresult cuCtxGetId(void *c, u64 *id) { *id = 1; return OK; }
CUresult cuCtxSynchronize(void) { return OK; }
CUresult cuCtxGetLimit(size_t *v, int limit) { *v = 0; return OK; }
CUresult cuCtxSetLimit(int limit, size_t v) { return OK; }
CUresult cuCtxGetCacheConfig(int *c) { *c = 0; return OK; }
CUresult cuCtxGetStreamPriorityRange(int *lo, int *hi) { if (lo) *lo = 0; if (hi) *hi = -5; return OK; }
CUresult cuCtxGetExecAffinity(void *a, int type) { return ERR_NOT_SUPPORTED; }

/* ---------------- errors ---------------- */
CUresult cuGetErrorName(CUresult e, const char **s) { static char b[32]; snprintf(b, sizeof b, "CUSTUB_ERROR_%d", e); *s = b; return OK; }
CUresult cuGetErrorString(CUresult e, const char **s) { return cuGetErrorName(e, s); }

/* ---------------- memory: host memory stands in for device memory ---------------- */
#define MAX_ALLOCS 4096
static u64 alloc_addr[MAX_ALLOCS], alloc_size[MAX_ALLOCS];
static int nallocs;
CUresult cuMemAlloc(u64 *p, size_t n) {
  void *m = NULL;
  if (nallocs >= MAX_ALLOCS || posix_memalign(&m, 256, n ? n : 1)) return 2;
  memset(m, 0, n ? n : 1);
  alloc_addr[nallocs] = (u64)m; alloc_size[nallocs++] = n;
  *p = (u64)m; LOG("cuMemAlloc(%zu) -> %p", n, m); return OK;
}
int custub_allocation_count(void) { return nallocs; }
void custub_allocation_get(int i, u64 *addr, u64 *size) { *addr = alloc_addr[i]; *size = alloc_size[i]; }
CUresult cuMemAllocAsync(u64 *p, size_t n, void *s) { return cuMemAlloc(p, n); }
CUresult cuMemFree(u64 p) {
  for (int i = 0; i < nallocs; i++)
    if (alloc_addr[i] == p) { alloc_addr[i] = alloc_addr[--nallocs]; alloc_size[i] = alloc_size[nallocs]; break; }
  free((void *)p); return OK;
}
CUresult cuMemFreeAsync(u64 p, void *s) { return cuMemFree(p); }
CUresult cuMemAllocHost(void **p, size_t n) { *p = malloc(n); return OK; }
CUresult cuMemHostAlloc(void **p, size_t n, unsigned f) { *p = malloc(n); return OK; }
CUresult cuMemFreeHost(void *p) { free(p); return OK; }
CUresult cuMemcpy(u64 d, u64 s, size_t n) { memcpy((void *)d, (void *)s, n); return OK; }
CUresult cuMemcpyAsync(u64 d, u64 s, size_t n, void *st) { return cuMemcpy(d, s, n); }
CUresult cuMemcpyHtoD(u64 d, const void *s, size_t n) { memcpy((void *)d, s, n); return OK; }
CUresult cuMemcpyDtoH(void *d, u64 s, size_t n) { memcpy(d, (void *)s, n); return OK; }
CUresult cuMemcpyDtoD(u64 d, u64 s, size_t n) { return cuMemcpy(d, s, n); }
CUresult cuMemcpyHtoDAsync(u64 d, const void *s, size_t n, void *st) { return cuMemcpyHtoD(d, s, n); }
CUresult cuMemcpyDtoHAsync(void *d, u64 s, size_t n, void *st) { return cuMemcpyDtoH(d, s, n); }
CUresult cuMemcpyDtoDAsync(u64 d, u64 s, size_t n, void *st) { return cuMemcpy(d, s, n); }
CUresult cuMemsetD8(u64 d, unsigned char v, size_t n) { memset((void *)d, v, n); return OK; }
CUresult cuMemsetD8Async(u64 d, unsigned char v, size_t n, void *st) { return cuMemsetD8(d, v, n); }
CUresult cuMemsetD32(u64 d, unsigned v, size_t n) { for (size_t i = 0; i < n; i++) ((unsigned *)d)[i] = v; return OK; }
CUresult cuMemsetD32Async(u64 d, unsigned v, size_t n, void *st) { return cuMemsetD32(d, v, n); }
CUresult cuMemGetInfo(size_t *f, size_t *t) { *f = *t = (size_t)180 << 30; return OK; }
CUresult cuPointerGetAttribute(void *data, int attr, u64 p) { LOG("cuPointerGetAttribute(%d)", attr); return ERR_INVALID_VALUE; }

/* ---------------- streams and events ---------------- */
static int stream_storage[64];
static int nstreams;
CUresult cuStreamCreate(void **s, unsigned f) { *s = &stream_storage[(nstreams++) % 64]; return OK; }
CUresult cuStreamCreateWithPriority(void **s, unsigned f, int p) { return cuStreamCreate(s, f); }
CUresult cuStreamDestroy(void *s) { return OK; }
CUresult cuStreamSynchronize(void *s) { return OK; }
CUresult cuStreamQuery(void *s) { return OK; }
CUresult cuStreamWaitEvent(void *s, void *e, unsigned f) { return OK; }
CUresult cuStreamGetCtx(void *s, void **c) { *c = &the_ctx_storage; return OK; }
CUresult cuStreamGetFlags(void *s, unsigned *f) { *f = 0; return OK; }
CUresult cuStreamGetPriority(void *s, int *p) { *p = 0; return OK; }
CUresult cuStreamGetId(void *s, u64 *id) { *id = (u64)s; return OK; }
CUresult cuStreamIsCapturing(void *s, int *st) { *st = 0; return OK; }
CUresult cuEventCreate(void **e, unsigned f) { *e = malloc(8); return OK; }
CUresult cuEventDestroy(void *e) { free(e); return OK; }
CUresult cuEventRecord(void *e, void *s) { return OK; }
CUresult cuEventSynchronize(void *e) { return OK; }
CUresult cuEventQuery(void *e) { return OK; }
CUresult cuEventElapsedTime(float *ms, void *a, void *b) { *ms = 0; return OK; }

/* ---------------- images: fatbinary -> cubin ELF -> per-kernel parameter layout ---------------- */
#define MAX_PARAMS 512
struct stub_kernel {
  char *name;  /* the mangled entry name: CuTe DSL's run to thousands of characters */
  const unsigned char *elf;
  int nparams, param_bytes;
  int off[MAX_PARAMS], size[MAX_PARAMS];
  int attr_max_dyn_smem, attr_cluster_nonportable;
};
struct stub_library { unsigned char *image; size_t size; const unsigned char *elf; int id; };
static int nimages;

static const unsigned char *find_elf(const unsigned char *img, size_t n) {
  if (n >= 4 && !memcmp(img, "\x7f" "ELF", 4)) return img;
  for (size_t i = 0; i + 4 <= n; i += 8)   /* fatbin payloads are 8-aligned; uncompressed ELF assumed */
    if (!memcmp(img + i, "\x7f" "ELF", 4)) return img + i;
  return NULL;
}
static size_t image_size(const unsigned char *img) {
  if (*(const uint32_t *)img == 0xBA55ED50u) return 16 + *(const u64 *)(img + 8); /* fatbin header */
  if (!memcmp(img, "\x7f" "ELF", 4)) {                  /* ELF: the end of its section or program headers */
    u64 shoff = *(const u64 *)(img + 0x28), phoff = *(const u64 *)(img + 0x20);
    uint16_t phentsize = *(const uint16_t *)(img + 0x36), phnum = *(const uint16_t *)(img + 0x38);
    uint16_t shentsize = *(const uint16_t *)(img + 0x3a), shnum = *(const uint16_t *)(img + 0x3c);
    u64 sections = shoff + (u64)shentsize * shnum, programs = phoff + (u64)phentsize * phnum;
    return sections > programs ? sections : programs;
  }
  return strlen((const char *)img) + 1;                                            /* PTX text */
}

/* .nv.info.<kernel>: EIATTR_KPARAM_INFO (0x17) gives each parameter's ordinal, offset and size;
   EIATTR_CBANK_PARAM_SIZE (0x19) the total. */
static void parse_params(struct stub_kernel *k) {
  const unsigned char *e = k->elf;
  if (!e) return;
  u64 shoff = *(const u64 *)(e + 0x28);
  uint16_t shentsize = *(const uint16_t *)(e + 0x3a), shnum = *(const uint16_t *)(e + 0x3c), shstrndx = *(const uint16_t *)(e + 0x3e);
  const unsigned char *sh = e + shoff;
  const char *shstr = (const char *)e + *(const u64 *)(sh + shstrndx * shentsize + 0x18);
  size_t want_size = strlen(k->name) + 16;
  char *want = malloc(want_size);
  snprintf(want, want_size, ".nv.info.%s", k->name);
  for (int i = 0; i < shnum; i++) {
    const unsigned char *s = sh + i * shentsize;
    if (strcmp(shstr + *(const uint32_t *)s, want)) continue;
    const unsigned char *p = e + *(const u64 *)(s + 0x18), *end = p + *(const u64 *)(s + 0x20);
    while (p + 4 <= end) {
      int fmt = p[0], attr = p[1];
      int len = fmt == 4 ? *(const uint16_t *)(p + 2) : 0;
      if (fmt == 3 && attr == 0x19) k->param_bytes = *(const uint16_t *)(p + 2);
      /* EIATTR_KPARAM_INFO (0x17): size in bits 18-31 of the flags word; the form ptxas writes for
         parameter spaces beyond 4 KiB (0x45, seen with 5.6 KB): the size in bytes */
      if (fmt == 4 && (attr == 0x17 || attr == 0x45) && len >= 12) {
        int ordinal = *(const uint16_t *)(p + 8), offset = *(const uint16_t *)(p + 10);
        uint32_t word = *(const uint32_t *)(p + 12);
        if (ordinal < MAX_PARAMS) {
          k->off[ordinal] = offset; k->size[ordinal] = attr == 0x17 ? (word >> 18) & 0x3fff : (int)word;
          if (ordinal + 1 > k->nparams) k->nparams = ordinal + 1;
        }
      }
      p += 4 + len;
    }
  }
  free(want);
  LOG("kernel %.60s...: %d parameters, %d bytes", k->name, k->nparams, k->param_bytes);
}

static struct stub_library *load_image(const void *code) {
  struct stub_library *l = calloc(1, sizeof *l);
  l->size = image_size(code);
  l->image = malloc(l->size);
  memcpy(l->image, code, l->size);
  l->elf = find_elf(l->image, l->size);
  l->id = nimages++;
  LOG("image %d: %zu bytes, magic %08x, ELF at %+ld", l->id, l->size, *(uint32_t *)l->image, l->elf ? (long)(l->elf - l->image) : -1L);
  return l;
}
static struct stub_kernel *get_kernel(struct stub_library *l, const char *name) {
  struct stub_kernel *k = calloc(1, sizeof *k);
  k->name = strdup(name);
  k->elf = l->elf;
  k->attr_max_dyn_smem = k->attr_cluster_nonportable = -1;
  parse_params(k);
  return k;
}

CUresult cuLibraryLoadData(void **lib, const void *code, void *jo, void **jov, unsigned njo, void *lo, void **lov, unsigned nlo) {
  LOG("cuLibraryLoadData"); *lib = load_image(code); return OK;
}
CUresult cuLibraryLoadFromFile(void **lib, const char *fn, void *jo, void **jov, unsigned njo, void *lo, void **lov, unsigned nlo) {
  LOG("cuLibraryLoadFromFile(%s)", fn); return ERR_NOT_SUPPORTED;
}
CUresult cuLibraryUnload(void *lib) { LOG("cuLibraryUnload"); return OK; }
CUresult cuLibraryGetKernel(void **k, void *lib, const char *name) { LOG("cuLibraryGetKernel(%.60s...)", name); *k = get_kernel(lib, name); return OK; }
CUresult cuLibraryGetModule(void **m, void *lib) { *m = lib; return OK; }
CUresult cuKernelGetFunction(void **f, void *k) { *f = k; return OK; }
CUresult cuKernelGetName(const char **n, void *k) { *n = ((struct stub_kernel *)k)->name; return OK; }
CUresult cuKernelGetLibrary(void **l, void *k) { return ERR_NOT_SUPPORTED; }
CUresult cuKernelGetAttribute(int *pi, int attrib, void *k, CUdevice d) { *pi = 0; LOG("cuKernelGetAttribute(%d) -> 0", attrib); return OK; }
CUresult cuKernelSetAttribute(int attrib, int v, void *k, CUdevice d) {
  LOG("cuKernelSetAttribute(%d, %d)", attrib, v);
  if (attrib == 8) ((struct stub_kernel *)k)->attr_max_dyn_smem = v;
  if (attrib == 14) ((struct stub_kernel *)k)->attr_cluster_nonportable = v;
  return OK;
}
CUresult cuModuleLoadData(void **m, const void *image) { LOG("cuModuleLoadData"); *m = load_image(image); return OK; }
CUresult cuModuleLoadDataEx(void **m, const void *image, unsigned n, void *o, void **ov) { return cuModuleLoadData(m, image); }
CUresult cuModuleLoadFatBinary(void **m, const void *image) { return cuModuleLoadData(m, image); }
CUresult cuModuleUnload(void *m) { return OK; }
CUresult cuModuleGetFunction(void **f, void *m, const char *name) { LOG("cuModuleGetFunction(%.60s...)", name); *f = get_kernel(m, name); return OK; }
CUresult cuModuleGetLoadingMode(int *mode) { *mode = 1; return OK; }
CUresult cuFuncGetAttribute(int *pi, int attrib, void *f) { *pi = attrib == 0 ? 1024 : 0; LOG("cuFuncGetAttribute(%d) -> %d", attrib, *pi); return OK; }
CUresult cuFuncSetAttribute(void *f, int attrib, int v) { return cuKernelSetAttribute(attrib, v, f, 0); }
CUresult cuFuncSetCacheConfig(void *f, int c) { return OK; }
CUresult cuFuncGetName(const char **n, void *f) { return cuKernelGetName(n, f); }
CUresult cuFuncGetParamInfo(void *f, size_t idx, size_t *off, size_t *size) {
  struct stub_kernel *k = f; if ((int)idx >= k->nparams) return ERR_INVALID_VALUE;
  if (off) *off = k->off[idx];
  if (size) *size = k->size[idx];
  return OK;
}
CUresult cuFuncIsLoaded(int *state, void *f) { *state = 1; return OK; }
CUresult cuFuncLoad(void *f) { return OK; }

/* ---------------- occupancy ---------------- */
typedef struct { unsigned id; char pad[4]; union { char raw[64]; struct { unsigned x, y, z; } dim; int i; } v; } stub_attr;
typedef struct { unsigned gx, gy, gz, bx, by, bz, smem; void *stream; stub_attr *attrs; unsigned nattrs; } stub_cfg;
CUresult cuOccupancyMaxActiveClusters(int *n, void *f, const stub_cfg *c) {
  unsigned cl = 1;
  for (unsigned i = 0; c && i < c->nattrs; i++) if (c->attrs[i].id == 4) cl = c->attrs[i].v.dim.x * c->attrs[i].v.dim.y * c->attrs[i].v.dim.z;
  *n = device.sm_count / (cl ? cl : 1); LOG("cuOccupancyMaxActiveClusters(cluster %u) -> %d", cl, *n); return OK;
}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, void *f, int bs, size_t smem) { *n = 1; return OK; }
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, void *f, int bs, size_t smem, unsigned fl) { *n = 1; return OK; }

/* ---------------- tensor maps: encoded in the hardware's format ----------------
   cuTensorMapEncodeTiled writes the 128-byte map a real driver writes (words 0-7 as emulator/tma.py's table
   lays them out; words 8-15, the driver's bookkeeping, zero) and refuses what tma.encode_tiled refuses, the
   same rules in the same order (tests/test_peer_cuda.py checks the two agree). A host program that calls the
   driver (a CUDA C++ host, or a Python twin of one through ctypes) thus hands the kernel maps the
   emulator's TMA reads. */
static const struct { int format, tf32, bits, is_float; } tmap_type[16] = {
  /* CUtensorMapDataType -> hardware element format (tma.ElementFormat), tf32 rounding, element bits */
  {0, 0, 8, 0}, {1, 0, 16, 0}, {2, 0, 32, 0}, {3, 0, 32, 0}, {4, 0, 64, 0}, {5, 0, 64, 0},
  {6, 0, 16, 1}, {7, 0, 32, 1}, {9, 0, 64, 1}, {10, 0, 16, 1}, {8, 0, 32, 1}, {7, 1, 32, 1}, {8, 1, 32, 1},
  {11, 0, 4, 0}, {12, 0, 4, 0}, {13, 0, 6, 0},
};
CUresult cuTensorMapEncodeTiled(void *map, int dtype, unsigned rank, void *gaddr, const u64 *dims, const u64 *strides,
                                const unsigned *box, const unsigned *estride, int interleave, int swizzle, int l2, int oob) {
  u64 a = (u64)gaddr, w[16] = {0};
  LOG("cuTensorMapEncodeTiled(dtype %d, rank %u, %p, swizzle %d)", dtype, rank, gaddr, swizzle);
  if (dtype < 0 || dtype > 15 || interleave < 0 || interleave > 2 || swizzle < 0 || swizzle > 6 || l2 < 0 || l2 > 3 ||
      oob < 0 || oob > 1) return ERR_INVALID_VALUE;
  /* CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B, _ATOM_32B_FLIP_8B, _ATOM_64B: the 128-byte span, atomicity 1, 2, 3 */
  int atomicity = swizzle > 3 ? swizzle - 3 : 0;
  if (swizzle > 3) swizzle = 3;
  if (rank < (interleave ? 3u : 1u) || rank > 5) return ERR_INVALID_VALUE;
  u64 align = interleave == 2 ? 32 : 16;
  if (a % align) return ERR_INVALID_VALUE;
  for (unsigned i = 0; i < rank; i++) if (dims[i] < 1 || dims[i] > (1ULL << 32)) return ERR_INVALID_VALUE;
  for (unsigned i = 0; i + 1 < rank; i++) if (strides[i] % align || !strides[i] || strides[i] >= (1ULL << 40)) return ERR_INVALID_VALUE;
  for (unsigned i = 0; i < rank; i++) if (box[i] < 1 || box[i] > 256) return ERR_INVALID_VALUE;
  for (unsigned i = 0; i < rank; i++) if (estride[i] < 1 || estride[i] > 8) return ERR_INVALID_VALUE;
  u64 inner_bits = (u64)box[0] * tmap_type[dtype].bits;
  if (!interleave && inner_bits % 128) return ERR_INVALID_VALUE;
  if (!interleave && swizzle && inner_bits > (u64)(16 << swizzle) * 8) return ERR_INVALID_VALUE;
  if (interleave == 2 && swizzle != 1) return ERR_INVALID_VALUE;
  if (oob == 1 && !tmap_type[dtype].is_float) return ERR_INVALID_VALUE;
  u64 s[4] = {0};
  for (unsigned i = 0; i + 1 < rank; i++) s[i] = strides[i] >> 4;
  w[0] = a;
  w[1] = (u64)(rank - 1) << 4 | (u64)tmap_type[dtype].format << 7 | (u64)interleave << 11 | (u64)swizzle << 13 |
         (u64)oob << 15 | (u64)tmap_type[dtype].tf32 << 16 | (u64)l2 << 17 | (u64)atomicity << 19 |
         (s[0] & 0xffffffffULL) << 32;
  w[2] = (s[1] & 0xffffffffULL) | (s[2] & 0xffffffffULL) << 32;
  w[3] = s[3] & 0xffffffffULL;
  for (int i = 0; i < 4; i++) w[3] |= (s[i] >> 32) << (32 + 4 * i);
  u64 d[5] = {0};
  for (unsigned i = 0; i < rank; i++) d[i] = dims[i] - 1;
  w[4] = d[0] | d[1] << 32; w[5] = d[2] | d[3] << 32; w[6] = d[4] | (u64)(box[0] - 1) << 56;
  for (unsigned i = 0; i < rank; i++) w[6] |= (u64)(estride[i] - 1) << (32 + 3 * i);
  for (unsigned i = 1; i < rank; i++) w[7] |= (u64)(box[i] - 1) << (8 * (i - 1));
  memcpy(map, w, 128);
  return OK;
}
CUresult cuTensorMapEncodeIm2col(void *map, ...) { LOG("cuTensorMapEncodeIm2col: unsupported"); return ERR_NOT_SUPPORTED; }
/* Word 0 holds the address (bits 4-56; a 16-byte aligned address is stored as is). */
CUresult cuTensorMapReplaceAddress(void *map, void *gaddr) {
  if ((u64)gaddr % 16) return ERR_INVALID_VALUE;
  u64 *w = map; w[0] = (w[0] & ~((1ULL << 57) - 1)) | (u64)gaddr; return OK;
}

/* ---------------- launches: queued for the emulator ---------------- */
#define MAX_ATTRS 16
struct stub_launch {
  struct stub_kernel *kernel;
  unsigned grid[3], block[3], cluster[3], smem;
  u64 stream;
  int nattrs; unsigned attr_id[MAX_ATTRS]; int attr_value[MAX_ATTRS];
  unsigned char *params;
};
#define MAX_LAUNCHES 1024
static struct stub_launch launches[MAX_LAUNCHES];
static int nqueued;
static CUresult queue_launch(struct stub_kernel *k, const stub_cfg *c, void **params, void **extra) {
  if (nqueued >= MAX_LAUNCHES) return ERR_INVALID_VALUE;
  struct stub_launch *l = &launches[nqueued++];
  memset(l, 0, sizeof *l);
  l->kernel = k;
  l->grid[0] = c->gx; l->grid[1] = c->gy; l->grid[2] = c->gz;
  l->block[0] = c->bx; l->block[1] = c->by; l->block[2] = c->bz;
  l->cluster[0] = l->cluster[1] = l->cluster[2] = 1;
  l->smem = c->smem; l->stream = (u64)c->stream;
  for (unsigned i = 0; i < c->nattrs; i++) {
    const stub_attr *a = &c->attrs[i];
    if (a->id == 4) { l->cluster[0] = a->v.dim.x; l->cluster[1] = a->v.dim.y; l->cluster[2] = a->v.dim.z; }
    if (l->nattrs < MAX_ATTRS) { l->attr_id[l->nattrs] = a->id; l->attr_value[l->nattrs++] = a->v.i; }
  }
  l->params = calloc(1, k->param_bytes ? k->param_bytes : 1);
  if (params)
    for (int i = 0; i < k->nparams; i++) memcpy(l->params + k->off[i], params[i], k->size[i]);
  else if (extra) /* CU_LAUNCH_PARAM_BUFFER_POINTER (1), CU_LAUNCH_PARAM_BUFFER_SIZE (2), END (0) */
    for (int i = 0; extra[i]; i += 2) if (extra[i] == (void *)1) memcpy(l->params, extra[i + 1], k->param_bytes);
  LOG("launch %d queued: grid (%u,%u,%u) block (%u,%u,%u) smem %u, %u attributes, %d params (%d bytes)", nqueued - 1,
      c->gx, c->gy, c->gz, c->bx, c->by, c->bz, c->smem, c->nattrs, k->nparams, k->param_bytes);
  return OK;
}
int custub_launch_count(void) { return nqueued; }
const char *custub_launch_get(int i, unsigned *dims /* grid, block, cluster: 9 */, unsigned *smem, u64 *stream,
                              int *nparams, int *nattrs, unsigned *attr_id, int *attr_value) {
  struct stub_launch *l = &launches[i];
  for (int d = 0; d < 3; d++) { dims[d] = l->grid[d]; dims[3 + d] = l->block[d]; dims[6 + d] = l->cluster[d]; }
  *smem = l->smem; *stream = l->stream; *nparams = l->kernel->nparams; *nattrs = l->nattrs;
  for (int a = 0; a < l->nattrs; a++) { attr_id[a] = l->attr_id[a]; attr_value[a] = l->attr_value[a]; }
  return l->kernel->name;
}
const unsigned char *custub_launch_param(int i, int p, int *size) {
  struct stub_launch *l = &launches[i];
  *size = l->kernel->size[p];
  return l->params + l->kernel->off[p];
}
/* The launched kernel's attributes as the host code set them (-1: never set) and its cubin (ELF) image. */
const unsigned char *custub_launch_kernel(int i, int *max_dynamic_shared, int *cluster_nonportable, u64 *elf_size) {
  struct stub_kernel *k = launches[i].kernel;
  *max_dynamic_shared = k->attr_max_dyn_smem; *cluster_nonportable = k->attr_cluster_nonportable;
  *elf_size = k->elf ? image_size(k->elf) : 0;
  return k->elf;
}
void custub_launch_clear(void) {
  for (int i = 0; i < nqueued; i++) free(launches[i].params);
  nqueued = 0;
}
CUresult cuLaunchKernelEx(const stub_cfg *c, void *f, void **params, void **extra) {
  LOG("cuLaunchKernelEx"); return queue_launch(f, c, params, extra);
}
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned smem,
                        void *stream, void **params, void **extra) {
  stub_cfg c = {gx, gy, gz, bx, by, bz, smem, stream, NULL, 0};
  LOG("cuLaunchKernel"); return queue_launch(f, &c, params, extra);
}
CUresult cuLaunchCooperativeKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                   unsigned smem, void *stream, void **params) {
  return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, stream, params, NULL);
}

/* ---------------- entry-point lookup ---------------- */
#define E(fn) { #fn, (void *)fn }
static const struct { const char *name; void *fn; } table[] = {
  E(cuInit), E(cuDriverGetVersion), E(cuDeviceGetCount), E(cuDeviceGet), E(cuDeviceGetName), E(cuDeviceTotalMem),
  E(cuDeviceGetUuid), E(cuDeviceGetLuid), E(cuDeviceGetPCIBusId), E(cuDeviceComputeCapability), E(cuDeviceGetAttribute),
  E(cuDevicePrimaryCtxRetain), E(cuDevicePrimaryCtxRelease), E(cuDevicePrimaryCtxReset), E(cuDevicePrimaryCtxSetFlags),
  E(cuDevicePrimaryCtxGetState), E(cuCtxCreate), E(cuCtxDestroy), E(cuCtxGetCurrent), E(cuCtxSetCurrent), E(cuCtxPushCurrent),
  E(cuCtxPopCurrent), E(cuCtxGetDevice), E(cuCtxGetDevice_v2), E(cuCtxGetApiVersion), E(cuCtxGetFlags), E(cuCtxGetId),
  E(cuCtxSynchronize), E(cuCtxGetLimit), E(cuCtxSetLimit), E(cuCtxGetCacheConfig), E(cuCtxGetStreamPriorityRange),
  E(cuCtxGetExecAffinity), E(cuGetErrorName), E(cuGetErrorString),
  E(cuMemAlloc), E(cuMemAllocAsync), E(cuMemFree), E(cuMemFreeAsync), E(cuMemAllocHost), E(cuMemHostAlloc), E(cuMemFreeHost),
  E(cuMemcpy), E(cuMemcpyAsync), E(cuMemcpyHtoD), E(cuMemcpyDtoH), E(cuMemcpyDtoD), E(cuMemcpyHtoDAsync), E(cuMemcpyDtoHAsync),
  E(cuMemcpyDtoDAsync), E(cuMemsetD8), E(cuMemsetD8Async), E(cuMemsetD32), E(cuMemsetD32Async), E(cuMemGetInfo),
  E(cuPointerGetAttribute),
  E(cuStreamCreate), E(cuStreamCreateWithPriority), E(cuStreamDestroy), E(cuStreamSynchronize), E(cuStreamQuery),
  E(cuStreamWaitEvent), E(cuStreamGetCtx), E(cuStreamGetFlags), E(cuStreamGetPriority), E(cuStreamGetId), E(cuStreamIsCapturing),
  E(cuEventCreate), E(cuEventDestroy), E(cuEventRecord), E(cuEventSynchronize), E(cuEventQuery), E(cuEventElapsedTime),
  E(cuLibraryLoadData), E(cuLibraryLoadFromFile), E(cuLibraryUnload), E(cuLibraryGetKernel), E(cuLibraryGetModule),
  E(cuKernelGetFunction), E(cuKernelGetName), E(cuKernelGetLibrary), E(cuKernelGetAttribute), E(cuKernelSetAttribute),
  E(cuModuleLoadData), E(cuModuleLoadDataEx), E(cuModuleLoadFatBinary), E(cuModuleUnload), E(cuModuleGetFunction),
  E(cuModuleGetLoadingMode), E(cuFuncGetAttribute), E(cuFuncSetAttribute), E(cuFuncSetCacheConfig), E(cuFuncGetName),
  E(cuFuncGetParamInfo), E(cuFuncIsLoaded), E(cuFuncLoad),
  E(cuOccupancyMaxActiveClusters), E(cuOccupancyMaxActiveBlocksPerMultiprocessor), E(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags),
  E(cuTensorMapEncodeTiled), E(cuTensorMapEncodeIm2col), E(cuTensorMapReplaceAddress),
  E(cuLaunchKernelEx), E(cuLaunchKernel), E(cuLaunchCooperativeKernel),
};

static void *lookup(const char *sym) {
  char base[256];
  snprintf(base, sizeof base, "%s", sym);
  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
      if (!strcmp(table[i].name, base)) return table[i].fn;
    char *v = strstr(base, "_v");  /* cuMemAlloc_v2 -> cuMemAlloc, cuCtxCreate_v4 -> cuCtxCreate */
    if (!v || !strchr("0123456789", v[2])) break;
    *v = 0;
  }
  return NULL;
}
CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, u64 flags);
CUresult cuGetExportTable(const void **table_out, const unsigned char *uuid);
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, u64 flags, int *status) {
  if (!strcmp(sym, "cuGetProcAddress")) *pfn = ver >= 12000 ? (void *)cuGetProcAddress_v2 : (void *)cuGetProcAddress;
  else if (!strcmp(sym, "cuGetExportTable")) *pfn = (void *)cuGetExportTable;
  else *pfn = lookup(sym);
  if (status) *status = *pfn ? 0 : 1;
  if (!*pfn) LOG("cuGetProcAddress(%s, %d): not stubbed", sym, ver);
  return *pfn ? OK : ERR_NOT_FOUND;
}
CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, u64 flags) { return cuGetProcAddress_v2(sym, pfn, ver, flags, NULL); }

/* cudart asks for private tables by UUID; none is provided. */
CUresult cuGetExportTable(const void **table_out, const unsigned char *uuid) {
  char hex[40];
  for (int i = 0; i < 16; i++) sprintf(hex + 2 * i, "%02x", uuid[i]);
  LOG("cuGetExportTable(%s): not provided", hex);
  *table_out = NULL;
  return ERR_NOT_SUPPORTED;
}

/* versioned exports that direct linkers (the runtime shim) use */
CUresult cuMemAlloc_v2(u64 *p, size_t n) __attribute__((alias("cuMemAlloc")));
CUresult cuMemFree_v2(u64 p) __attribute__((alias("cuMemFree")));
CUresult cuCtxCreate_v2(void **c, void *params, unsigned flags, CUdevice d) __attribute__((alias("cuCtxCreate")));
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) __attribute__((alias("cuDevicePrimaryCtxRelease")));
