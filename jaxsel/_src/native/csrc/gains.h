// A candidate's marginal gain, reduced from its similarity row: the one code every greedy path
// (the gains kernel, dense and lazy steps, the item-major gainer's lanes) agrees with bit for
// bit. Terms go to two accumulators in a fixed pattern and are folded by one tree (Fold).
#ifndef JAXSEL_CSRC_GAINS_H_
#define JAXSEL_CSRC_GAINS_H_

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "simd.h"

namespace jaxsel {

#if defined(__AVX2__) && !defined(__AVX512F__)
// RowGain of a row of T with AVX2: each 64-byte vector of the portable code below as its two
// 32-byte halves (lanes [0, L/2) and [L/2, L)), so that the accumulators stay in registers (GCC
// keeps a 64-byte vector in memory where the target has no such registers: 2.5x slower). The
// same terms in the same lanes, added in the same order: the same bits.
template <typename T, bool kWeighted>
inline T RowGainHalves(const T* __restrict p, const T* __restrict c, T w, int64_t n) {
  typedef T H __attribute__((vector_size(32)));
  using V = typename Vec<T>::type;
  constexpr int64_t L = Vec<T>::kLanes, HL = L / 2;
  const H zero = {};
  const H wv = zero + w;
  H a0l = zero, a0h = zero, a1l = zero, a1h = zero;
  auto term = [&](int64_t at) {
    const H d = (kWeighted ? wv * Load<H>(p + at) : Load<H>(p + at)) - Load<H>(c + at);
    return Max(d, zero);  // MAXPS: Relu's d > 0 ? d : +0
  };
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    a0l += term(i), a0h += term(i + HL);
    a1l += term(i + L), a1h += term(i + L + HL);
  }
  if (i + L <= n) {
    a0l += term(i), a0h += term(i + HL);
    i += L;
  }
  V a0, a1;
  std::memcpy(&a0, &a0l, 32), std::memcpy(reinterpret_cast<char*>(&a0) + 32, &a0h, 32);
  std::memcpy(&a1, &a1l, 32), std::memcpy(reinterpret_cast<char*>(&a1) + 32, &a1h, 32);
  if (i < n) {
    const V vz = {};
    const V x = LoadTail<T>(p + i, n - i);
    a1 += Relu((kWeighted ? (vz + w) * x : x) - LoadTail<T>(c + i, n - i));
  }
  return Fold<T>(a0 + a1);
}
#endif

// Σ_i max(0, w·p[i] − c[i]); p a row of T, or a ByteRow (T = float).
template <typename T, bool kWeighted, typename P>
inline T RowGain(P p, const T* __restrict c, T w, int64_t n) {
#if defined(__AVX2__) && !defined(__AVX512F__)
  if constexpr (std::is_pointer<P>::value) return RowGainHalves<T, kWeighted>(p, c, w, n);
#endif
  using V = typename Vec<T>::type;
  constexpr int64_t L = Vec<T>::kLanes;
  const V zero = {};
  const V wv = zero + w;
  V a0 = zero, a1 = zero;
  auto term = [&](V x, V cv) {
    V d = (kWeighted ? wv * x : x) - cv;
    return Relu(d);
  };
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    a0 += term(LoadRow(p + i), Load<V>(c + i));
    a1 += term(LoadRow(p + i + L), Load<V>(c + i + L));
  }
  if (i + L <= n) {
    a0 += term(LoadRow(p + i), Load<V>(c + i));
    i += L;
  }
  if (i < n) a1 += term(LoadRowTail(p + i, n - i), LoadTail<T>(c + i, n - i));
  return Fold<T>(a0 + a1);
}

// Σ_i max(0, min(r[i], p[i]) − c[i]): saturated coverage, c = min(r, best so far).
template <typename T>
inline T RowGainSat(const T* __restrict p, const T* __restrict r, const T* __restrict c, int64_t n) {
  using V = typename Vec<T>::type;
  constexpr int64_t L = Vec<T>::kLanes;
  const V zero = {};
  V a0 = zero, a1 = zero;
  auto term = [&](V x, V rv, V cv) {
    V m = Min(x, rv);
    V d = m - cv;
    return Relu(d);
  };
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    a0 += term(Load<V>(p + i), Load<V>(r + i), Load<V>(c + i));
    a1 += term(Load<V>(p + i + L), Load<V>(r + i + L), Load<V>(c + i + L));
  }
  if (i + L <= n) {
    a0 += term(Load<V>(p + i), Load<V>(r + i), Load<V>(c + i));
    i += L;
  }
  if (i < n) a1 += term(LoadTail<T>(p + i, n - i), LoadTail<T>(r + i, n - i), LoadTail<T>(c + i, n - i));
  return Fold<T>(a0 + a1);
}

// Σ_i x[i].
template <typename T>
inline T Sum(const T* __restrict x, int64_t n) {
  using V = typename Vec<T>::type;
  constexpr int64_t L = Vec<T>::kLanes;
  V a = {};
  int64_t i = 0;
  for (; i + L <= n; i += L) a += Load<V>(x + i);
  if (i < n) a += LoadTail<T>(x + i, n - i);
  return Fold<T>(a);
}
}  // namespace jaxsel

#endif  // JAXSEL_CSRC_GAINS_H_
