// Optimizer updates: a variable and its slots updated in place,
// element-wise, with the hyper-parameters read from device scalars, in
// float32 as the CPU's update rules compute them (kernel/cpu/state.go).
// Every kernel that writes a variable takes the device's fault record
// (faults.go) and writes nothing while it holds a fault: a step that
// failed on the device (an index out of range) changes no variable after
// the fault, as a failed step on the CPU changes none.

extern "C" __global__ void apply_gradient_descent_f32(float* var, const float* alpha, const float* delta, i64 n,
                                                      const Fault* fault) {
  if (fault->tag) return;
  float a = *alpha;
  GRID_LOOP(i, n) { var[i] -= a * delta[i]; }
}

// accum = accum*momentum + grad; var -= lr*accum, or with Nesterov
// var -= grad*lr + accum*momentum*lr.
extern "C" __global__ void apply_momentum_f32(float* var, float* accum, const float* lr, const float* grad,
                                              const float* momentum, i64 n, int nesterov, const Fault* fault) {
  if (fault->tag) return;
  float l = *lr, mo = *momentum;
  GRID_LOOP(i, n) {
    float g = grad[i];
    float a = accum[i] * mo + g;
    accum[i] = a;
    if (nesterov) {
      var[i] -= g * l + a * mo * l;
    } else {
      var[i] -= l * a;
    }
  }
}

// accum += grad^2; var -= lr * grad / sqrt(accum).
extern "C" __global__ void apply_adagrad_f32(float* var, float* accum, const float* lr, const float* grad, i64 n,
                                             const Fault* fault) {
  if (fault->tag) return;
  float l = *lr;
  GRID_LOOP(i, n) {
    float g = grad[i];
    float a = accum[i] + g * g;
    accum[i] = a;
    var[i] -= l * g / sqrtf(a);
  }
}

// ms = rho*ms + (1-rho)*grad^2; mom = momentum*mom + lr*grad/sqrt(ms+epsilon);
// var -= mom.
extern "C" __global__ void apply_rms_prop_f32(float* var, float* ms, float* mom, const float* lr, const float* rho,
                                              const float* momentum, const float* epsilon, const float* grad, i64 n,
                                              const Fault* fault) {
  if (fault->tag) return;
  float l = *lr, r = *rho, mo = *momentum, e = *epsilon;
  GRID_LOOP(i, n) {
    float g = grad[i];
    float m = r * ms[i] + (1.0f - r) * g * g;
    ms[i] = m;
    float u = mo * mom[i] + l * g / sqrtf(m + e);
    mom[i] = u;
    var[i] -= u;
  }
}

// lr_t = lr*sqrt(1-beta2_power)/(1-beta1_power), in double as the CPU's;
// m += (grad-m)*(1-beta1); v += (grad^2-v)*(1-beta2);
// var -= lr_t*m/(sqrt(v)+epsilon).
extern "C" __global__ void apply_adam_f32(float* var, float* m, float* v, const float* beta1_power,
                                          const float* beta2_power, const float* lr, const float* beta1,
                                          const float* beta2, const float* epsilon, const float* grad, i64 n,
                                          const Fault* fault) {
  if (fault->tag) return;
  float lr_t = (float)((double)*lr * sqrt(1.0 - (double)*beta2_power) / (1.0 - (double)*beta1_power));
  float b1 = 1.0f - *beta1, b2 = 1.0f - *beta2, e = *epsilon;
  GRID_LOOP(i, n) {
    float g = grad[i];
    float a = m[i] + (g - m[i]) * b1;
    float b = v[i] + (g * g - v[i]) * b2;
    m[i] = a;
    v[i] = b;
    var[i] -= lr_t * a / (sqrtf(b) + e);
  }
}

