// Host stand-ins for the CUDA intrinsics jax_tilescale/codegen/tilescale_tile_ops.cuh calls (tests only): the
// header's own text follows this file, so the element-wise statements a kernel runs on its accumulator (FP8's
// scales, a bias) are the generated code's, computed on the host. Float operations round to nearest (g++ in ISO
// mode does not contract them), atomics are std::atomic_ref operations on the element.
#include <math.h>  // expf, exp2f, logf, ...: the host's, within an ulp or two of the GPU's

#include <atomic>
#include <cmath>

inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
[[noreturn]] inline void __trap() { std::abort(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

template <typename To, typename From>
inline To ts_emu_bits(From x) {
  static_assert(sizeof(To) == sizeof(From), "same width");
  To out;
  std::memcpy(&out, &x, sizeof out);
  return out;
}
inline float __uint_as_float(unsigned int b) { return ts_emu_bits<float>(b); }
inline float __int_as_float(int b) { return ts_emu_bits<float>(b); }
inline int __float_as_int(float x) { return ts_emu_bits<int>(x); }
inline unsigned int __float_as_uint(float x) { return ts_emu_bits<unsigned int>(x); }
inline double __longlong_as_double(long long b) { return ts_emu_bits<double>(b); }
inline long long __double_as_longlong(double x) { return ts_emu_bits<long long>(x); }

template <typename T, typename F>
inline T ts_emu_atomic(T* p, F f) {  // the old value; `f` the new value from the old
  std::atomic_ref<T> r(*p);
  T old = r.load();
  while (!r.compare_exchange_weak(old, f(old))) {
  }
  return old;
}
template <typename T>
inline T atomicCAS(T* p, T compare, T value) {
  std::atomic_ref<T>(*p).compare_exchange_strong(compare, value);
  return compare;
}
template <typename T>
inline T atomicAdd(T* p, T v) { return ts_emu_atomic(p, [v](T old) { return static_cast<T>(old + v); }); }
inline __half atomicAdd(__half* p, __half v) {
  auto* bits = reinterpret_cast<unsigned short*>(p);
  return ts_emu_bits<__half>(ts_emu_atomic(bits, [v](unsigned short old) {
    return ts_emu_bits<unsigned short>(__float2half_rn(__half2float(ts_emu_bits<__half>(old)) + __half2float(v)));
  }));
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) {
  auto* bits = reinterpret_cast<unsigned short*>(p);
  return ts_emu_bits<__nv_bfloat16>(ts_emu_atomic(bits, [v](unsigned short old) {
    return ts_emu_bits<unsigned short>(
        __float2bfloat16_rn(__bfloat162float(ts_emu_bits<__nv_bfloat16>(old)) + __bfloat162float(v)));
  }));
}
template <typename T>
inline T atomicExch(T* p, T v) { return std::atomic_ref<T>(*p).exchange(v); }
template <typename T>
inline T atomicMax(T* p, T v) { return ts_emu_atomic(p, [v](T old) { return old > v ? old : v; }); }
template <typename T>
inline T atomicMin(T* p, T v) { return ts_emu_atomic(p, [v](T old) { return old < v ? old : v; }); }
