// Element-wise kernels: broadcasting binary ops, unary ops and activation
// gradients, BiasAdd, Cast, SelectV2, AddN, fills, broadcast copies and
// the box copies of Slice, Pad and Concat.

struct AddF { template <class T> __device__ T operator()(T a, T b) const { return a + b; } };
struct SubF { template <class T> __device__ T operator()(T a, T b) const { return a - b; } };
struct MulF { template <class T> __device__ T operator()(T a, T b) const { return a * b; } };
struct SqDiffF { template <class T> __device__ T operator()(T a, T b) const { T d = a - b; return d * d; } };
struct GeF { template <class T> __device__ u8 operator()(T a, T b) const { return a >= b; } };
struct EqF { template <class T> __device__ u8 operator()(T a, T b) const { return a == b; } };
struct GtF { template <class T> __device__ u8 operator()(T a, T b) const { return a > b; } };
struct LtF { template <class T> __device__ u8 operator()(T a, T b) const { return a < b; } };
struct LeF { template <class T> __device__ u8 operator()(T a, T b) const { return a <= b; } };

// Go's max, the CPU kernel's: a NaN operand gives NaN, and +0 is above -0
// (the bits of two equal operands anded: -0 only if both are).
struct MaxF {
  __device__ float operator()(float a, float b) const {
    if (a != a) return a;
    if (b != b) return b;
    if (a == b) return __int_as_float(__float_as_int(a) & __float_as_int(b));
    return a > b ? a : b;
  }
  __device__ i32 operator()(i32 a, i32 b) const { return a > b ? a : b; }
  __device__ i64 operator()(i64 a, i64 b) const { return a > b ? a : b; }
};

// Go's min, the CPU kernel's: a NaN operand gives NaN, and -0 is below +0
// (the bits of two equal operands ored: -0 if either is).
struct MinF {
  __device__ float operator()(float a, float b) const {
    if (a != a) return a;
    if (b != b) return b;
    if (a == b) return __int_as_float(__float_as_int(a) | __float_as_int(b));
    return a < b ? a : b;
  }
  __device__ i32 operator()(i32 a, i32 b) const { return a < b ? a : b; }
  __device__ i64 operator()(i64 a, i64 b) const { return a < b ? a : b; }
};

// Integer division truncates as Go's does; a zero divisor gives 0 rather
// than a trap (the CPU kernel reports it as an error).
struct DivF {
  __device__ float operator()(float a, float b) const { return a / b; }
  __device__ i32 operator()(i32 a, i32 b) const { return b == 0 ? 0 : (b == -1 ? (i32)(0u - (unsigned int)a) : a / b); }
  __device__ i64 operator()(i64 a, i64 b) const { return b == 0 ? 0 : (b == -1 ? (i64)(0ull - (unsigned long long)a) : a / b); }
};

template <class T, class O, class F>
__device__ void binary_impl(const T* a, const T* b, O* o, i64 n, const Bcast& p, F f) {
  GRID_LOOP(i, n) {
    i64 ia, ib;
    bcast_index(p, i, &ia, &ib);
    o[i] = f(a[ia], b[ib]);
  }
}

#define BINARY(name, F, T, O) \
  extern "C" __global__ void name(const T* a, const T* b, O* o, i64 n, Bcast p) { binary_impl<T, O>(a, b, o, n, p, F()); }

#define ARITH(op, F) BINARY(op##_f32, F, float, float) BINARY(op##_i32, F, i32, i32) BINARY(op##_i64, F, i64, i64)
ARITH(add, AddF)
ARITH(sub, SubF)
ARITH(mul, MulF)
ARITH(div, DivF)
ARITH(squared_difference, SqDiffF)
ARITH(maximum, MaxF)
ARITH(minimum, MinF)

#define COMPARE(op, F) BINARY(op##_f32, F, float, u8) BINARY(op##_i32, F, i32, u8) BINARY(op##_i64, F, i64, u8)
COMPARE(greater_equal, GeF)
COMPARE(equal, EqF)
COMPARE(greater, GtF)
COMPARE(less, LtF)
COMPARE(less_equal, LeF)
BINARY(equal_bool, EqF, u8, u8)

// Unary ops.
#define UNARY(name, T, expr) \
  extern "C" __global__ void name(const T* x, T* y, i64 n) { GRID_LOOP(i, n) { T v = x[i]; y[i] = (expr); } }

