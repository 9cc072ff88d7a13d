// The CUDA C the kernels use, for g++: the tests compile kernels/*.cu into
// a shared library for the CPU and run each launch with its own grid and
// block sizes, a block at a time, each thread of the block a fiber that
// __syncthreads switches away from, so that the kernels' indexing,
// arithmetic and block-level cooperation (shared memory, barriers) are
// checked on machines without a GPU. A fiber's stack is set up once with
// makecontext; switches are _setjmp and _longjmp, which unlike swapcontext
// make no system call. Shared memory is static
// storage, which the threads of the one running block share.
#include <setjmp.h>
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static

struct dim3 {
  unsigned x, y, z;
};
static dim3 threadIdx, blockIdx, blockDim, gridDim;

// The fibers of the running block: __syncthreads passes to the next one,
// round robin, so that every thread reaches the barrier before the first
// goes on.
static unsigned emu_nthreads, emu_current;
static jmp_buf* emu_jumps;
static inline dim3 emu_thread(unsigned t) {
  return dim3{t % blockDim.x, (t / blockDim.x) % blockDim.y, t / (blockDim.x * blockDim.y)};
}
static inline void __syncthreads() {
  unsigned me = emu_current, next = (me + 1) % emu_nthreads;
  if (next != me) {
    emu_current = next;
    if (!_setjmp(emu_jumps[me])) _longjmp(emu_jumps[next], 1);
    emu_current = me;
  }
  threadIdx = emu_thread(me);
}
// One fiber runs at a time and switches only at __syncthreads: an atomic
// is a plain read and write.
static inline int atomicCAS(int* a, int cmp, int val) {
  int old = *a;
  if (old == cmp) *a = val;
  return old;
}
static inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
static inline int __float_as_int(float f) {
  int i;
  std::memcpy(&i, &f, 4);
  return i;
}