// AssignAdd and AssignSub: ref += value (ref -= value with sub) in place,
// and out, the op's output, the new value.
#define ASSIGN_ADD(name, T)                                                                  \
  extern "C" __global__ void name(T* ref, const T* val, T* out, i64 n, int sub, const Fault* fault) { \
    if (fault->tag) return;                                                                  \
    GRID_LOOP(i, n) {                                                                        \
      T v = sub ? (T)(ref[i] - val[i]) : (T)(ref[i] + val[i]);                               \
      ref[i] = v;                                                                            \
      out[i] = v;                                                                            \
    }                                                                                        \
  }
ASSIGN_ADD(assign_add_f32, float)
ASSIGN_ADD(assign_add_i32, i32)
ASSIGN_ADD(assign_add_i64, i64)

// Sparse updates (device.SparseUpdates) run in two launches. The first,
// sparse_rows_<index type>, takes a thread per position j of the n indices:
// it checks idx[j] against the variable's rows (out of range: *bad is set
// and the fault reported, and the second launch updates nothing), and
// links the positions of each index: lead[j] is 1 at its first position,
// next[j] is its next position or -1. The second, the rule's, takes a
// thread per element of the gradient: at a lead position it sums the
// gradient's rows of that index in their order (as the CPU's sparseDedup,
// from 0 when there are several) and updates the element of the row, in
// double as the CPU's sparse rules. Distinct rows, distinct threads: no
// atomics, and the result does not depend on scheduling. Scanning for the
// links is quadratic in n; for many indices the host sorts them instead
// (sparse_keys, bitonic_step, sparse_links below).
#define SPARSE_ROWS(name, I)                                                                                    \
  extern "C" __global__ void name(const I* idx, i64 n, i64 rows, i32* next, i32* lead, i32* bad, Fault* fault, \
                                  int tag) {                                                                    \
    GRID_LOOP(j, n) {                                                                                           \
      I v = idx[j];                                                                                             \
      if (v < 0 || (i64)v >= rows) {                                                                            \
        *bad = 1;                                                                                               \
        report_fault(fault, tag, j, (i64)v, rows);                                                              \
      }                                                                                                         \
      int first = 1;                                                                                            \
      for (i64 k = 0; k < j; ++k) {                                                                             \
        if (idx[k] == v) {                                                                                      \
          first = 0;                                                                                            \
          break;                                                                                                \
        }                                                                                                       \
      }                                                                                                         \
      lead[j] = first;                                                                                          \
      i32 nx = -1;                                                                                              \
      for (i64 k = j + 1; k < n; ++k) {                                                                         \
        if (idx[k] == v) {                                                                                      \
          nx = (i32)k;                                                                                          \
          break;                                                                                                \
        }                                                                                                       \
      }                                                                                                         \
      next[j] = nx;                                                                                             \
    }                                                                                                           \
  }
SPARSE_ROWS(sparse_rows_i32, i32)
SPARSE_ROWS(sparse_rows_i64, i64)

// The links of many indices, in O(n log^2 n) rather than sparse_rows's
// O(n^2): sparse_keys_<index type> checks each index as sparse_rows does
// and makes the key (index << 32 | position), padded to a power of two
// with keys that sort last; bitonic_step passes sort the keys, which
// orders each index's positions; sparse_links reads the links off the
// sorted keys. The host chooses it for many indices (sparseSortFrom).
#define SPARSE_KEYS(name, I)                                                                                      \
  extern "C" __global__ void name(const I* idx, i64 n, i64 rows, u64* keys, i64 total, i32* bad, Fault* fault,   \
                                  int tag) {                                                                      \
    GRID_LOOP(j, total) {                                                                                         \
      if (j >= n) {                                                                                               \
        keys[j] = ~0ull;                                                                                          \
        continue;                                                                                                 \
      }                                                                                                           \
      I v = idx[j];                                                                                               \
      if (v < 0 || (i64)v >= rows) {                                                                              \
        *bad = 1;                                                                                                 \
        report_fault(fault, tag, j, (i64)v, rows);                                                                \
        v = 0;                                                                                                    \
      }                                                                                                           \
      keys[j] = ((u64)v << 32) | (u64)j;                                                                          \
    }                                                                                                             \
  }