UNARY(neg_f32, float, -v)
UNARY(neg_i32, i32, -v)
UNARY(neg_i64, i64, -v)
// max(v, 0) as Go's: a NaN stays NaN.
UNARY(relu_f32, float, (v != v) ? v : (v > 0.0f ? v : 0.0f))
UNARY(relu_i32, i32, v > 0 ? v : 0)
UNARY(relu_i64, i64, v > 0 ? v : 0)
UNARY(sigmoid_f32, float, 1.0f / (1.0f + expf(-v)))
// Abs and Sign as the CPU's: Abs negates below 0, so -0 and NaN pass
// unchanged; Sign is 1 or -1, else v itself (0, -0, NaN). An integer's
// Abs wraps at the minimum, as Go's negation does.
UNARY(abs_f32, float, v < 0.0f ? -v : v)
UNARY(abs_i32, i32, v < 0 ? (i32)(0u - (u32)v) : v)
UNARY(abs_i64, i64, v < 0 ? (i64)(0ull - (u64)v) : v)
UNARY(sign_f32, float, v > 0.0f ? 1.0f : (v < 0.0f ? -1.0f : v))
UNARY(sign_i32, i32, (i32)(v > 0) - (i32)(v < 0))
UNARY(sign_i64, i64, (i64)(v > 0) - (i64)(v < 0))

// Square: an integer's wraps, as Go's product does.
UNARY(square_f32, float, v * v)
UNARY(square_i32, i32, (i32)((u32)v * (u32)v))
UNARY(square_i64, i64, (i64)((u64)v * (u64)v))
// Tanh, Exp, Log and Rsqrt in double, rounded once to float, as the CPU's
// (math.Tanh, math.Exp, math.Log, 1/math.Sqrt): the same float for all but
// the rare argument whose double result lies within a double's rounding of
// a float's halfway point, and the CPU's overflows, infinities and NaNs.
UNARY(tanh_f32, float, (float)tanh((double)v))
UNARY(exp_f32, float, (float)exp((double)v))
UNARY(log_f32, float, (float)log((double)v))
UNARY(rsqrt_f32, float, (float)(1.0 / sqrt((double)v)))

// Softplus log(1 + e^v) in double, as the CPU's: v + log(1 + e^-v) above
// 0, so that nothing overflows.
extern "C" __global__ void softplus_f32(const float* x, float* y, i64 n) {
  GRID_LOOP(i, n) {
    double v = (double)x[i];
    y[i] = (float)(v > 0 ? v + log1p(exp(-v)) : log1p(exp(v)));
  }
}

// ReluGrad(dy, y): dy where y > 0 (a NaN y passes dy, as the CPU's).
#define RELU_GRAD(name, T) \
  extern "C" __global__ void name(const T* dy, const T* y, T* dx, i64 n) { GRID_LOOP(i, n) { dx[i] = (y[i] <= 0) ? (T)0 : dy[i]; } }
RELU_GRAD(relu_grad_f32, float)
RELU_GRAD(relu_grad_i32, i32)
RELU_GRAD(relu_grad_i64, i64)

// SigmoidGrad(y, dy) = dy * y * (1 - y).
extern "C" __global__ void sigmoid_grad_f32(const float* y, const float* dy, float* dx, i64 n) {
  GRID_LOOP(i, n) {
    float v = y[i];
    dx[i] = dy[i] * v * (1.0f - v);
  }
}

// TanhGrad(y, dy) = dy * (1 - y * y).
extern "C" __global__ void tanh_grad_f32(const float* y, const float* dy, float* dx, i64 n) {
  GRID_LOOP(i, n) {
    float v = y[i];
    dx[i] = dy[i] * (1.0f - v * v);
  }
}

// BiasAdd: y = x + b over the last axis of c elements.
#define BIAS_ADD(name, T) \
  extern "C" __global__ void name(const T* x, const T* b, T* y, i64 n, i64 c) { GRID_LOOP(i, n) { y[i] = x[i] + b[i % c]; } }
BIAS_ADD(bias_add_f32, float)
BIAS_ADD(bias_add_i32, i32)
BIAS_ADD(bias_add_i64, i64)

// Cast between float32, int32, int64 and bool (u8 0 or 1). Floats to
// integers truncate; anything to bool is x != 0.
template <class D, class S> __device__ __forceinline__ D cast_to(S v) { return (D)v; }
template <> __device__ __forceinline__ u8 cast_to<u8, float>(float v) { return v != 0.0f; }
template <> __device__ __forceinline__ u8 cast_to<u8, i32>(i32 v) { return v != 0; }
template <> __device__ __forceinline__ u8 cast_to<u8, i64>(i64 v) { return v != 0; }

#define CAST(sn, S, dn, D) \
  extern "C" __global__ void cast_##sn##_##dn(const S* x, D* y, i64 n) { GRID_LOOP(i, n) { y[i] = cast_to<D, S>(x[i]); } }
#define CAST_FROM(sn, S) CAST(sn, S, f32, float) CAST(sn, S, i32, i32) CAST(sn, S, i64, i64) CAST(sn, S, bool, u8)
CAST_FROM(f32, float)
CAST_FROM(i32, i32)
CAST_FROM(i64, i64)
CAST(bool, u8, f32, float)
CAST(bool, u8, i32, i32)
CAST(bool, u8, i64, i64)

