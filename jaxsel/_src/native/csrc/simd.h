// SIMD helpers shared by the greedy kernels: fixed-width vectors from GCC/Clang vector
// extensions, with AVX-512 instructions where the compiler targets them and portable code
// elsewhere (the same results either way). Every reduction adds its lanes in one fixed order,
// so a gain is the same bits whichever code path or CPU variant computes it.
#ifndef JAXSEL_CSRC_SIMD_H_
#define JAXSEL_CSRC_SIMD_H_

#include <cstdint>
#include <cstring>
#include <type_traits>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace jaxsel {

typedef float F8 __attribute__((vector_size(32)));

// Transposes the 8 x 8 block whose rows are r[0..7] in registers.
inline void Transpose8(F8* r) {
  F8 t0 = __builtin_shufflevector(r[0], r[1], 0, 8, 1, 9, 4, 12, 5, 13);
  F8 t1 = __builtin_shufflevector(r[0], r[1], 2, 10, 3, 11, 6, 14, 7, 15);
  F8 t2 = __builtin_shufflevector(r[2], r[3], 0, 8, 1, 9, 4, 12, 5, 13);
  F8 t3 = __builtin_shufflevector(r[2], r[3], 2, 10, 3, 11, 6, 14, 7, 15);
  F8 t4 = __builtin_shufflevector(r[4], r[5], 0, 8, 1, 9, 4, 12, 5, 13);
  F8 t5 = __builtin_shufflevector(r[4], r[5], 2, 10, 3, 11, 6, 14, 7, 15);
  F8 t6 = __builtin_shufflevector(r[6], r[7], 0, 8, 1, 9, 4, 12, 5, 13);
  F8 t7 = __builtin_shufflevector(r[6], r[7], 2, 10, 3, 11, 6, 14, 7, 15);
  F8 u0 = __builtin_shufflevector(t0, t2, 0, 1, 8, 9, 4, 5, 12, 13);
  F8 u1 = __builtin_shufflevector(t0, t2, 2, 3, 10, 11, 6, 7, 14, 15);
  F8 u2 = __builtin_shufflevector(t1, t3, 0, 1, 8, 9, 4, 5, 12, 13);
  F8 u3 = __builtin_shufflevector(t1, t3, 2, 3, 10, 11, 6, 7, 14, 15);
  F8 u4 = __builtin_shufflevector(t4, t6, 0, 1, 8, 9, 4, 5, 12, 13);
  F8 u5 = __builtin_shufflevector(t4, t6, 2, 3, 10, 11, 6, 7, 14, 15);
  F8 u6 = __builtin_shufflevector(t5, t7, 0, 1, 8, 9, 4, 5, 12, 13);
  F8 u7 = __builtin_shufflevector(t5, t7, 2, 3, 10, 11, 6, 7, 14, 15);
  r[0] = __builtin_shufflevector(u0, u4, 0, 1, 2, 3, 8, 9, 10, 11);
  r[4] = __builtin_shufflevector(u0, u4, 4, 5, 6, 7, 12, 13, 14, 15);
  r[1] = __builtin_shufflevector(u1, u5, 0, 1, 2, 3, 8, 9, 10, 11);
  r[5] = __builtin_shufflevector(u1, u5, 4, 5, 6, 7, 12, 13, 14, 15);
  r[2] = __builtin_shufflevector(u2, u6, 0, 1, 2, 3, 8, 9, 10, 11);
  r[6] = __builtin_shufflevector(u2, u6, 4, 5, 6, 7, 12, 13, 14, 15);
  r[3] = __builtin_shufflevector(u3, u7, 0, 1, 2, 3, 8, 9, 10, 11);
  r[7] = __builtin_shufflevector(u3, u7, 4, 5, 6, 7, 12, 13, 14, 15);
}
// 64-byte vectors (GCC/Clang vector extensions): 16 floats or 8 doubles, one AVX-512
// register (two AVX2 ones). Accumulators live in registers; the tail is zero-padded (a
// zero entry adds max(0, 0·w − 0) = 0), so every row is reduced in the same fixed order.
template <typename T>
struct Vec {
  typedef T type __attribute__((vector_size(64)));
  static constexpr int64_t kLanes = 64 / sizeof(T);
};

