// A fake CUDA driver, NVRTC and cuBLAS over host memory and the kernels
// compiled for the CPU (emu_main.h), so that the platform's real code
// path (library search, purego calls, contexts, streams, modules, launches
// through kernelParams, cuBLAS's column-major calls) runs on machines
// without a GPU. Calls that need a context fail unless the calling OS
// thread has made one current, as the driver's do. Copied to libcuda.so.1,
// libnvrtc.so.13 and libcublas.so.13 by the tests.
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
static thread_local void* fake_current;
static int fake_retained;
static char fake_ctx;  // the primary context's handle
static int fake_math_mode = -1;

#define NEED_CONTEXT \
  if (fake_current != &fake_ctx) return 201; /* CUDA_ERROR_INVALID_CONTEXT */

// A stream runs its work at once, or records it while it captures.
typedef std::vector<std::function<void()>> fake_work;
struct fake_stream {
  bool capturing = false;
  fake_work* rec = nullptr;
};
#define RUN(s, ...)                                                                   \
  do {                                                                                \
    fake_stream* fs_ = (fake_stream*)(s);                                             \
    if (fs_ == nullptr) return 400; /* CUDA_ERROR_INVALID_HANDLE */                   \
    if (fs_->capturing) fs_->rec->push_back([=] { __VA_ARGS__; }); else { __VA_ARGS__; } \
  } while (0)
#define NOT_WHILE_CAPTURING(s) \
  if (s && ((fake_stream*)(s))->capturing) return 900; /* CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED */

extern "C" {
// As the driver, an empty CUDA_VISIBLE_DEVICES hides every card.
CUresult cuInit(unsigned) {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return (v && !*v) ? 100 : 0;
}
CUresult cuDriverGetVersion(int* v) { *v = 13000; return 0; }
CUresult cuDeviceGetCount(int* n) { *n = 1; return 0; }
CUresult cuDeviceGet(int* d, int i) { if (i != 0) return 101; *d = 0; return 0; }
CUresult cuDeviceGetName(char* b, int n, int) { std::snprintf(b, n, "Fake GPU"); return 0; }
CUresult cuDeviceTotalMem_v2(size_t* b, int) { *b = size_t(1) << 30; return 0; }
CUresult cuDeviceGetAttribute(int* v, int attr, int) {
  switch (attr) {
  case 75: *v = 9; return 0;
  case 76: *v = 0; return 0;
  case 16: *v = 4; return 0;
  }
  return 1;
}
CUresult cuDevicePrimaryCtxRetain(void** ctx, int) { ++fake_retained; *ctx = &fake_ctx; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int) { return fake_retained-- > 0 ? 0 : 1; }
CUresult cuCtxSetCurrent(void* ctx) { fake_current = ctx; return 0; }
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
  NEED_CONTEXT
  void* m = std::aligned_alloc(256, (n + 255) / 256 * 256);
  if (!m) return 2;
  *p = (CUdeviceptr)m;
  return 0;
}
CUresult cuMemFree_v2(CUdeviceptr p) { NEED_CONTEXT std::free((void*)p); return 0; }
CUresult cuMemGetInfo_v2(size_t* f, size_t* t) { NEED_CONTEXT *f = *t = size_t(1) << 30; return 0; }
CUresult cuStreamCreate(void** s, unsigned flags) { NEED_CONTEXT if (flags != 1) return 1; *s = new fake_stream; return 0; }
CUresult cuStreamDestroy_v2(void* s) { NEED_CONTEXT delete (fake_stream*)s; return 0; }
CUresult cuStreamSynchronize(void* s) { NEED_CONTEXT NOT_WHILE_CAPTURING(s) return 0; }
CUresult cuStreamQuery(void* s) { NEED_CONTEXT NOT_WHILE_CAPTURING(s) return 0; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void* s, size_t n, void* st) {
  NEED_CONTEXT NOT_WHILE_CAPTURING(st) std::memcpy((void*)d, s, n);
  return 0;
}
CUresult cuMemcpyDtoHAsync_v2(void* d, CUdeviceptr s, size_t n, void* st) {
  NEED_CONTEXT NOT_WHILE_CAPTURING(st) std::memcpy(d, (void*)s, n);
  return 0;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, void* st) {
  NEED_CONTEXT RUN(st, std::memmove((void*)d, (void*)s, n));
  return 0;
}
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, void* st) {
  NEED_CONTEXT RUN(st, std::memset((void*)d, v, n));
  return 0;
}