SPARSE_KEYS(sparse_keys_i32, i32)
SPARSE_KEYS(sparse_keys_i64, i64)

// One compare-exchange pass of a bitonic sort of total keys (a power of
// two), ascending: stage k, distance j.
extern "C" __global__ void bitonic_step(u64* keys, i64 total, i64 j, i64 k) {
  GRID_LOOP(i, total) {
    i64 l = i ^ j;
    if (l > i) {
      u64 a = keys[i], b = keys[l];
      bool up = (i & k) == 0;
      if (up ? a > b : a < b) {
        keys[i] = b;
        keys[l] = a;
      }
    }
  }
}

extern "C" __global__ void sparse_links(const u64* keys, i64 n, i32* next, i32* lead) {
  GRID_LOOP(i, n) {
    u64 key = keys[i], v = key >> 32;
    i64 pos = (i64)(key & 0xffffffffull);
    lead[pos] = i == 0 || (keys[i - 1] >> 32) != v;
    next[pos] = i + 1 < n && (keys[i + 1] >> 32) == v ? (i32)(keys[i + 1] & 0xffffffffull) : -1;
  }
}

// sparse_elem finds gradient element t's place: false unless its position
// leads its index; else *at is the variable's element and *g the summed
// gradient.
template <class I>
__device__ __forceinline__ bool sparse_elem(i64 t, const I* idx, const i32* next, const i32* lead, const float* grad,
                                            i64 width, i64* at, double* g) {
  i64 j = t / width, e = t - j * width;
  if (!lead[j]) return false;
  float s = grad[t];
  i32 k = next[j];
  if (k >= 0) {
    s = 0.0f + s;
    for (; k >= 0; k = next[k]) s += grad[(i64)k * width + e];
  }
  *at = (i64)idx[j] * width + e;
  *g = (double)s;
  return true;
}

// SPARSE_ARGS are the links' and the sizes' parameters of every rule;
// SPARSE_LOOP opens the loop over the gradient's elements, which the
// rule's body and one more brace close.
#define SPARSE_ARGS const i32 *next, const i32 *lead, const i32 *bad, i64 n, i64 width
#define SPARSE_LOOP(t, at, g)                                   \
  if (*bad || fault->tag) return;                               \
  GRID_LOOP(t, n * width) {                                     \
    i64 at;                                                     \
    double g;                                                   \
    if (!sparse_elem(t, idx, next, lead, grad, width, &at, &g)) \
      continue;

// var -= alpha*grad.
template <class I>
__device__ void sparse_sgd(float* var, const float* alpha, const float* grad, const I* idx, SPARSE_ARGS,
                           const Fault* fault) {
  double a = *alpha;
  SPARSE_LOOP(t, at, g)
  var[at] = (float)((double)var[at] - a * g);
}
}

// accum = accum*momentum + grad; var -= lr*accum, or with Nesterov
// var -= grad*lr + accum*momentum*lr.
template <class I>
__device__ void sparse_momentum(float* var, float* accum, const float* lr, const float* grad, const I* idx,
                                const float* momentum, SPARSE_ARGS, int nesterov, const Fault* fault) {
  double l = *lr, mo = *momentum;
  SPARSE_LOOP(t, at, g)
  double a = (double)accum[at] * mo + g;
  accum[at] = (float)a;
  if (nesterov) {
    var[at] = (float)((double)var[at] - (g * l + a * mo * l));
  } else {
    var[at] = (float)((double)var[at] - l * a);
  }
}
}

// accum += grad^2; var -= lr*grad/sqrt(accum).
template <class I>
__device__ void sparse_adagrad(float* var, float* accum, const float* lr, const float* grad, const I* idx, SPARSE_ARGS,
                               const Fault* fault) {
  double l = *lr;
  SPARSE_LOOP(t, at, g)
  double a = (double)accum[at] + g * g;
  accum[at] = (float)a;
  var[at] = (float)((double)var[at] - l * g / sqrt(a));
}
}

