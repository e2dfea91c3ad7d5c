// ---- element-wise tile compute (codegen/tile_ops.py; semantics in ir/values.py) ----
// Needs cuda_fp16.h and cuda_bf16.h (tilescale_compute.cuh includes them before this file).
//
// Values compute in float (16- and 32-bit floats), double or int64_t. Float + - * / use the _rn
// intrinsics, which the compiler never contracts into FMAs, so results are the IEEE operations the
// interpreter (numpy) computes, bit for bit.

// Stored element -> the type its value computes in.
__device__ __forceinline__ float ts_rep(__half x) { return __half2float(x); }
__device__ __forceinline__ float ts_rep(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float ts_rep(float x) { return x; }
__device__ __forceinline__ double ts_rep(double x) { return x; }
__device__ __forceinline__ int64_t ts_rep(int8_t x) { return x; }
__device__ __forceinline__ int64_t ts_rep(int16_t x) { return x; }
__device__ __forceinline__ int64_t ts_rep(int32_t x) { return x; }
__device__ __forceinline__ int64_t ts_rep(int64_t x) { return x; }
__device__ __forceinline__ int64_t ts_rep(uint8_t x) { return x; }
__device__ __forceinline__ int64_t ts_rep(uint16_t x) { return x; }
__device__ __forceinline__ int64_t ts_rep(uint32_t x) { return x; }
__device__ __forceinline__ int64_t ts_rep(uint64_t x) { return (int64_t)x; }

// Integer arithmetic wraps (numpy's int64), without C's undefined signed overflow.
__device__ __forceinline__ int64_t ts_iadd(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
__device__ __forceinline__ int64_t ts_isub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
__device__ __forceinline__ int64_t ts_imul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }
__device__ __forceinline__ int64_t ts_ineg(int64_t a) { return (int64_t)(0ull - (uint64_t)a); }
__device__ __forceinline__ int64_t ts_iabs(int64_t a) { return a < 0 ? ts_ineg(a) : a; }

// max/min propagate NaN, like numpy's maximum/minimum (poison stays visible).
__device__ __forceinline__ float ts_vmax(float a, float b) { return (a > b || a != a) ? a : b; }
__device__ __forceinline__ float ts_vmin(float a, float b) { return (a < b || a != a) ? a : b; }
__device__ __forceinline__ double ts_vmax(double a, double b) { return (a > b || a != a) ? a : b; }
__device__ __forceinline__ double ts_vmin(double a, double b) { return (a < b || a != a) ? a : b; }
__device__ __forceinline__ int64_t ts_vmax(int64_t a, int64_t b) { return a > b ? a : b; }
__device__ __forceinline__ int64_t ts_vmin(int64_t a, int64_t b) { return a < b ? a : b; }

// An element index the verifier could not bound, checked by the thread that uses it. Reached by
// some threads only (a T.Parallel iteration), so it traps without a block barrier.
#if TS_CALL_FREE
__device__ __forceinline__ void ts_elem_fail(const char* where, long long value, long long extent) {
  ts_fail_record(where, "element index outside [0, limit)", value, extent);
}
#else
__device__ __noinline__ void ts_elem_fail(const char* where, long long value, long long extent) {
  printf("jax_tilescale: kernel error at %s (block %u,%u,%u, thread %u): element index %lld outside [0, %lld)\n",
         where, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, value, extent);
  __trap();
}
#endif

__device__ __forceinline__ int64_t ts_elem_index(int64_t i, int64_t extent, const char* where) {
  if (i < 0 || i >= extent) ts_elem_fail(where, i, extent);
  return i;
}

// Atomics on the element types the verifier admits; the value is already of the element's type.
// Native where the hardware has them, else a compare-and-swap loop on the element's bits.
template <typename W, typename F>
__device__ __forceinline__ void ts_atomic_cas(W* p, F f) {
  W old = *reinterpret_cast<volatile W*>(p), assumed;
  do {
    assumed = old;
    old = atomicCAS(p, assumed, f(assumed));
  } while (assumed != old);
}

__device__ __forceinline__ void ts_atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void ts_atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void ts_atomic_add(__half* p, __half v) { atomicAdd(p, v); }
__device__ __forceinline__ void ts_atomic_add(__nv_bfloat16* p, __nv_bfloat16 v) { atomicAdd(p, v); }
__device__ __forceinline__ void ts_atomic_add(int32_t* p, int32_t v) { atomicAdd(p, v); }
__device__ __forceinline__ void ts_atomic_add(uint32_t* p, uint32_t v) { atomicAdd(p, v); }
__device__ __forceinline__ void ts_atomic_add(int64_t* p, int64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), (unsigned long long)v);  // two's complement
}
__device__ __forceinline__ void ts_atomic_add(uint64_t* p, uint64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), (unsigned long long)v);
}