// CUDA graphs: a captured stream's work, replayed in order.
CUresult cuStreamBeginCapture_v2(void* s, int mode) {
  NEED_CONTEXT
  fake_stream* fs = (fake_stream*)s;
  if (fs->capturing || mode != 2) return 1;
  fs->capturing = true;
  fs->rec = new fake_work;
  return 0;
}
CUresult cuStreamEndCapture(void* s, fake_work** g) {
  NEED_CONTEXT
  fake_stream* fs = (fake_stream*)s;
  if (!fs->capturing) return 1;
  fs->capturing = false;
  *g = fs->rec;
  fs->rec = nullptr;
  return 0;
}
CUresult cuGraphInstantiateWithFlags(fake_work** exec, fake_work* g, unsigned long long flags) {
  NEED_CONTEXT
  if (flags != 0 && flags != 1) return 1;  // CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH
  *exec = new fake_work(*g);
  return 0;
}
CUresult cuGraphLaunch(fake_work* exec, void* s) {
  NEED_CONTEXT NOT_WHILE_CAPTURING(s) for (auto& f : *exec) f();
  return 0;
}
CUresult cuGraphDestroy(fake_work* g) { delete g; return 0; }
CUresult cuGraphExecDestroy(fake_work* g) { NEED_CONTEXT delete g; return 0; }
CUresult cuModuleLoadData(void** m, const void* image) {
  NEED_CONTEXT
  if (std::strncmp((const char*)image, "//FAKE PTX compute_90", 21) != 0) return 218;
  *m = new int(0);
  return 0;
}
CUresult cuModuleUnload(void* m) { NEED_CONTEXT delete (int*)m; return 0; }
CUresult cuModuleGetFunction(void** f, void*, const char* name) {
  NEED_CONTEXT
  int k = emu_find(name);
  if (k < 0) return 500;
  *f = (void*)(intptr_t)(k + 1);
  return 0;
}
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void* stream, void** params, void** extra) {
  NEED_CONTEXT
  if (gx == 0 || gy == 0 || gz == 0 || bx * by * bz == 0 || bx * by * bz > 1024 || gy > 65535 || gz > 65535 ||
      stream == nullptr || extra != nullptr || shared != 0)
    return 1;
  int k = (int)(intptr_t)f - 1;
  fake_stream* fs = (fake_stream*)stream;
  if (fs->capturing) {
    void** saved = emu_kernels[k].save(params);
    fs->rec->push_back([=] { emu_run_kernel(k, gx, gy, gz, bx, by, bz, saved); });
    return 0;
  }
  emu_run_kernel(k, gx, gy, gz, bx, by, bz, params);
  return 0;
}
CUresult cuGetErrorName(CUresult r, const char** s) {
  switch (r) {
  case 1: *s = "CUDA_ERROR_INVALID_VALUE"; return 0;
  case 201: *s = "CUDA_ERROR_INVALID_CONTEXT"; return 0;
  }
  return 1;
}
CUresult cuGetErrorString(CUresult r, const char** s) { *s = r == 201 ? "invalid device context" : "fake error"; return 0; }

// NVRTC: "compiles" to a marker the fake driver checks.
struct fake_prog { std::string src, ptx, log; };
int nvrtcVersion(int* a, int* b) { *a = 13; *b = 0; return 0; }
const char* nvrtcGetErrorString(int r) { return r == 6 ? "NVRTC_ERROR_COMPILATION" : "NVRTC_ERROR"; }
int nvrtcCreateProgram(fake_prog** p, const char* src, const char*, int nh, const char* const*, const char* const*) {
  if (nh != 0) return 3;
  *p = new fake_prog{src, "", ""};
  return 0;
}
int nvrtcCompileProgram(fake_prog* p, int n, const char* const* opts) {
  bool arch = false;
  for (int i = 0; i < n; ++i) arch = arch || std::strcmp(opts[i], "--gpu-architecture=compute_90") == 0;
  if (!arch || p->src.find("extern \"C\" __global__") == std::string::npos) {
    p->log = "fake nvrtc: want --gpu-architecture=compute_90 and kernels";
    return 6;
  }
  p->ptx = "//FAKE PTX compute_90";
  return 0;
}
int nvrtcGetPTXSize(fake_prog* p, size_t* n) { *n = p->ptx.size() + 1; return 0; }
int nvrtcGetPTX(fake_prog* p, char* b) { std::memcpy(b, p->ptx.c_str(), p->ptx.size() + 1); return 0; }
int nvrtcGetProgramLogSize(fake_prog* p, size_t* n) { *n = p->log.size() + 1; return 0; }
int nvrtcGetProgramLog(fake_prog* p, char* b) { std::memcpy(b, p->log.c_str(), p->log.size() + 1); return 0; }
int nvrtcDestroyProgram(fake_prog** p) { delete *p; *p = nullptr; return 0; }
int nvrtcGetNumSupportedArchs(int* n) { *n = 2; return 0; }
int nvrtcGetSupportedArchs(int* a) { a[0] = 80; a[1] = 90; return 0; }

