// gemm_f32: row-major C = op(A) op(B) (C += op(A) op(B) with accumulate) for
// m x k by k x n matrices, batched over blockIdx.z at the given element
// strides. MatMul's kernel where
// cuBLAS cannot be loaded: 16 x 16 tiles in shared memory, FP32 fused
// multiply-adds as cuBLAS's FP32 math does.

#ifndef TILE
#define TILE 16
#endif

extern "C" __global__ void gemm_f32(const float* A, const float* B, float* C, i64 m, i64 n, i64 k, int ta, int tb,
                                    i64 sa, i64 sb, i64 sc, int accumulate) {
  __shared__ float As[TILE][TILE + 1];
  __shared__ float Bs[TILE][TILE + 1];
  A += blockIdx.z * sa;
  B += blockIdx.z * sb;
  C += blockIdx.z * sc;
  i64 row = (i64)blockIdx.y * TILE + threadIdx.y;
  i64 col = (i64)blockIdx.x * TILE + threadIdx.x;
  float acc = 0.0f;
  for (i64 k0 = 0; k0 < k; k0 += TILE) {
    i64 ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    // A(row, ka) is A[row*k + ka], or A[ka*m + row] when transposed.
    As[threadIdx.y][threadIdx.x] = (row < m && ka < k) ? (ta ? A[ka * m + row] : A[row * k + ka]) : 0.0f;
    // B(kb, col) is B[kb*n + col], or B[col*k + kb] when transposed.
    Bs[threadIdx.y][threadIdx.x] = (kb < k && col < n) ? (tb ? B[col * k + kb] : B[kb * n + col]) : 0.0f;
    __syncthreads();
    for (int j = 0; j < TILE; ++j) acc = fmaf(As[threadIdx.y][j], Bs[j][threadIdx.x], acc);
    __syncthreads();
  }
  if (row < m && col < n) C[row * n + col] = accumulate ? C[row * n + col] + acc : acc;
}
