// Random numbers: Philox4x32-10, as device.Philox (see device/philox.go
// for the stream's layout), TensorFlow's generator. A node's count of runs
// lives in device memory: the sampling kernel reads it and philox_advance,
// queued after it, increments it, so that a step replayed from a CUDA
// graph draws fresh numbers each replay.

__device__ __forceinline__ void philox4x32_10(u32 c[4], u32 k0, u32 k1) {
  for (int r = 0; r < 10; ++r) {
    u64 p0 = (u64)0xD2511F53u * c[0];
    u64 p1 = (u64)0xCD9E8D57u * c[2];
    u32 n0 = (u32)(p1 >> 32) ^ c[1] ^ k0;
    u32 n2 = (u32)(p0 >> 32) ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = (u32)p1;
    c[2] = n2;
    c[3] = (u32)p0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

// The low 23 bits as the mantissa of a float in [1, 2), less one.
__device__ __forceinline__ float uint32_to_float(u32 x) { return __int_as_float((int)(0x3f800000u | (x & 0x7fffffu))) - 1.0f; }

// random_uniform_f32: one thread per block of four elements.
extern "C" __global__ void random_uniform_f32(float* out, i64 n, u64 key, u64 base, const u64* step) {
  u64 hi = base + *step;
  GRID_LOOP(b, (n + 3) / 4) {
    u32 c[4] = {(u32)b, (u32)((u64)b >> 32), (u32)hi, (u32)(hi >> 32)};
    philox4x32_10(c, (u32)key, (u32)(key >> 32));
    for (int j = 0; j < 4; ++j) {
      i64 i = 4 * b + j;
      if (i < n) out[i] = uint32_to_float(c[j]);
    }
  }
}

extern "C" __global__ void philox_advance(u64* step) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *step += 1;
}