// cuBLAS: column-major SGEMM as the BLAS reference defines it.
// A handle's workspace: cublasSetStream resets it to cuBLAS's own, as the
// real one does, and a GEMM captured without one of the caller's is
// refused (the real cuBLAS would record allocations in the graph).
struct fake_handle {
  void* stream;
  void* work;
  size_t work_bytes;
};
int cublasCreate_v2(fake_handle** h) { NEED_CONTEXT *h = new fake_handle{nullptr, nullptr, 0}; return 0; }
int cublasDestroy_v2(fake_handle* h) { delete h; return 0; }
int cublasSetStream_v2(fake_handle* h, void* s) {
  h->stream = s;
  h->work = nullptr;
  h->work_bytes = 0;
  return 0;
}
int cublasSetWorkspace_v2(fake_handle* h, void* w, size_t n) {
  NEED_CONTEXT
  if (w == nullptr || n == 0 || (uintptr_t)w % 256 != 0) return 7;
  h->work = w;
  h->work_bytes = n;
  return 0;
}
int cublasSetMathMode(fake_handle*, int mode) { fake_math_mode = mode; return 0; }
static int fake_gemm(fake_handle* h, int ta, int tb, int m, int n, int k, const float* alpha, const float* A, int lda,
                     const float* B, int ldb, const float* beta, float* C, int ldc) {
  if (h->stream == nullptr) return 7;
  if (lda < (ta ? k : m) || ldb < (tb ? n : k) || ldc < m) return 7;  // CUBLAS_STATUS_INVALID_VALUE
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double acc = 0;
      for (int l = 0; l < k; ++l) {
        float a = ta ? A[l + (long)i * lda] : A[i + (long)l * lda];
        float b = tb ? B[j + (long)l * ldb] : B[l + (long)j * ldb];
        acc += (double)a * b;
      }
      float& c = C[i + (long)j * ldc];
      c = *alpha * (float)acc + (*beta == 0 ? 0.0f : *beta * c);
    }
  return 0;
}
int cublasSgemm_v2(fake_handle* h, int ta, int tb, int m, int n, int k, const float* alpha, const float* A, int lda,
                   const float* B, int ldb, const float* beta, float* C, int ldc) {
  NEED_CONTEXT
  float al = *alpha, be = *beta;  // host pointer mode: read at the call
  fake_stream* fs = (fake_stream*)h->stream;
  if (fs && fs->capturing) {
    if (h->work == nullptr) return 14;  // CUBLAS_STATUS_INTERNAL_ERROR
    fs->rec->push_back([=] { fake_gemm(h, ta, tb, m, n, k, &al, A, lda, B, ldb, &be, C, ldc); });
    return 0;
  }
  return fake_gemm(h, ta, tb, m, n, k, &al, A, lda, B, ldb, &be, C, ldc);
}
int cublasSgemmStridedBatched(fake_handle* h, int ta, int tb, int m, int n, int k, const float* alpha, const float* A,
                              int lda, long long sa, const float* B, int ldb, long long sb, const float* beta, float* C,
                              int ldc, long long sc, int batch) {
  NEED_CONTEXT
  float al = *alpha, be = *beta;
  auto run = [=] {
    for (int i = 0; i < batch; ++i) fake_gemm(h, ta, tb, m, n, k, &al, A + i * sa, lda, B + i * sb, ldb, &be, C + i * sc, ldc);
  };
  fake_stream* fs = (fake_stream*)h->stream;
  if (fs && fs->capturing) {
    if (h->work == nullptr) return 14;
    fs->rec->push_back(run);
    return 0;
  }
  if (h->stream == nullptr || lda < (ta ? k : m) || ldb < (tb ? n : k) || ldc < m) return 7;
  run();
  return 0;
}
int fake_cublas_math_mode() { return fake_math_mode; }
}
