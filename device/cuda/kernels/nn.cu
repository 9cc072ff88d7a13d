// Neural-network kernels: softmax and the softmax cross-entropies, the
// copies of the GEMM convolutions, max and average pooling, all NHWC with
// filters HWIO, as the CPU's.

// row_max returns to every thread of the block the maximum of a row of
// c > 0 elements as the CPU's scan finds it (v > m from the first
// element): NaN if the first element is NaN, else the largest of those
// that are not. sh is THREADS floats of shared memory.
__device__ float row_max(const float* xr, i64 c, float* sh) {
  float m = xr[0];
  for (i64 j = threadIdx.x; j < c; j += blockDim.x) {
    float v = xr[j];
    if (v > m) m = v;
  }
  sh[threadIdx.x] = m;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s && sh[threadIdx.x + s] > sh[threadIdx.x]) sh[threadIdx.x] = sh[threadIdx.x + s];
    __syncthreads();
  }
  m = sh[0];
  __syncthreads();
  return m;
}

// Softmax (logsm 0) and LogSoftmax (logsm 1) over rows of c > 0 elements:
// one block per row. As the CPU's: the row's maximum m subtracted in
// float, so that nothing overflows, the exponentials and their sum in
// double; softmax is each exponential rounded to float times the float
// reciprocal of the sum, log-softmax (x - m) - (float)log(sum).
extern "C" __global__ void softmax_f32(const float* x, float* y, i64 n, i64 c, int logsm) {
  __shared__ double shd[THREADS];
  __shared__ float shf[THREADS];
  for (i64 row = blockIdx.x; row < n; row += gridDim.x) {
    const float* xr = x + row * c;
    float* yr = y + row * c;
    float m = row_max(xr, c, shf);
    double sum = 0;
    for (i64 j = threadIdx.x; j < c; j += blockDim.x) {
      double e = exp((double)(xr[j] - m));
      if (!logsm) yr[j] = (float)e;
      sum += e;
    }
    sum = block_sum<double>(sum, shd);
    if (logsm) {
      float lse = (float)log(sum);
      for (i64 j = threadIdx.x; j < c; j += blockDim.x) yr[j] = (xr[j] - m) - lse;
    } else {
      float inv = (float)(1.0 / sum);
      for (i64 j = threadIdx.x; j < c; j += blockDim.x) yr[j] *= inv;
    }
  }
}

// SoftmaxCrossEntropyWithLogits over logits and dense labels [n, c > 0]:
// one block per row. As the CPU's: loss = sum(labels * (log(sum(e)) -
// (x - m))) in double, backprop = softmax - labels, the softmax rounded
// from double.
extern "C" __global__ void softmax_xent_f32(const float* x, const float* labels, float* loss, float* bp, i64 n, i64 c) {
  __shared__ double shd[THREADS];
  __shared__ float shf[THREADS];
  for (i64 row = blockIdx.x; row < n; row += gridDim.x) {
    const float* xr = x + row * c;
    const float* lr = labels + row * c;
    float* br = bp + row * c;
    float m = row_max(xr, c, shf);
    double sum = 0;
    for (i64 j = threadIdx.x; j < c; j += blockDim.x) {
      double e = exp((double)(xr[j] - m));
      br[j] = (float)e;
      sum += e;
    }
    sum = block_sum<double>(sum, shd);
    double log_sum = log(sum), inv = 1.0 / sum, l = 0;
    for (i64 j = threadIdx.x; j < c; j += blockDim.x) {
      float lab = lr[j];
      l += (double)lab * (log_sum - (double)(xr[j] - m));
      br[j] = (float)((double)br[j] * inv) - lab;
    }
    l = block_sum<double>(l, shd);
    if (threadIdx.x == 0) loss[row] = (float)l;
  }
}

// SparseSoftmaxCrossEntropyWithLogits over logits [n, c]: one block per
// row. As the CPU's float32 kernel: exponentials in float, their sum and
// the logarithm in double. A label outside [0, c) cannot be reported from
// the GPU without a synchronisation; its row gets NaN loss and backprop, as
// TensorFlow's GPU kernel does.
#define SPARSE_XENT(name, L) \
  extern "C" __global__ void name(const float* x, const L* labels, float* loss, float* bp, i64 n, i64 c) { \
    __shared__ double shd[THREADS]; \
    __shared__ float shf[THREADS]; \
    for (i64 row = blockIdx.x; row < n; row += gridDim.x) { \
      const float* xr = x + row * c; \
      float* br = bp + row * c; \
      L label = labels[row]; \
      if (label < 0 || (i64)label >= c) { \
        for (i64 j = threadIdx.x; j < c; j += blockDim.x) br[j] = nan_f32(); \
        if (threadIdx.x == 0) loss[row] = nan_f32(); \
        continue; \
      } \
      float m = xr[0]; \
      for (i64 j = threadIdx.x; j < c; j += blockDim.x) { \
        float v = xr[j]; \
        if (v > m) m = v; \
      } \
      shf[threadIdx.x] = m; \
      __syncthreads(); \
      for (int s = THREADS / 2; s > 0; s >>= 1) { \
        if (threadIdx.x < s && shf[threadIdx.x + s] > shf[threadIdx.x]) shf[threadIdx.x] = shf[threadIdx.x + s]; \
        __syncthreads(); \
      } \
      m = shf[0]; \
      __syncthreads(); \
      double sum = 0; \
      for (i64 j = threadIdx.x; j < c; j += blockDim.x) { \
        float e = expf(xr[j] - m); \
        br[j] = e; \
        sum += (double)e; \
      } \
      sum = block_sum<double>(sum, shd); \
      double inv = 1.0 / sum; \
      for (i64 j = threadIdx.x; j < c; j += blockDim.x) { \
        float v = (float)((double)br[j] * inv); \
        if (j == (i64)label) v -= 1.0f; \
        br[j] = v; \
      } \
      if (threadIdx.x == 0) loss[row] = (float)(log(sum) - (double)(xr[label] - m)); \
      __syncthreads(); \
    } \
  }
