// What NVRTC provides without headers, declared for clang's CUDA front end
// (-nocudainc): the tests compile the kernels to PTX with clang where it is
// installed, which checks what g++ cannot (host and device attributes,
// shared memory) on machines without the CUDA toolkit.
#include "__clang_cuda_builtin_vars.h"
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __forceinline__ __inline__ __attribute__((always_inline))
__device__ float expf(float);
__device__ double exp(double);
__device__ double log(double);
__device__ double log1p(double);
__device__ double tanh(double);
__device__ double sqrt(double);
__device__ float sqrtf(float);
__device__ float fmaf(float, float, float);
__device__ float __int_as_float(int);
__device__ int __float_as_int(float);
__device__ void __syncthreads();
__device__ int atomicCAS(int*, int, int);
