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

// The cover of the empty set (every entry +0) for RowGain: its loads and subtractions skipped,
// x − (+0) being x exactly (−0 included), so the gains are the same bits as against zeros.
struct EmptyCover {};

template <typename V, typename T>
inline V LoadCover(const T* c, int64_t at) {
  return Load<V>(c + at);
}
template <typename V>
inline V LoadCover(EmptyCover, int64_t) {
  return V{};
}
template <typename V, typename T>
inline V LoadCoverTail(const T* c, int64_t m) {
  return LoadTail<T>(c, m);
}
template <typename V>
inline V LoadCoverTail(EmptyCover, int64_t) {
  return V{};
}
template <typename V, typename C>
inline V Uncovered(V x, V c) {
  if constexpr (std::is_same<C, EmptyCover>::value) return x;
  return x - c;
}
template <typename T>
inline const T* Shift(const T* c, int64_t i) {
  return c + i;
}
inline EmptyCover Shift(EmptyCover c, int64_t) { return c; }

#if defined(__AVX2__) && !defined(__AVX512F__)
// RowGain of a row of T with AVX2: each 64-byte vector of the portable code below as its two
// 32-byte halves (lanes [0, L/2) and [L/2, L)), so that the accumulators stay in registers (GCC
// keeps a 64-byte vector in memory where the target has no such registers: 2.5x slower). The
// same terms in the same lanes, added in the same order: the same bits.
template <typename T, bool kWeighted, typename C>
inline T RowGainHalves(const T* __restrict p, C c, T w, int64_t n) {
  typedef T H __attribute__((vector_size(32)));
  using V = typename Vec<T>::type;
  constexpr int64_t L = Vec<T>::kLanes, HL = L / 2;
  const H zero = {};
  const H wv = zero + w;
  H a0l = zero, a0h = zero, a1l = zero, a1h = zero;
  auto term = [&](int64_t at) {
    const H d = Uncovered<H, C>(kWeighted ? wv * Load<H>(p + at) : Load<H>(p + at), LoadCover<H>(c, at));
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
    a1 += Relu(Uncovered<V, C>(kWeighted ? (vz + w) * x : x, LoadCoverTail<V>(Shift(c, i), n - i)));
  }
  return Fold<T>(a0 + a1);
}
#endif

// Σ_i max(0, w·p[i] − c[i]); p a row of T, or a ByteRow (T = float); c the cover [n] (const T*)
// or EmptyCover.
template <typename T, bool kWeighted, typename P, typename C>
inline T RowGain(P p, C c, T w, int64_t n) {
#if defined(__AVX2__) && !defined(__AVX512F__)
  if constexpr (std::is_pointer<P>::value) return RowGainHalves<T, kWeighted, C>(p, c, w, n);
#endif
  using V = typename Vec<T>::type;
  constexpr int64_t L = Vec<T>::kLanes;
  const V zero = {};
  const V wv = zero + w;
  V a0 = zero, a1 = zero;
  auto term = [&](V x, V cv) {
    V d = Uncovered<V, C>(kWeighted ? wv * x : x, cv);
    return Relu(d);
  };
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    a0 += term(LoadRow(p + i), LoadCover<V>(c, i));
    a1 += term(LoadRow(p + i + L), LoadCover<V>(c, i + L));
  }
  if (i + L <= n) {
    a0 += term(LoadRow(p + i), LoadCover<V>(c, i));
    i += L;
  }
  if (i < n) a1 += term(LoadRowTail(p + i, n - i), LoadCoverTail<V>(Shift(c, i), n - i));
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