// A tile queue's draw (ir/tile_queue.py): the next ticket of the launch; the drawer of its last ticket (every
// block has drawn its last one, the one past the tiles, by then) sets the counter back to zero for the next launch.
// It orders no memory: a queue only deals tile numbers.
__device__ __forceinline__ int32_t ts_queue_draw(int32_t* counter, int32_t last) {
  const int32_t ticket = atomicAdd(counter, 1);
  if (ticket == last) atomicExch(counter, 0);
  return ticket;
}

__device__ __forceinline__ void ts_atomic_max(int32_t* p, int32_t v) { atomicMax(p, v); }
__device__ __forceinline__ void ts_atomic_min(int32_t* p, int32_t v) { atomicMin(p, v); }
__device__ __forceinline__ void ts_atomic_max(uint32_t* p, uint32_t v) { atomicMax(p, v); }
__device__ __forceinline__ void ts_atomic_min(uint32_t* p, uint32_t v) { atomicMin(p, v); }
__device__ __forceinline__ void ts_atomic_max(int64_t* p, int64_t v) {
  atomicMax(reinterpret_cast<long long*>(p), (long long)v);
}
__device__ __forceinline__ void ts_atomic_min(int64_t* p, int64_t v) {
  atomicMin(reinterpret_cast<long long*>(p), (long long)v);
}
__device__ __forceinline__ void ts_atomic_max(uint64_t* p, uint64_t v) {
  atomicMax(reinterpret_cast<unsigned long long*>(p), (unsigned long long)v);
}
__device__ __forceinline__ void ts_atomic_min(uint64_t* p, uint64_t v) {
  atomicMin(reinterpret_cast<unsigned long long*>(p), (unsigned long long)v);
}

#define TS_ATOMIC_FLOAT_CAS(NAME, T, W, TO_BITS, FROM_BITS, OP)                                              \
  __device__ __forceinline__ void NAME(T* p, T v) {                                                          \
    ts_atomic_cas(reinterpret_cast<W*>(p), [v](W bits) { return TO_BITS(OP(ts_rep(FROM_BITS(bits)), ts_rep(v))); }); \
  }
__device__ __forceinline__ float ts_f32_bits_to(unsigned int b) { return __uint_as_float(b); }
__device__ __forceinline__ unsigned int ts_f32_to_bits(float x) { return __float_as_uint(x); }
__device__ __forceinline__ double ts_f64_bits_to(unsigned long long b) { return __longlong_as_double((long long)b); }
__device__ __forceinline__ unsigned long long ts_f64_to_bits(double x) { return (unsigned long long)__double_as_longlong(x); }
__device__ __forceinline__ __half ts_f16_bits_to(unsigned short b) { return __ushort_as_half(b); }
__device__ __forceinline__ unsigned short ts_f16_to_bits(float x) { return __half_as_ushort(__float2half_rn(x)); }
__device__ __forceinline__ __nv_bfloat16 ts_bf16_bits_to(unsigned short b) { return __ushort_as_bfloat16(b); }
__device__ __forceinline__ unsigned short ts_bf16_to_bits(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
TS_ATOMIC_FLOAT_CAS(ts_atomic_max, float, unsigned int, ts_f32_to_bits, ts_f32_bits_to, ts_vmax)
TS_ATOMIC_FLOAT_CAS(ts_atomic_min, float, unsigned int, ts_f32_to_bits, ts_f32_bits_to, ts_vmin)
TS_ATOMIC_FLOAT_CAS(ts_atomic_max, double, unsigned long long, ts_f64_to_bits, ts_f64_bits_to, ts_vmax)
TS_ATOMIC_FLOAT_CAS(ts_atomic_min, double, unsigned long long, ts_f64_to_bits, ts_f64_bits_to, ts_vmin)
TS_ATOMIC_FLOAT_CAS(ts_atomic_max, __half, unsigned short, ts_f16_to_bits, ts_f16_bits_to, ts_vmax)
TS_ATOMIC_FLOAT_CAS(ts_atomic_min, __half, unsigned short, ts_f16_to_bits, ts_f16_bits_to, ts_vmin)
TS_ATOMIC_FLOAT_CAS(ts_atomic_max, __nv_bfloat16, unsigned short, ts_bf16_to_bits, ts_bf16_bits_to, ts_vmax)
TS_ATOMIC_FLOAT_CAS(ts_atomic_min, __nv_bfloat16, unsigned short, ts_bf16_to_bits, ts_bf16_bits_to, ts_vmin)
#undef TS_ATOMIC_FLOAT_CAS