template <typename V>
inline V Load(const void* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

// Every lane x.
template <typename V, typename T>
inline V Splat(T x) {
  return x - V{};  // x − (+0) is x exactly (−0 included): a broadcast
}

// a > b ? a : b (kMax) or a < b ? a : b lane by lane, b where either is NaN: MAXPS / MINPS
// exactly. A 64-byte vector without AVX-512 goes as two 32-byte AVX2 halves: GCC lowers its
// compare-and-select lane by lane otherwise (measured 5x slower).
template <bool kMax, typename V>
inline V Select(V a, V b) {
#if defined(__AVX2__) && !defined(__AVX512F__)
  if constexpr (sizeof(V) == 32 && sizeof(a[0]) == 4) {
    const __m256 x = reinterpret_cast<const __m256&>(a), y = reinterpret_cast<const __m256&>(b);
    const __m256 r = kMax ? _mm256_max_ps(x, y) : _mm256_min_ps(x, y);
    return reinterpret_cast<const V&>(r);
  }
  if constexpr (sizeof(V) == 32 && sizeof(a[0]) == 8) {
    const __m256d x = reinterpret_cast<const __m256d&>(a), y = reinterpret_cast<const __m256d&>(b);
    const __m256d r = kMax ? _mm256_max_pd(x, y) : _mm256_min_pd(x, y);
    return reinterpret_cast<const V&>(r);
  }
  if constexpr (sizeof(V) == 64) {  // two halves
    typedef std::remove_reference_t<decltype(a[0])> T;
    typedef T H __attribute__((vector_size(32)));
    H al, ah, bl, bh;
    std::memcpy(&al, &a, 32), std::memcpy(&ah, reinterpret_cast<const char*>(&a) + 32, 32);
    std::memcpy(&bl, &b, 32), std::memcpy(&bh, reinterpret_cast<const char*>(&b) + 32, 32);
    const H rl = Select<kMax>(al, bl), rh = Select<kMax>(ah, bh);
    V r;
    std::memcpy(&r, &rl, 32), std::memcpy(reinterpret_cast<char*>(&r) + 32, &rh, 32);
    return r;
  }
#endif
  if constexpr (kMax) return a > b ? a : b;
  else return a < b ? a : b;
}
template <typename V>
inline V Max(V a, V b) { return Select<true>(a, b); }
template <typename V>
inline V Min(V a, V b) { return Select<false>(a, b); }

// d > 0 ? d : +0 lane by lane (NaN and −0 give +0): one MAXPS, whose (a > b ? a : b) is this
// exactly with b = +0; GCC otherwise emits a compare and a masked move.
template <typename V>
inline V Relu(V d) {
#if defined(__AVX512F__)
  if constexpr (sizeof(V) == 64 && sizeof(d[0]) == 4) {
    __m512 r = _mm512_max_ps(reinterpret_cast<__m512&>(d), _mm512_setzero_ps());
    return reinterpret_cast<V&>(r);
  }
  if constexpr (sizeof(V) == 64 && sizeof(d[0]) == 8) {
    __m512d r = _mm512_max_pd(reinterpret_cast<__m512d&>(d), _mm512_setzero_pd());
    return reinterpret_cast<V&>(r);
  }
#endif
  return Max(d, V{});
}

// Whether any lane of x is above t.
template <typename V, typename T>
inline bool AnyAbove(V x, T t) {
#if defined(__AVX512F__)
  if constexpr (sizeof(V) == 64 && sizeof(T) == 4)
    return _mm512_cmp_ps_mask(reinterpret_cast<__m512&>(x), _mm512_set1_ps(t), _CMP_GT_OQ) != 0;
  if constexpr (sizeof(V) == 64 && sizeof(T) == 8)
    return _mm512_cmp_pd_mask(reinterpret_cast<__m512d&>(x), _mm512_set1_pd(t), _CMP_GT_OQ) != 0;
#endif
  bool any = false;
  for (size_t l = 0; l < sizeof(V) / sizeof(T); ++l) any |= x[l] > t;
  return any;
}

// The first m < kLanes entries of x, zeros after (a masked load where AVX-512 has one).
template <typename T>
inline typename Vec<T>::type LoadTail(const T* x, int64_t m) {
  using V = typename Vec<T>::type;
#if defined(__AVX512F__)
  if constexpr (sizeof(T) == 4) {
    __m512 v = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << m) - 1), x);
    return reinterpret_cast<V&>(v);
  } else {
    __m512d v = _mm512_maskz_loadu_pd(static_cast<__mmask8>((1u << m) - 1), x);
    return reinterpret_cast<V&>(v);
  }
#else
  V v = {};
  for (int64_t l = 0; l < m; ++l) v[l] = x[l];
  return v;
#endif
}

// Σ of a vector's lanes by halving: the same tree for every call.
template <typename T>
inline T Fold(typename Vec<T>::type a) {
  typedef T h32 __attribute__((vector_size(32)));
  typedef T h16 __attribute__((vector_size(16)));
  h32 lo, hi;
  std::memcpy(&lo, &a, 32);
  std::memcpy(&hi, reinterpret_cast<char*>(&a) + 32, 32);
  lo += hi;
  h16 l2, h2;
  std::memcpy(&l2, &lo, 16);
  std::memcpy(&h2, reinterpret_cast<char*>(&lo) + 16, 16);
  l2 += h2;
  T out[16 / sizeof(T)];
  std::memcpy(out, &l2, 16);
  T s = 0;
  for (size_t l = 0; l < 16 / sizeof(T); ++l) s += out[l];
  return s;
}

// A row's lanes at p as stored (float32/64); byte rows (byte_bounds.h) widen to float32.
template <typename T>
inline typename Vec<T>::type LoadRow(const T* p) {
  return Load<typename Vec<T>::type>(p);
}
template <typename T>
inline typename Vec<T>::type LoadRowTail(const T* p, int64_t m) {
  return LoadTail<T>(p, m);
}
}  // namespace jaxsel

#endif  // JAXSEL_CSRC_SIMD_H_
