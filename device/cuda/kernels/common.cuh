// Shared by every kernel file. NVRTC compiles without system headers, so
// the types come from the language; every kernel is extern "C" so that the
// host finds it by its plain name.

typedef long long i64;
typedef int i32;
typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

#define MAXR 6
// THREADS is the block size of every one-dimensional launch (the host's
// threads); the tests' CPU build of the kernels runs blocks of one thread.
#ifndef THREADS
#define THREADS 256
#endif

// Bcast is a broadcast plan (see bcast.go): output index i, decomposed over
// dims (row-major, outermost first), gives a's element sum(q*sa) and b's
// sum(q*sb); a stride of 0 broadcasts.
struct Bcast {
  i64 rank;
  i64 dims[MAXR];
  i64 sa[MAXR];
  i64 sb[MAXR];
};

// Reduce is a reduction plan (see reduce.go): output index o decomposes
// over kdims with input strides kstr; reduced index r over rdims with rstr.
struct Reduce {
  i64 krank;
  i64 kdims[MAXR];
  i64 kstr[MAXR];
  i64 rrank;
  i64 rdims[MAXR];
  i64 rstr[MAXR];
};

// Bcast3 is a broadcast plan of three operands (SelectV2's cond, t and e;
// see plan.go): output index i gives each operand's element as Bcast does.
struct Bcast3 {
  i64 rank;
  i64 dims[MAXR];
  i64 s0[MAXR];
  i64 s1[MAXR];
  i64 s2[MAXR];
};

#define GRID_LOOP(i, n) \
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)

__device__ __forceinline__ void bcast_index(const Bcast& p, i64 i, i64* ia, i64* ib) {
  if (p.rank == 1) {  // same shapes, or a scalar with a tensor: no division
    *ia = i * p.sa[0];
    *ib = i * p.sb[0];
    return;
  }
  i64 a = 0, b = 0;
  for (int d = (int)p.rank - 1; d >= 0; --d) {
    i64 q = i % p.dims[d];
    i /= p.dims[d];
    a += q * p.sa[d];
    b += q * p.sb[d];
  }
  *ia = a;
  *ib = b;
}

__device__ __forceinline__ void bcast3_index(const Bcast3& p, i64 i, i64* i0, i64* i1, i64* i2) {
  i64 a = 0, b = 0, c = 0;
  for (int d = (int)p.rank - 1; d >= 0; --d) {
    i64 q = i % p.dims[d];
    i /= p.dims[d];
    a += q * p.s0[d];
    b += q * p.s1[d];
    c += q * p.s2[d];
  }
  *i0 = a;
  *i1 = b;
  *i2 = c;
}

__device__ __forceinline__ i64 plan_offset(i64 idx, i64 rank, const i64* dims, const i64* str) {
  i64 off = 0;
  for (int d = (int)rank - 1; d >= 0; --d) {
    off += (idx % dims[d]) * str[d];
    idx /= dims[d];
  }
  return off;
}

// imin and imax rather than the overloaded min and max, whose long long
// versions depend on the toolkit's headers.
__device__ __forceinline__ i64 imin(i64 a, i64 b) { return a < b ? a : b; }
__device__ __forceinline__ i64 imax(i64 a, i64 b) { return a > b ? a : b; }

__device__ __forceinline__ float nan_f32() { return __int_as_float(0x7fffffff); }

// block_sum returns the sum of v over the block (THREADS threads) to every
// thread; sh is THREADS elements of shared memory.
template <class A>
__device__ A block_sum(A v, A* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  A r = sh[0];
  __syncthreads();
  return r;
}

// Fault is a device's record of the first fault its kernels found (see
// faults.go): tag names the launch's node (0: no fault), pos and index the
// offending index and its position, rows the bound it broke.
struct Fault {
  int tag;
  int pad;
  i64 pos;
  i64 index;
  i64 rows;
};

__device__ __forceinline__ void report_fault(Fault* f, int tag, i64 pos, i64 index, i64 rows) {
  if (atomicCAS(&f->tag, 0, tag) == 0) {
    f->pos = pos;
    f->index = index;
    f->rows = rows;
  }
}
