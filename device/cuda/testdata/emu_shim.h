// The CUDA C the kernels use, for g++: the tests compile kernels/*.cu into
// a shared library for the CPU and run each launch with its own grid and
// block sizes, a block at a time, one OS thread per thread of the block,
// so that the kernels' indexing, arithmetic and block-level cooperation
// (shared memory, __syncthreads) are checked on machines without a GPU.
// Shared memory is static storage, which the threads of the one running
// block share.
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static

struct dim3 {
  unsigned x, y, z;
};
static thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;
static std::barrier<>* emu_barrier;
static inline void __syncthreads() { emu_barrier->arrive_and_wait(); }
static inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
using std::max;
using std::min;
