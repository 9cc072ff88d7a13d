// Optimizer updates: a variable and its slots updated in place,
// element-wise, with the hyper-parameters read from device scalars, in
// float32 as the CPU's update rules compute them (kernel/cpu/state.go).

extern "C" __global__ void apply_gradient_descent_f32(float* var, const float* alpha, const float* delta, i64 n) {
  float a = *alpha;
  GRID_LOOP(i, n) { var[i] -= a * delta[i]; }
}

// accum = accum*momentum + grad; var -= lr*accum, or with Nesterov
// var -= grad*lr + accum*momentum*lr.
extern "C" __global__ void apply_momentum_f32(float* var, float* accum, const float* lr, const float* grad,
                                              const float* momentum, i64 n, int nesterov) {
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
extern "C" __global__ void apply_adagrad_f32(float* var, float* accum, const float* lr, const float* grad, i64 n) {
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
                                              const float* momentum, const float* epsilon, const float* grad, i64 n) {
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
                                          const float* beta2, const float* epsilon, const float* grad, i64 n) {
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