SPARSE_XENT(sparse_xent_f32_i32, i32)
SPARSE_XENT(sparse_xent_f32_i64, i64)

// Conv is a convolution's geometry: input [n, h, w, c], filter
// [kh, kw, c, co], output [n, oh, ow, co], strides and the padding before
// the first row and column.
struct Conv {
  i64 n, h, w, c, kh, kw, co, sh, sw, pt, pl, oh, ow;
};

// Convolutions are GEMMs over an im2col matrix: for a chunk of images,
// cols [images*oh*ow, kh*kw*c] holds at row (n, oh, ow) the window of
// input that output position reads, zeros where it overhangs the padding,
// in the filter's (kh, kw, c) order. Then
//   Conv2D:               y [M, co] = cols [M, K] x f [K, co]
//   Conv2DBackpropInput:  dcols [M, K] = dy [M, co] x f^T, then col2im
//   Conv2DBackpropFilter: df [K, co] += cols^T [K, M] x dy [M, co]
// with the products on cuBLAS (or gemm_f32) and only the copies here.

// im2col_f32 fills cols for the p.n images of x: one thread per element of
// cols.
extern "C" __global__ void im2col_f32(const float* x, float* cols, Conv p) {
  i64 K = p.kh * p.kw * p.c;
  GRID_LOOP(i, p.n * p.oh * p.ow * K) {
    i64 k = i % K, row = i / K;
    i64 c = k % p.c, t = k / p.c;
    i64 kw = t % p.kw, kh = t / p.kw;
    i64 ow = row % p.ow, r = row / p.ow;
    i64 oh = r % p.oh, n = r / p.oh;
    i64 ih = oh * p.sh - p.pt + kh, iw = ow * p.sw - p.pl + kw;
    cols[i] = (ih < 0 || ih >= p.h || iw < 0 || iw >= p.w) ? 0.0f : x[((n * p.h + ih) * p.w + iw) * p.c + c];
  }
}

// col2im_f32 is im2col's adjoint: one thread per element of dx gathers, in
// (kh, kw) order, the entries of dcols that im2col copied from it. A gather
// rather than a scatter: no atomics, and a result independent of the
// schedule.
extern "C" __global__ void col2im_f32(const float* dcols, float* dx, Conv p) {
  i64 K = p.kh * p.kw * p.c;
  GRID_LOOP(i, p.n * p.h * p.w * p.c) {
    i64 c = i % p.c, t = i / p.c;
    i64 iw = t % p.w;
    t /= p.w;
    i64 ih = t % p.h, n = t / p.h;
    float acc = 0.0f;
    for (i64 kh = 0; kh < p.kh; ++kh) {
      i64 th = ih + p.pt - kh;
      if (th < 0 || th % p.sh != 0) continue;
      i64 oh = th / p.sh;
      if (oh >= p.oh) continue;
      for (i64 kw = 0; kw < p.kw; ++kw) {
        i64 tw = iw + p.pl - kw;
        if (tw < 0 || tw % p.sw != 0) continue;
        i64 ow = tw / p.sw;
        if (ow >= p.ow) continue;
        acc += dcols[((n * p.oh + oh) * p.ow + ow) * K + (kh * p.kw + kw) * p.c + c];
      }
    }
    dx[i] = acc;
  }
}

// Pool is a pooling's geometry (input [n, h, w, c], output [n, oh, ow, c]).
struct Pool {
  i64 n, h, w, c, kh, kw, sh, sw, pt, pl, oh, ow;
};

// window_max returns the input offset of the first maximum of the window of
// output (n, oh, ow, c), scanning rows then columns with v > best, as the
// CPU does; the window is clipped to the image and never empty.
__device__ __forceinline__ i64 window_max(const float* x, const Pool& p, i64 n, i64 oh, i64 ow, i64 c) {
  i64 h0 = oh * p.sh - p.pt, w0 = ow * p.sw - p.pl;
  i64 h1 = imin(h0 + p.kh, p.h), w1 = imin(w0 + p.kw, p.w);
  h0 = imax(h0, 0);
  w0 = imax(w0, 0);
  i64 at = ((n * p.h + h0) * p.w + w0) * p.c + c;
  float best = x[at];
  for (i64 ih = h0; ih < h1; ++ih) {
    for (i64 iw = w0; iw < w1; ++iw) {
      i64 j = ((n * p.h + ih) * p.w + iw) * p.c + c;
      float v = x[j];
      if (v > best) {
        best = v;
        at = j;
      }
    }
  }
  return at;
}