// SelectV2: cond ? t : e, the three broadcast together (p), by element
// size.
#define SELECT(name, T)                                                                       \
  extern "C" __global__ void name(const u8* c, const T* t, const T* e, T* o, i64 n, Bcast3 p) { \
    GRID_LOOP(i, n) {                                                                         \
      i64 ic, it, ie;                                                                         \
      bcast3_index(p, i, &ic, &it, &ie);                                                      \
      o[i] = c[ic] ? t[it] : e[ie];                                                           \
    }                                                                                         \
  }
SELECT(select_b1, u8)
SELECT(select_b2, unsigned short)
SELECT(select_b4, u32)
SELECT(select_b8, u64)

// AddN sums the k inputs of p (at most ADDN) into o, in their order as the
// CPU does; with acc, onto o's elements, which a longer list's launches
// after the first continue from.
#define ADDN 8
struct AddN {
  u64 x[ADDN];
};
#define ADD_N(name, T)                                                           \
  extern "C" __global__ void name(AddN p, i64 k, T* o, i64 n, int acc) {        \
    GRID_LOOP(i, n) {                                                            \
      T s = acc ? o[i] : ((const T*)p.x[0])[i];                                  \
      for (i64 j = acc ? 0 : 1; j < k; ++j) s += ((const T*)p.x[j])[i];          \
      o[i] = s;                                                                  \
    }                                                                            \
  }
ADD_N(add_n_f32, float)
ADD_N(add_n_i32, i32)
ADD_N(add_n_i64, i64)

// Fills with a value's bits, by element size.
#define FILL(name, T) \
  extern "C" __global__ void name(T* o, i64 n, unsigned long long bits) { T v = (T)bits; GRID_LOOP(i, n) { o[i] = v; } }
FILL(fill_b1, u8)
FILL(fill_b2, unsigned short)
FILL(fill_b4, unsigned int)
FILL(fill_b8, unsigned long long)

// Broadcast copies (BroadcastTo): o[i] = x[sa-offset of i], by element size.
#define BCAST_COPY(name, T) \
  extern "C" __global__ void name(const T* x, T* o, i64 n, Bcast p) { GRID_LOOP(i, n) { i64 ia, ib; bcast_index(p, i, &ia, &ib); o[i] = x[ia]; } }
BCAST_COPY(bcast_b1, u8)
BCAST_COPY(bcast_b2, unsigned short)
BCAST_COPY(bcast_b4, unsigned int)
BCAST_COPY(bcast_b8, unsigned long long)

// Box copies (Slice, Pad, Concat), by element size: element i of a box of
// p.dims moves from x at its sa-offset to o at its sb-offset (Bcast's two
// strides being the source's and the destination's layouts).
#define COPY_BOX(name, T) \
  extern "C" __global__ void name(const T* x, T* o, i64 n, Bcast p) { GRID_LOOP(i, n) { i64 ia, ib; bcast_index(p, i, &ia, &ib); o[ib] = x[ia]; } }
COPY_BOX(copy_box_b1, u8)
COPY_BOX(copy_box_b2, unsigned short)
COPY_BOX(copy_box_b4, u32)
COPY_BOX(copy_box_b8, u64)

// Gather along an axis of dim elements, by element size: output element o
// is [a, j, e] of outer x n x inner, and reads params[a, idx[j], e]. An
// index out of range is reported to the fault record (faults.go), and its
// elements are 0: nothing is read outside params.
#define GATHER(name, T, I)                                                                                   \
  extern "C" __global__ void name(const T* params, const I* idx, T* out, i64 total, i64 n, i64 inner, i64 dim, \
                                  Fault* fault, int tag) {                                                   \
    GRID_LOOP(o, total) {                                                                                    \
      i64 e = o % inner, r = o / inner;                                                                      \
      i64 j = r % n, a = r / n;                                                                              \
      i64 v = (i64)idx[j];                                                                                   \
      if (v < 0 || v >= dim) {                                                                               \
        report_fault(fault, tag, j, v, dim);                                                                 \
        out[o] = (T)0;                                                                                       \
      } else {                                                                                               \
        out[o] = params[(a * dim + v) * inner + e];                                                          \
      }                                                                                                      \
    }                                                                                                        \
  }
GATHER(gather_b1_i32, u8, i32)
GATHER(gather_b1_i64, u8, i64)
GATHER(gather_b2_i32, unsigned short, i32)
GATHER(gather_b2_i64, unsigned short, i64)
GATHER(gather_b4_i32, u32, i32)
GATHER(gather_b4_i64, u32, i64)
GATHER(gather_b8_i32, u64, i32)
GATHER(gather_b8_i64, u64, i64)
