// Reductions: Sum, Mean, SumToShape and BiasAddGrad through one plan
// (struct Reduce), and ArgMax.
//
// One block per output element: its threads stride over the reduced
// elements and combine in shared memory. Float sums accumulate in double,
// so the result is the exactly rounded sum for any realistic count, within
// the CPU's own rounding of it.

__device__ __forceinline__ float finish_sum(double acc, i64 count, double scale, int mean) {
  return mean ? (float)(acc * scale) : (float)acc;
}
// Integer sums wrap as the CPU's do in their own type; means truncate, and
// an empty one is 0.
template <class T>
__device__ __forceinline__ T finish_int(i64 acc, i64 count, int mean) {
  T s = (T)acc;
  if (!mean) return s;
  return count == 0 ? (T)0 : (T)(s / (T)count);
}

#define REDUCE_SUM(name, T, A, FINISH) \
  extern "C" __global__ void name(const T* x, T* o, i64 nout, i64 count, Reduce p, double scale, int mean) { \
    __shared__ A sh[THREADS]; \
    for (i64 out = blockIdx.x; out < nout; out += gridDim.x) { \
      i64 base = plan_offset(out, p.krank, p.kdims, p.kstr); \
      A acc = 0; \
      for (i64 r = threadIdx.x; r < count; r += blockDim.x) { \
        acc += (A)x[base + plan_offset(r, p.rrank, p.rdims, p.rstr)]; \
      } \
      acc = block_sum<A>(acc, sh); \
      if (threadIdx.x == 0) o[out] = FINISH; \
    } \
  }

REDUCE_SUM(reduce_sum_f32, float, double, finish_sum(acc, count, scale, mean))
REDUCE_SUM(reduce_sum_i32, i32, i64, finish_int<i32>(acc, count, mean))
REDUCE_SUM(reduce_sum_i64, i64, i64, finish_int<i64>(acc, count, mean))

// The same with a thread per output element, for short reductions (a sum
// over a few columns of many rows), where a block per output would leave
// most of its threads idle.
#define REDUCE_SUM_SHORT(name, T, A, FINISH) \
  extern "C" __global__ void name(const T* x, T* o, i64 nout, i64 count, Reduce p, double scale, int mean) { \
    GRID_LOOP(out, nout) { \
      i64 base = plan_offset(out, p.krank, p.kdims, p.kstr); \
      A acc = 0; \
      for (i64 r = 0; r < count; ++r) acc += (A)x[base + plan_offset(r, p.rrank, p.rdims, p.rstr)]; \
      o[out] = FINISH; \
    } \
  }

REDUCE_SUM_SHORT(reduce_sum_short_f32, float, double, finish_sum(acc, count, scale, mean))
REDUCE_SUM_SHORT(reduce_sum_short_i32, i32, i64, finish_int<i32>(acc, count, mean))
REDUCE_SUM_SHORT(reduce_sum_short_i64, i64, i64, finish_int<i64>(acc, count, mean))

// ArgMax over the middle axis of x viewed as [A, R, B]: the first index of
// the maximum (v > best, so a NaN wins only where it comes first, as on the
// CPU).
#define ARGMAX(name, T, I) \
  extern "C" __global__ void name(const T* x, I* o, i64 A, i64 R, i64 B) { \
    GRID_LOOP(i, A * B) { \
      i64 a = i / B, b = i % B; \
      const T* row = x + a * R * B + b; \
      T best = row[0]; \
      i64 bi = 0; \
      for (i64 r = 1; r < R; ++r) { \
        T v = row[r * B]; \
        if (v > best) { best = v; bi = r; } \
      } \
      o[i] = (I)bi; \
    } \
  }

ARGMAX(argmax_f32_i64, float, i64)
ARGMAX(argmax_f32_i32, float, i32)
ARGMAX(argmax_i32_i64, i32, i64)
ARGMAX(argmax_i32_i32, i32, i32)
ARGMAX(argmax_i64_i64, i64, i64)
ARGMAX(argmax_i64_i32, i64, i32)