// Lazy Adam: lr_t = lr*sqrt(1-beta2_power)/(1-beta1_power);
// m += (grad-m)*(1-beta1); v += (grad^2-v)*(1-beta2);
// var -= lr_t*m/(sqrt(v)+epsilon), on the rows named only.
template <class I>
__device__ void sparse_adam(float* var, float* m, float* v, const float* beta1_power, const float* beta2_power,
                            const float* lr, const float* beta1, const float* beta2, const float* epsilon,
                            const float* grad, const I* idx, SPARSE_ARGS, const Fault* fault) {
  double b1p = *beta1_power, b2p = *beta2_power, b1 = *beta1, b2 = *beta2, eps = *epsilon;
  double lr_t = (double)*lr * sqrt(1.0 - b2p) / (1.0 - b1p);
  SPARSE_LOOP(t, at, g)
  double mm = (double)m[at], vv = (double)v[at];
  double a = mm + (g - mm) * (1.0 - b1);
  double b = vv + (g * g - vv) * (1.0 - b2);
  m[at] = (float)a;
  v[at] = (float)b;
  var[at] = (float)((double)var[at] - lr_t * a / (sqrt(b) + eps));
}
}

#define SPARSE_KERNELS(sfx, I)                                                                                        \
  extern "C" __global__ void sparse_apply_gradient_descent_f32_##sfx(                                                 \
      float* var, const float* alpha, const float* grad, const I* idx, SPARSE_ARGS, const Fault* fault) {             \
    sparse_sgd<I>(var, alpha, grad, idx, next, lead, bad, n, width, fault);                                           \
  }                                                                                                                   \
  extern "C" __global__ void sparse_apply_momentum_f32_##sfx(float* var, float* accum, const float* lr,               \
                                                             const float* grad, const I* idx, const float* momentum,  \
                                                             SPARSE_ARGS, int nesterov, const Fault* fault) {         \
    sparse_momentum<I>(var, accum, lr, grad, idx, momentum, next, lead, bad, n, width, nesterov, fault);              \
  }                                                                                                                   \
  extern "C" __global__ void sparse_apply_adagrad_f32_##sfx(float* var, float* accum, const float* lr,                \
                                                            const float* grad, const I* idx, SPARSE_ARGS,             \
                                                            const Fault* fault) {                                     \
    sparse_adagrad<I>(var, accum, lr, grad, idx, next, lead, bad, n, width, fault);                                   \
  }                                                                                                                   \
  extern "C" __global__ void sparse_apply_adam_f32_##sfx(                                                             \
      float* var, float* m, float* v, const float* beta1_power, const float* beta2_power, const float* lr,            \
      const float* beta1, const float* beta2, const float* epsilon, const float* grad, const I* idx, SPARSE_ARGS,     \
      const Fault* fault) {                                                                                           \
    sparse_adam<I>(var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad, idx, next, lead, bad, n,     \
                   width, fault);                                                                                     \
  }
SPARSE_KERNELS(i32, i32)
SPARSE_KERNELS(i64, i64)

// Assign: the value copied into the variable and into the output, by
// 4-byte words and then the tail's bytes (device buffers are aligned),
// unless the fault record holds a fault.
extern "C" __global__ void assign_copy(u8* ref, const u8* val, u8* out, i64 n, const Fault* fault) {
  if (fault->tag) return;
  i64 words = n / 4;
  GRID_LOOP(i, words) {
    u32 w = ((const u32*)val)[i];
    ((u32*)ref)[i] = w;
    ((u32*)out)[i] = w;
  }
  GRID_LOOP(i, n - words * 4) {
    i64 b = words * 4 + i;
    ref[b] = val[b];
    out[b] = val[b];
  }
}