extern "C" __global__ void max_pool_f32(const float* x, float* y, Pool p) {
  GRID_LOOP(i, p.n * p.oh * p.ow * p.c) {
    i64 c = i % p.c, t = i / p.c;
    i64 ow = t % p.ow;
    t /= p.ow;
    i64 oh = t % p.oh, n = t / p.oh;
    y[i] = x[window_max(x, p, n, oh, ow, c)];
  }
}

// PoolCover is input element i of a pooling: its image n and channel c,
// and the output rows oh0..oh1 and columns ow0..ow1 whose windows hold
// it, which the gradients gather from.
struct PoolCover {
  i64 n, c, oh0, oh1, ow0, ow1;
};

__device__ __forceinline__ PoolCover pool_cover(const Pool& p, i64 i) {
  PoolCover w;
  w.c = i % p.c;
  i64 t = i / p.c;
  i64 iw = t % p.w;
  t /= p.w;
  i64 ih = t % p.h;
  w.n = t / p.h;
  i64 sh0 = ih + p.pt - p.kh + 1, sw0 = iw + p.pl - p.kw + 1;
  w.oh0 = sh0 <= 0 ? 0 : (sh0 + p.sh - 1) / p.sh;
  w.ow0 = sw0 <= 0 ? 0 : (sw0 + p.sw - 1) / p.sw;
  w.oh1 = imin((ih + p.pt) / p.sh, p.oh - 1);
  w.ow1 = imin((iw + p.pl) / p.sw, p.ow - 1);
  return w;
}

// MaxPoolGrad: one thread per input element, summing, in the CPU's order
// (output rows, then columns), the gradients of the windows whose first
// maximum it is. No atomics: the result is deterministic.
extern "C" __global__ void max_pool_grad_f32(const float* x, const float* dy, float* dx, Pool p) {
  GRID_LOOP(i, p.n * p.h * p.w * p.c) {
    const PoolCover w = pool_cover(p, i);
    const i64 n = w.n, c = w.c;
    float acc = 0.0f;
    for (i64 oh = w.oh0; oh <= w.oh1; ++oh) {
      for (i64 ow = w.ow0; ow <= w.ow1; ++ow) {
        if (window_max(x, p, n, oh, ow, c) == i) acc += dy[((n * p.oh + oh) * p.ow + ow) * p.c + c];
      }
    }
    dx[i] = acc;
  }
}

// AvgPool: the mean of each window clipped to the image (padding not
// counted), summed in the CPU's order (rows, then columns) and scaled by
// the float reciprocal of its size, as the CPU does.
extern "C" __global__ void avg_pool_f32(const float* x, float* y, Pool p) {
  GRID_LOOP(i, p.n * p.oh * p.ow * p.c) {
    i64 c = i % p.c, t = i / p.c;
    i64 ow = t % p.ow;
    t /= p.ow;
    i64 oh = t % p.oh, n = t / p.oh;
    i64 h0 = oh * p.sh - p.pt, w0 = ow * p.sw - p.pl;
    i64 h1 = imin(h0 + p.kh, p.h), w1 = imin(w0 + p.kw, p.w);
    h0 = imax(h0, 0);
    w0 = imax(w0, 0);
    float acc = 0.0f;
    for (i64 ih = h0; ih < h1; ++ih) {
      for (i64 iw = w0; iw < w1; ++iw) acc += x[((n * p.h + ih) * p.w + iw) * p.c + c];
    }
    y[i] = acc * (1.0f / (float)((h1 - h0) * (w1 - w0)));
  }
}

// AvgPoolGrad: one thread per input element gathers, in the CPU's order
// (output rows, then columns), each gradient of a window holding it times
// the reciprocal of the window's size.
extern "C" __global__ void avg_pool_grad_f32(const float* dy, float* dx, Pool p) {
  GRID_LOOP(i, p.n * p.h * p.w * p.c) {
    const PoolCover w = pool_cover(p, i);
    const i64 n = w.n, c = w.c;
    float acc = 0.0f;
    for (i64 oh = w.oh0; oh <= w.oh1; ++oh) {
      i64 h0 = oh * p.sh - p.pt;
      i64 hn = imin(h0 + p.kh, p.h) - imax(h0, 0);
      for (i64 ow = w.ow0; ow <= w.ow1; ++ow) {
        i64 w0 = ow * p.sw - p.pl;
        i64 wn = imin(w0 + p.kw, p.w) - imax(w0, 0);
        acc += dy[((n * p.oh + oh) * p.ow + ow) * p.c + c] * (1.0f / (float)(hn * wn));
      }
    }
    dx[i] = acc;
  }
}
