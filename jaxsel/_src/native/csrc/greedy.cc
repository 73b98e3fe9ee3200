// Greedy's gain kernel for facility location / coverage, as an XLA FFI handler (CPU).
//
//   gains[b, m] = Σ_q Σ_i max(0, w[b, q, m] · rows[b, idx[b, m], i] − cover[b, q, i])
//
// rows [..., R, N] (candidate-major similarity), cover [..., Q, N], w [..., Q, M] (ignored
// unless `weighted`), idx [..., M] int32 (rows to evaluate) → gains [..., M]. Leading batch
// axes broadcast (size 1 against B: jax.vmap's "expand_dims"). Rows are spread over XLA's
// intra-op thread pool in chunks; each row is reduced by the same code whatever its chunk,
// so a candidate's gain never depends on which other candidates were evaluated with it.

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif
#include <utility>
#include <limits>
#include <memory>
#include <mutex>
#include <cstdlib>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#include <type_traits>
#include <vector>

#include "parallel.h"
#include "xla/ffi/api/ffi.h"

namespace jaxsel {

typedef float F8 __attribute__((vector_size(32)));

// Columns of the 8 x 8 block whose rows are r[0..7].
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

}  // namespace jaxsel

namespace ffi = xla::ffi;
using jaxsel::ParallelFor;

namespace {

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
  const V zero = {};
  return d > zero ? d : zero;
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

// A row's lanes at p as stored (float32/64); the byte rows below widen to float32.
template <typename T>
inline typename Vec<T>::type LoadRow(const T* p) {
  return Load<typename Vec<T>::type>(p);
}
template <typename T>
inline typename Vec<T>::type LoadRowTail(const T* p, int64_t m) {
  return LoadTail<T>(p, m);
}

// Byte upper bounds of float32 rows (lazy greedy on large problems): a row x of N is kept as
// bytes q[i] and one power-of-two step with q[i]·step ≥ x[i] exactly (ByteRoundUp). RowGain
// of such a row (`ByteRow`) is an upper bound of RowGain of the float32 row: each lane's value
// q[i]·step is exact (8 bits times a power of two), so every term is ≥ the float32 row's term
// for the same i (each operation rounds monotonically), and they are summed in the same order
// (same lanes, same accumulators, same Fold), where every rounded addition is monotone too. A
// quarter of the float32 row's bytes: the bound reads N bytes from memory instead of 4N.
struct ByteRow {
  const uint8_t* q;
  float step;
  ByteRow operator+(int64_t i) const { return {q + i, step}; }
};

inline Vec<float>::type LoadRow(ByteRow r) {
  using V = Vec<float>::type;
  V v;
#if defined(__AVX512F__)
  const __m512 x = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r.q))));
  std::memcpy(&v, &x, sizeof(V));
#elif defined(__AVX2__)
  const __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(r.q))));
  const __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(r.q + 8))));
  std::memcpy(&v, &lo, 32);
  std::memcpy(reinterpret_cast<char*>(&v) + 32, &hi, 32);
#else
  for (int l = 0; l < 16; ++l) v[l] = static_cast<float>(r.q[l]);
#endif
  return v * r.step;
}

inline Vec<float>::type LoadRowTail(ByteRow r, int64_t m) {
  Vec<float>::type v = {};
  for (int64_t l = 0; l < m; ++l) v[l] = static_cast<float>(r.q[l]) * r.step;
  return v;
}

// Writes row x [n] rounded up to bytes q [n] and returns its step: the least power of two with
// 255·step ≥ max x, and q[i] = ⌈x[i] / step⌉ clamped to [0, 255] (at least 1 where x[i] > 0, so
// that an x[i]/step below float's range still gets q[i]·step ≥ x[i]; elsewhere dividing by a
// power of two is exact). Returns +inf, with q unwritten, for a row the bytes cannot bound: a
// NaN or ±inf entry, or a largest entry below 2^-100 (no float step then); 0 for a row ≤ 0.
inline float ByteRoundUp(const float* __restrict x, uint8_t* __restrict q, int64_t n) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  using V = Vec<float>::type;
  constexpr int64_t L = Vec<float>::kLanes;
  V vmax = {}, vbad = {};  // vbad sums x − x: 0, or NaN once an entry is NaN or ±inf
  int64_t j = 0;
  for (; j + L <= n; j += L) {
    const V v = Load<V>(x + j);
    vmax = v > vmax ? v : vmax;
    vbad += v - v;
  }
  float mx = 0;
  bool bad = false;
  for (int64_t l = 0; l < L; ++l) mx = vmax[l] > mx ? vmax[l] : mx, bad |= !(vbad[l] == 0.0f);
  for (; j < n; ++j) mx = x[j] > mx ? x[j] : mx, bad |= !(x[j] - x[j] == 0.0f);
  if (bad) return kInf;
  if (mx == 0.0f) {
    std::memset(q, 0, n);
    return 0.0f;
  }
  if (mx < 0x1p-100f) return kInf;
  int ex = 0;
  std::frexp(mx, &ex);  // mx = m · 2^ex, m in [0.5, 1)
  float step = std::ldexp(1.0f, ex - 8);
  while (255.0 * static_cast<double>(step) < static_cast<double>(mx)) step *= 2.0f;
  const float inv = 1.0f / step;  // a power of two: exact
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 vinv = _mm512_set1_ps(inv), zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f),
               top = _mm512_set1_ps(255.0f);
  for (; i + 16 <= n; i += 16) {
    const __m512 xv = _mm512_loadu_ps(x + i);
    __m512 y = _mm512_roundscale_ps(_mm512_mul_ps(xv, vinv), _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(xv, zero, _CMP_GT_OQ) & _mm512_cmp_ps_mask(y, one, _CMP_LT_OQ), one);
    y = _mm512_min_ps(_mm512_max_ps(y, zero), top);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(y)));
  }
#endif
  for (; i < n; ++i) {
    float y = std::ceil(x[i] * inv);
    y = x[i] > 0.0f && y < 1.0f ? 1.0f : y;
    y = y < 0.0f ? 0.0f : (y > 255.0f ? 255.0f : y);
    q[i] = static_cast<uint8_t>(static_cast<int32_t>(y));
  }
  return step;
}

// Coverage (one query, no weights) bounds a ByteRow in whole numbers: with the cover c as
// bytes cq[i] = min(255, ⌊c[i] / step⌋) (CoverBytes, once per step for the rows' common step),
// (x[i] − c[i])⁺ ≤ step · (q[i] − cq[i])⁺ exactly, so step · Σ_i (q[i] − cq[i])⁺ bounds the
// exact sum of RowGain's terms; RowGain's float32 result exceeds that sum by at most a factor
// (1 + 2^-24)^(N/32 + 10) (each term is rounded once, then added at most N/32 + 9 times: its
// accumulator, a0 + a1, and Fold), so ByteExcessBound's margin (1 + (N/16 + 32)·2^-23) keeps the
// bound above the gain. Σ (q − cq)⁺ is a saturating byte subtraction and a sum of absolute
// differences: 64 entries in two instructions, against the float decode's 16 in five.
inline void CoverBytes(const float* __restrict c, float step, uint8_t* __restrict cq, int64_t n) {
  const float inv = 1.0f / step;  // a power of two: c·inv is exact, or below 1 where it rounds
  for (int64_t i = 0; i < n; ++i) {
    const float y = std::floor(c[i] * inv);
    cq[i] = static_cast<uint8_t>(y > 0.0f ? (y < 255.0f ? static_cast<int32_t>(y) : 255) : 0);  // NaN: 0
  }
}

// Σ_i max(0, q[i] − cq[i]) over n bytes; `next` (if given), the row bounded next, is fetched
// into the cache meanwhile (the rows of a batch are far apart in memory).
inline uint64_t ByteExcess(const uint8_t* __restrict q, const uint8_t* __restrict cq, int64_t n,
                           const uint8_t* next = nullptr) {
  uint64_t total = 0;
  int64_t i = 0;
#if defined(__AVX512BW__)
  __m512i acc = _mm512_setzero_si512();
  for (; i + 64 <= n; i += 64) {
    if (next != nullptr) _mm_prefetch(reinterpret_cast<const char*>(next + i), _MM_HINT_T0);
    const __m512i d = _mm512_subs_epu8(_mm512_loadu_si512(q + i), _mm512_loadu_si512(cq + i));
    acc = _mm512_add_epi64(acc, _mm512_sad_epu8(d, _mm512_setzero_si512()));
  }
  total = static_cast<uint64_t>(_mm512_reduce_add_epi64(acc));
#elif defined(__AVX2__)
  __m256i acc = _mm256_setzero_si256();
  for (; i + 32 <= n; i += 32) {
    if (next != nullptr && i % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(next + i), _MM_HINT_T0);
    const __m256i d = _mm256_subs_epu8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + i)),
                                       _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cq + i)));
    acc = _mm256_add_epi64(acc, _mm256_sad_epu8(d, _mm256_setzero_si256()));
  }
  uint64_t lanes[4];
  std::memcpy(lanes, &acc, sizeof(lanes));
  total = lanes[0] + lanes[1] + lanes[2] + lanes[3];
#endif
  for (; i < n; ++i) total += q[i] > cq[i] ? q[i] - cq[i] : 0;
  return total;
}

// step · excess, raised by the margin above and rounded up to float.
inline float ByteExcessBound(float step, uint64_t excess, int64_t n) {
  double b = static_cast<double>(step) * static_cast<double>(excess);
  b = std::nextafter(b * (1.0 + (static_cast<double>(n) / 16 + 32) * 0x1p-23), HUGE_VAL);
  float f = static_cast<float>(b);
  return static_cast<double>(f) < b ? std::nextafter(f, HUGE_VALF) : f;
}

// Σ_i max(0, w·p[i] − c[i]); p a row of T, or a ByteRow (T = float).
template <typename T, bool kWeighted, typename P>
inline T RowGain(P p, const T* __restrict c, T w, int64_t n) {
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
    V m = x < rv ? x : rv;
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

// Every candidate's gain at once from an item-major matrix M [N items, N candidates]
// (M[i, j] = s_ij, as an objective built inside jit hands it over), Vec<T>::kLanes candidates
// per vector: Σ_q RowGain (or RowGainSat) of each candidate's column, bit for bit. Each lane
// of a vector holds one candidate and takes the very terms RowGain takes for it, added into
// the same accumulators (a0, a1 per RowGain lane l: 2L "slots") in the same order and folded
// by the same tree (Fold), so no transposed copy of M is needed. The slot sums are kept
// between the steps of one problem, and a step recomputes only the slots holding an item
// whose cover changed (from scratch, in the same order: the same bits): after the first
// picks most items keep their cover. `levels` [Q, N]: saturated coverage's r_qi, else the
// weights w_qj (read when `weighted`).
template <typename T>
struct ItemMajorGainer {
  using V = typename Vec<T>::type;
  static constexpr int64_t L = Vec<T>::kLanes, kFold = 16 / sizeof(T);
  int64_t N = 0, Q = 0, blocks = 0, pairs = 0, tail = 0;
  bool extra = false, started = false;
  std::vector<V> sums;            // [Q, blocks, 2L] slot sums: a0 of lane l at l, a1 at L + l
  std::vector<T> seen;            // [Q, N] the cover they were taken at
  std::vector<uint64_t> dirty;    // [Q] bit s: slot s needs its sum again

  // For a new problem (the buffers are kept: a thread solves many problems of one size; the
  // first step writes every slot before any is read).
  void Reset(int64_t n, int64_t q) {
    N = n, Q = q, blocks = (n + L - 1) / L;
    // RowGain's layout of a row of N: `pairs` blocks of 2L (first half a0, second a1), then
    // one more full block (a0) where it fits, then the ragged tail (a1).
    pairs = N / (2 * L);
    extra = N - 2 * L * pairs >= L;
    tail = 2 * L * pairs + (extra ? L : 0);
    started = false;
    if (static_cast<int64_t>(sums.size()) < Q * blocks * 2 * L) sums.resize(Q * blocks * 2 * L);
    if (static_cast<int64_t>(seen.size()) < Q * N) seen.resize(Q * N);
    dirty.assign(Q, 0);
  }
  int64_t Slot(int64_t i) const {
    const bool a1 = i < 2 * L * pairs ? (i / L) % 2 == 1 : i >= tail;
    return (a1 ? L : 0) + i % L;
  }

  // One item's term for a vector of candidates x (their entries s_ij): max(0, x − c_i), with
  // x weighted by the candidates' w_qj (`level`) or capped at r_qi (`level`, saturated).
  template <bool kWeighted, bool kSaturated>
  static V Term(V x, V cv, V level) {
    V d;
    if constexpr (kSaturated) d = (x < level ? x : level) - cv;
    else if constexpr (kWeighted) d = level * x - cv;
    else d = x - cv;
    return Relu(d);
  }

  template <bool kWeighted, bool kSaturated, bool kFull>
  void Recompute(const T* __restrict M, const T* __restrict c, const T* __restrict r, int64_t jb, uint64_t todo,
                 V* __restrict slot) const {
    const int64_t m = N - jb < L ? N - jb : L;  // candidates in this vector
    const T* Mj = M + jb;
    V wv = {};
    if constexpr (kWeighted && !kSaturated) wv = kFull ? Load<V>(r + jb) : LoadTail<T>(r + jb, m);
    auto term = [&](int64_t i) {
      const V x = kFull ? Load<V>(Mj + i * N) : LoadTail<T>(Mj + i * N, m);
      return Term<kWeighted, kSaturated>(x, Splat<V>(c[i]), kSaturated ? Splat<V>(r[i]) : wv);
    };
    // A slot's sum: its items of the 2L-blocks in order, then its item of the extra block
    // (a0) or of the tail (a1). Four slots at a time: four independent chains of adds.
    auto last_term = [&](int64_t s, V& a) {
      const int64_t l = s % L;
      if (s < L) {
        if (extra) a += term(2 * L * pairs + l);
      } else if (tail + l < N) {
        a += term(tail + l);
      }
    };
    int64_t ids[2 * L], n = 0;
    for (; todo != 0; todo &= todo - 1) ids[n++] = __builtin_ctzll(todo);
    int64_t u = 0;
    for (; u + 4 <= n; u += 4) {
      V a0 = {}, a1 = {}, a2 = {}, a3 = {};
      const int64_t s0 = ids[u], s1 = ids[u + 1], s2 = ids[u + 2], s3 = ids[u + 3];
      int64_t i0 = s0 % L + (s0 >= L ? L : 0), i1 = s1 % L + (s1 >= L ? L : 0);
      int64_t i2 = s2 % L + (s2 >= L ? L : 0), i3 = s3 % L + (s3 >= L ? L : 0);
      for (int64_t p = 0; p < pairs; ++p, i0 += 2 * L, i1 += 2 * L, i2 += 2 * L, i3 += 2 * L) {
        a0 += term(i0);
        a1 += term(i1);
        a2 += term(i2);
        a3 += term(i3);
      }
      last_term(s0, a0), last_term(s1, a1), last_term(s2, a2), last_term(s3, a3);
      slot[s0] = a0, slot[s1] = a1, slot[s2] = a2, slot[s3] = a3;
    }
    for (; u < n; ++u) {
      const int64_t s = ids[u];
      V a = {};
      int64_t i = s % L + (s >= L ? L : 0);
      for (int64_t p = 0; p < pairs; ++p, i += 2 * L) a += term(i);
      last_term(s, a);
      slot[s] = a;
    }
  }

  // A block's gains from its slot sums: RowGain's fold (a0 + a1, then Fold's tree), added to
  // the gains of the queries before (Σ_q in order from q = 0, as gain(j) adds them).
  template <bool kFull>
  void Finish(const V* __restrict slot, T* __restrict out, int64_t m, bool first) const {
    V v[L];
    for (int64_t l = 0; l < L; ++l) v[l] = slot[l] + slot[L + l];
    int64_t h = L;  // Fold: halve to 16 bytes of lanes, then add those in order from 0
    while (h > kFold) {
      h /= 2;
      for (int64_t l = 0; l < h; ++l) v[l] = v[l] + v[l + h];
    }
    V sum = {};
    for (int64_t l = 0; l < h; ++l) sum += v[l];
    if (!first) sum = Load<V>(out) + sum;
    if (kFull) std::memcpy(out, &sum, sizeof(V));
    else for (int64_t l = 0; l < m; ++l) out[l] = sum[l];
  }

  // Every slot of every block from scratch, the rows of M read in order (the first step: M
  // comes from memory once, in the order the hardware prefetches): each slot still adds its
  // items in increasing order from zero, as Recompute does, so the sums are the same bits.
  template <bool kWeighted, bool kSaturated>
  void Stream(const T* __restrict M, const T* __restrict c, const T* __restrict r, V* __restrict sums) {
    const int64_t full = N / L, m = N - full * L;
    std::memset(static_cast<void*>(sums), 0, blocks * 2 * L * sizeof(V));
    if constexpr (kWeighted && !kSaturated) {
      weights.resize(blocks);
      for (int64_t b = 0; b < full; ++b) weights[b] = Load<V>(r + b * L);
      if (m) weights[full] = LoadTail<T>(r + full * L, m);
    }
    const int64_t paired = 2 * L * pairs;
    for (int64_t i = 0; i < N; ++i) {
      // Rows i and i + 2L of two 2L-blocks add to the same slot, one after the other: taken
      // together (two streams), the slot is loaded and stored once for both (3% faster on
      // 512 x 100; the same adds in the same order).
      const bool odd = i < paired && (i / (2 * L)) % 2 == 1;
      if (odd) continue;  // added with its partner i - 2L
      const bool two = i < paired && i + 2 * L < paired;
      const T* __restrict row = M + i * N;
      const T* __restrict row2 = two ? row + 2 * L * N : row;
      const int64_t i2 = two ? i + 2 * L : i;
      const V cv = Splat<V>(c[i]), cv2 = Splat<V>(c[i2]);
      V rv = {}, rv2 = {};
      if constexpr (kSaturated) rv = Splat<V>(r[i]), rv2 = Splat<V>(r[i2]);
      V* __restrict slot = sums + Slot(i);
      auto add = [&](int64_t b) {  // block b's vector of both rows (the last one may be short)
        auto load = [&](const T* p) { return b < full ? Load<V>(p + b * L) : LoadTail<T>(p + b * L, m); };
        V w = {};
        if constexpr (kWeighted && !kSaturated) w = weights[b];
        V a = slot[b * 2 * L];
        a += Term<kWeighted, kSaturated>(load(row), cv, kSaturated ? rv : w);
        if (two) a += Term<kWeighted, kSaturated>(load(row2), cv2, kSaturated ? rv2 : w);
        slot[b * 2 * L] = a;
      };
      for (int64_t b = 0; b < blocks; ++b) add(b);
    }
  }
  std::vector<V> weights;  // Stream's w_qj, one vector per block

  template <bool kWeighted, bool kSaturated>
  void Run(const T* M, const T* cover, const T* levels, T* out) {
    const uint64_t all = 2 * L == 64 ? ~uint64_t(0) : (uint64_t(1) << (2 * L)) - 1;
    for (int64_t q = 0; q < Q; ++q) {
      const T* c = cover + q * N;
      T* seen_q = seen.data() + q * N;
      if (!started) {
        dirty[q] = all;
      } else {
        // Items in blocks of L share their accumulator: a block's changed items mark their
        // lanes' slots of that accumulator at once.
        for (int64_t i0 = 0; i0 < N; i0 += L) {
          const int64_t m = N - i0 < L ? N - i0 : L;
          uint64_t changed = 0;
#if defined(__AVX512F__)
          if constexpr (sizeof(V) == 64) {
            const uint64_t in = m == L ? (uint64_t(1) << L) - 1 : (uint64_t(1) << m) - 1;
            const V x = LoadTail<T>(c + i0, m), y = LoadTail<T>(seen_q + i0, m);
            if constexpr (sizeof(T) == 4)
              changed = _mm512_cmp_ps_mask(reinterpret_cast<const __m512&>(x), reinterpret_cast<const __m512&>(y),
                                           _CMP_NEQ_UQ) & in;
            else
              changed = _mm512_cmp_pd_mask(reinterpret_cast<const __m512d&>(x), reinterpret_cast<const __m512d&>(y),
                                           _CMP_NEQ_UQ) & in;
          } else
#endif
          {
            for (int64_t l = 0; l < m; ++l) changed |= uint64_t(c[i0 + l] != seen_q[i0 + l]) << l;
          }
          if (changed) dirty[q] |= changed << (Slot(i0) >= L ? L : 0);
        }
      }
      std::memcpy(seen_q, c, N * sizeof(T));
    }
    started = true;
    for (int64_t q = 0; q < Q; ++q)
      if (dirty[q] == all) Stream<kWeighted, kSaturated>(M, cover + q * N, levels + q * N, sums.data() + q * blocks * 2 * L);
    alignas(64) T padded[L];
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t jb = b * L;
      const bool full = jb + L <= N;
      for (int64_t q = 0; q < Q; ++q) {
        V* slot = sums.data() + (q * blocks + b) * 2 * L;
        const T* c = cover + q * N;
        const T* r = levels + q * N;
        T* o = full ? out + jb : padded;
        if (dirty[q] != all) {
          if (full) Recompute<kWeighted, kSaturated, true>(M, c, r, jb, dirty[q], slot);
          else Recompute<kWeighted, kSaturated, false>(M, c, r, jb, dirty[q], slot);
        }
        if (full) Finish<true>(slot, o, L, q == 0);
        else Finish<false>(slot, o, N - jb, q == 0);
        if (!full && q == Q - 1) std::memcpy(out + jb, padded, (N - jb) * sizeof(T));
      }
    }
    for (int64_t q = 0; q < Q; ++q) dirty[q] = 0;
  }

  void Gains(const T* M, const T* cover, const T* levels, bool weighted, bool saturated, T* out) {
    if (saturated) Run<true, true>(M, cover, levels, out);
    else if (weighted) Run<true, false>(M, cover, levels, out);
    else Run<false, false>(M, cover, levels, out);
  }
};

struct Batch {
  // The leading (vmap) axes of an output with `nb` of them, and their element count.
  Batch(const ffi::Span<const int64_t>& od, int64_t nb) {
    for (int64_t d = 0; d < nb; ++d) {
      out_dims.push_back(od[d]);
      count *= od[d];
    }
  }
  // Per-input element offset of batch element b, with size-1 leading axes broadcast.
  std::vector<int64_t> out_dims;
  int64_t count = 1;
  int64_t Offset(int64_t b, const ffi::Span<const int64_t>& dims, int64_t core_size) const {
    int64_t off = 0, stride = core_size;
    int64_t nb = static_cast<int64_t>(out_dims.size());
    for (int64_t d = nb - 1; d >= 0; --d) {
      int64_t od = out_dims[d];
      int64_t coord = b % od;
      b /= od;
      int64_t id = dims[d];
      if (id != 1) off += coord * stride;
      stride *= id;
    }
    return off;
  }
};

template <typename T>
ffi::Error Gains(ffi::ThreadPool pool, ffi::AnyBuffer rows, ffi::AnyBuffer cover, ffi::AnyBuffer w,
                 ffi::Buffer<ffi::S32> idx, ffi::Result<ffi::AnyBuffer> out, bool weighted) {
  auto rd = rows.dimensions(), cd = cover.dimensions(), wd = w.dimensions(), id = idx.dimensions();
  auto od = out->dimensions();
  const int64_t nb = static_cast<int64_t>(od.size()) - 1;
  if (nb < 0 || static_cast<int64_t>(rd.size()) != nb + 2 || static_cast<int64_t>(cd.size()) != nb + 2 ||
      static_cast<int64_t>(wd.size()) != nb + 2 || static_cast<int64_t>(id.size()) != nb + 1)
    return ffi::Error::InvalidArgument("jaxsel_cover_gains: inconsistent ranks");
  const int64_t R = rd[nb], N = rd[nb + 1], Q = cd[nb], M = id[nb];
  if (cd[nb + 1] != N || od[nb] != M || (weighted && (wd[nb] != Q || wd[nb + 1] != M)))
    return ffi::Error::InvalidArgument("jaxsel_cover_gains: inconsistent shapes");
  const Batch batch(od, nb);
  const T* rp = reinterpret_cast<const T*>(rows.untyped_data());
  const T* cp = reinterpret_cast<const T*>(cover.untyped_data());
  const T* wp = reinterpret_cast<const T*>(w.untyped_data());
  const int32_t* ip = idx.typed_data();
  T* op = reinterpret_cast<T*>(out->untyped_data());

  const int64_t total = batch.count * M;  // rows to reduce
  auto run = [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t b = t / M, m = t % M;
      const T* rb = rp + batch.Offset(b, rd, R * N);
      const T* cb = cp + batch.Offset(b, cd, Q * N);
      const T* wb = wp + batch.Offset(b, wd, weighted ? Q * M : 0);
      const int32_t* ib = ip + batch.Offset(b, id, M);
      int64_t j = std::clamp<int64_t>(ib[m], 0, R - 1);
      const T* row = rb + j * N;
      T g = 0;
      for (int64_t q = 0; q < Q; ++q) {
        g += weighted ? RowGain<T, true>(row, cb + q * N, wb[q * M + m], N)
                      : RowGain<T, false>(row, cb + q * N, T(1), N);
      }
      op[t] = g;
    }
  };

  // Chunks of at least ~64k elements, on the caller plus the pool's threads.
  ParallelFor(pool, total, std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, N * Q)), run);
  return ffi::Error::Success();
}

ffi::Error CoverGains(ffi::ThreadPool pool, ffi::AnyBuffer rows, ffi::AnyBuffer cover, ffi::AnyBuffer w,
                      ffi::Buffer<ffi::S32> idx, ffi::Result<ffi::AnyBuffer> out, bool weighted) {
  auto t = rows.element_type();
  if (cover.element_type() != t || w.element_type() != t || out->element_type() != t)
    return ffi::Error::InvalidArgument("jaxsel_cover_gains: mixed dtypes");
  if (t == ffi::DataType::F32) return Gains<float>(pool, rows, cover, w, idx, out, weighted);
  if (t == ffi::DataType::F64) return Gains<double>(pool, rows, cover, w, idx, out, weighted);
  return ffi::Error::InvalidArgument("jaxsel_cover_gains: float32 or float64 only");
}


// Greedy for facility location / coverage / saturated coverage, the whole loop in one call
// per problem: each
// step takes the available candidate with the highest criterion (the gain, or gain per unit
// cost), lowest index on ties, stops when none is left or the gain is below min_gain, and
// updates the cover. Gains come from RowGain, the code jaxsel_cover_gains uses, so every
// path agrees on them bit for bit. Dense steps evaluate every candidate; lazy steps (CELF)
// re-evaluate stale upper bounds from a heap until a fresh one is on top. A problem's matrix
// stays in cache for all k steps; problems of a batch run in parallel, a single large
// problem spreads its dense passes over the threads instead.
//
// With costs (float32, like the XLA path): a candidate is available while its cost fits in
// budget − spent (float32 arithmetic, as jnp does it), and with `ratio` the criterion is
// gain / cost (a free candidate with a positive gain: +inf; with none: 0).
//
// rows [..., N, N] (candidate-major; item-major where `item_major`), w [..., Q, N] (facility
// location: relevance r_qj, ignored unless weighted; saturated coverage: the levels r_qi),
// valid [..., N] pred, costs [..., N] f32 (ignored unless has_costs), budget [...] f32,
// min_gain [...] (−inf: none) → indices [..., K] s32, gains [..., K], values [..., K],
// count [...] s32, cost [...] f32, bound [...] (the certificate of jaxsel.greedy: the least
// over the steps of f(S) + GainBound of the gains at hand; see GainBound).
template <typename T>
struct Best {
  T crit = -std::numeric_limits<T>::infinity();
  int64_t j = -1;
  T gain = 0;
};

struct Problem {
  int64_t N, Q, K;
  bool weighted, lazy, ratio, saturated;
};

// The most any feasible set (at most K items; with costs, at most `budget`) can add to S, from
// upper bounds u[j] of the gains w.r.t. S of the candidates with eligible[j]: the sum of the K
// largest (TopK), and with costs the smaller of that and the best fractional knapsack
// (Knapsack: by gain per unit cost, the last item cut to fill the budget), found in expected
// O(N) by a 3-way quickselect on the ratio. The same bound as jaxsel.greedy's XLA loop
// (`_gain_bound`).
template <typename T>
struct GainBounder {
  std::vector<T> top;
  struct Item {
    T ratio, gain;
    double cost;
  };
  std::vector<Item> items;

  static T Ratio(T g, float c) {
    return c > 0 ? g / static_cast<T>(c) : (g > 0 ? std::numeric_limits<T>::infinity() : T(0));
  }

  void Insert(T x, int64_t K) {  // into `top`, the K largest so far, sorted
    const int64_t m = static_cast<int64_t>(top.size());
    if (m == K && !(x > top[m - 1])) return;
    if (m < K) top.push_back(x);
    int64_t i = (m < K ? m : K - 1);
    for (; i > 0 && top[i - 1] < x; --i) top[i] = top[i - 1];
    top[i] = x;
  }
  // Summed largest first, so the value does not depend on how they were found: for a small K
  // by insertion into a sorted list of K (one comparison for most entries), else a selection.
  T TopK(const T* u, const char* eligible, int64_t K, int64_t N) {
    top.clear();
    if (K <= 0) return T(0);
    if (K <= 16) {
      top.reserve(K + 1);
      for (int64_t j = 0; j < N; ++j)
        if (eligible[j]) Insert(u[j] > T(0) ? u[j] : T(0), K);
    } else {
      for (int64_t j = 0; j < N; ++j)
        if (eligible[j]) top.push_back(u[j] > T(0) ? u[j] : T(0));
      if (K < static_cast<int64_t>(top.size())) {
        std::nth_element(top.begin(), top.begin() + K, top.end(), std::greater<T>());
        top.resize(K);
      }
      std::sort(top.begin(), top.end(), std::greater<T>());
    }
    T total = 0;
    for (const T x : top) total += x;
    return total;
  }

  // TopK of z ≥ 0 with every candidate eligible (the same sum as TopK where an ineligible
  // candidate is given as 0: zeros add nothing): for a small K, blocks of Vec<T>::kLanes none
  // of which beats the K-th largest so far are passed over with one comparison. z is
  // scratch: it may be changed.
  T TopKOf(T* z, int64_t K, int64_t N) {
    using V = typename Vec<T>::type;
    constexpr int64_t L = Vec<T>::kLanes;
    if (K > 16) {
      std::vector<char>& all = ones;
      if (static_cast<int64_t>(all.size()) < N) all.assign(N, 1);
      return TopK(z, all.data(), K, N);
    }
    if (K <= 0) return T(0);
#if defined(__AVX512F__)
    if constexpr (std::is_same<T, float>::value) {
      // The K largest in one register, sorted (lanes from K on stay 0): a value above the
      // K-th goes in after the lanes above or equal to it, the lanes below shift down one.
      // The indices ride along (ti); the last call's top K go in first (and are zeroed in
      // z, which is scratch), so that the K-th is high early and most blocks are passed over:
      // greedy's gains change little from one step to the next.
      const __m512i down = _mm512_set_epi32(14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0);
      const __mmask16 first = static_cast<__mmask16>((1u << K) - 1);
      const __m512i last = _mm512_set1_epi32(static_cast<int32_t>(K - 1));
      __m512 t = _mm512_setzero_ps();
      __m512i ti = _mm512_setzero_si512();
      float kth = 0;
      auto insert = [&](float x, int32_t j) {
        const __m512 xv = _mm512_set1_ps(x);
        const __mmask16 below = _mm512_mask_cmp_ps_mask(first, t, xv, _CMP_LT_OQ);
        const __mmask16 at = below & ~static_cast<__mmask16>(below << 1);
        t = _mm512_mask_permutexvar_ps(t, below & ~at, down, t);
        t = _mm512_mask_mov_ps(t, at, xv);
        ti = _mm512_mask_permutexvar_epi32(ti, below & ~at, down, ti);
        ti = _mm512_mask_mov_epi32(ti, at, _mm512_set1_epi32(j));
        kth = _mm512_cvtss_f32(_mm512_permutexvar_ps(last, t));  // in registers: no store-forward stall
      };
      for (const int32_t j : seeds) {
        if (j >= N) continue;
        const float x = z[j];
        z[j] = 0;
        if (x > kth) insert(x, j);
      }
      for (int64_t j0 = 0; j0 < N; j0 += L) {
        const int64_t m = N - j0 < L ? N - j0 : L;
        const __mmask16 in = static_cast<__mmask16>(m == L ? 0xffff : (1u << m) - 1);
        uint32_t above = _mm512_mask_cmp_ps_mask(in, _mm512_maskz_loadu_ps(in, z + j0), _mm512_set1_ps(kth),
                                                 _CMP_GT_OQ);
        for (; above != 0; above &= above - 1) {
          const int64_t j = j0 + __builtin_ctz(above);
          if (z[j] > kth) insert(z[j], static_cast<int32_t>(j));
        }
      }
      alignas(64) float v[16];
      alignas(64) int32_t vi[16];
      _mm512_store_ps(v, t);
      _mm512_store_si512(vi, ti);
      seeds.clear();
      for (int64_t l = 0; l < K; ++l)
        if (v[l] > 0) seeds.push_back(vi[l]);
      T total = 0;
      for (int64_t l = 0; l < K; ++l) total += v[l];
      return total;
    }
#endif
    top.clear();
    top.reserve(K + 1);
    for (int64_t j0 = 0; j0 < N; j0 += L) {
      const int64_t e = j0 + L < N ? j0 + L : N;
      if (static_cast<int64_t>(top.size()) == K && e - j0 == L && !AnyAbove(Load<V>(z + j0), top[K - 1]))
        continue;
      for (int64_t j = j0; j < e; ++j) Insert(z[j], K);
    }
    T total = 0;
    for (const T x : top) total += x;
    return total;
  }
  std::vector<char> ones;
  std::vector<int32_t> seeds;  // TopKOf's last top K (AVX-512 float), tried first next time

  // *critical: the ratio at which the budget runs out (0 when everything fits): exactly the
  // items of at least that ratio and a positive gain are (partly) in the knapsack.
  T Knapsack(const T* u, const char* eligible, const float* C, float budget, int64_t N, T* critical) {
    items.clear();
    for (int64_t j = 0; j < N; ++j) {
      if (!eligible[j]) continue;
      const T g = u[j] > T(0) ? u[j] : T(0);
      items.push_back({Ratio(g, C[j]), g, double(C[j])});
    }
    T sack = 0;
    *critical = 0;
    double room = budget;
    size_t lo = 0, hi = items.size();
    while (lo < hi) {
      const T pivot = items[lo + (hi - lo) / 2].ratio;
      // [lo, a): ratio > pivot; [a, b): == pivot; [b, hi): < pivot.
      size_t a = lo, b = lo, c = hi;
      while (b < c) {
        if (items[b].ratio > pivot) std::swap(items[a++], items[b++]);
        else if (items[b].ratio < pivot) std::swap(items[b], items[--c]);
        else ++b;
      }
      double cost_a = 0;
      T gain_a = 0;
      for (size_t i = lo; i < a; ++i) cost_a += items[i].cost, gain_a += items[i].gain;
      if (cost_a > room) {  // the budget runs out among the better ratios
        hi = a;
        continue;
      }
      sack += gain_a;
      room -= cost_a;
      double cost_e = 0;
      T gain_e = 0;
      for (size_t i = a; i < b; ++i) cost_e += items[i].cost, gain_e += items[i].gain;
      if (cost_e > room) {  // equal ratios: any `room` worth of them adds the same
        sack += gain_e * static_cast<T>(room / cost_e);
        *critical = pivot;
        break;
      }
      sack += gain_e;
      room -= cost_e;
      lo = b;
    }
    return sack;
  }

  // The same knapsack where u holds stale upper bounds (lazy greedy): items are taken from a
  // max-heap by ratio, and a stale one (`fresh(j)` false) is first re-evaluated (`refresh(j)`
  // writes u[j]) and pushed back, so every item in the knapsack is fresh. Its value is then the
  // knapsack of the current gains exactly (the others only have larger bounds), at the cost of
  // a heap over N and a few evaluations. O(N + m log N) for m items touched.
  std::vector<std::pair<T, int64_t>> heap;
  template <typename Fresh, typename Refresh>
  T LazyKnapsack(T* u, const char* eligible, const float* C, float budget, int64_t N,
                 const Fresh& fresh, const Refresh& refresh) {
    heap.clear();
    for (int64_t j = 0; j < N; ++j)
      if (eligible[j] && u[j] > T(0)) heap.emplace_back(Ratio(u[j], C[j]), j);
    std::make_heap(heap.begin(), heap.end());
    T sack = 0;
    double room = budget;
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end());
      const int64_t j = heap.back().second;
      heap.pop_back();
      if (!fresh(j)) {
        refresh(j);
        if (u[j] > T(0)) {
          heap.emplace_back(Ratio(u[j], C[j]), j);
          std::push_heap(heap.begin(), heap.end());
        }
        continue;
      }
      if (C[j] <= room) {
        sack += u[j];
        room -= C[j];
      } else {
        sack += u[j] * static_cast<T>(room / C[j]);
        break;
      }
    }
    return sack;
  }
};

// One problem's greedy. `pfor(total, grain, fn)` runs fn(lo, hi) over [0, total), in
// parallel or not; I, G, X are the problem's [K] outputs, *spent_out its total cost. S is the
// candidate-major matrix; or, with SI (item-major, S unused), every step is dense and takes
// all gains at once from SI (ItemMajorGainer: the same gains, hence the same run). `next`, if
// given, is the matrix this thread solves next, fetched into the cache meanwhile.
template <typename T, typename PFor>
int32_t SolveOne(const Problem& pr, const T* S, const T* SI, uint8_t* H, float* H_step, const T* W, const bool* V,
                 const float* C, float budget, T floor, bool parallel, int64_t threads, const PFor& pfor,
                 int32_t* I, T* G, T* X, float* spent_out, T* bound_out, const T* next = nullptr) {
  const int64_t N = pr.N, Q = pr.Q, K = pr.K;
  const bool weighted = pr.weighted, lazy = pr.lazy && SI == nullptr, ratio = pr.ratio && C != nullptr;
  const bool saturated = pr.saturated;
  constexpr T kInf = std::numeric_limits<T>::infinity();
  // Facility location: cover[q, i] = max_{j∈S} w_qj s_ji. Saturated coverage: best[i] =
  // max_{j∈S} s_ji and cover[q, i] = min(r_qi, best[i]) (W holds r).
  std::vector<T> cover(Q * N, T(0)), best_sim(saturated ? N : 0, T(0));
  std::vector<char> avail(N), eligible(N);  // eligible: unpicked, valid, cost within budget
  for (int64_t j = 0; j < N; ++j) avail[j] = V[j], eligible[j] = V[j] && (C == nullptr || C[j] <= budget);
  int32_t taken = 0;
  T value = 0;
  float spent = 0;
  auto fits = [&](int64_t j) { return C == nullptr || C[j] <= budget - spent; };
  auto crit_of = [&](T g, int64_t j) -> T {
    if (!ratio) return g;
    const float c = C[j];
    return c > 0 ? g / static_cast<T>(c) : (g > 0 ? kInf : T(0));
  };
  // Σ_q RowGain of candidate j's row: of T, or its ByteRow (the byte bounds below).
  auto cover_gain = [&](auto row, int64_t j) {
    T g = 0;
    for (int64_t q = 0; q < Q; ++q)
      g += weighted ? RowGain<T, true>(row, cover.data() + q * N, W[q * N + j], N)
                    : RowGain<T, false>(row, cover.data() + q * N, T(1), N);
    return g;
  };
  auto gain = [&](int64_t j) {
    const T* row = S + j * N;
    if (!saturated) return cover_gain(row, j);
    T g = 0;
    for (int64_t q = 0; q < Q; ++q) g += RowGainSat<T>(row, W + q * N, cover.data() + q * N, N);
    return g;
  };
  // Lazy steps on a large float32 problem get `H` [N, N] bytes and `H_step` [N], scratch for
  // each candidate row rounded up to bytes (ByteRoundUp, written in the first round): a stale
  // top is first bounded from it (a quarter of the float32 row's bytes), whose float32 row is
  // read only when that bound keeps it on top. Bounds are never below the gain (see ByteRow
  // and ByteExcess), so the picks are CELF's; only the stale keys, and with them the
  // certificate, can differ. The bench's N = 4000 / 10000, k = 100: 25,000 / 57,700 bounds,
  // 398 / 503 float32 rows (float16 rows, which this replaced, took 103 / 111 float32 rows but
  // read twice the bytes per bound): the solve 1.1x / 1.3x faster (bench/README, tenth session).
  const bool bounds = H != nullptr && lazy && !saturated && std::is_same<T, float>::value;
  // Coverage's bounds in whole numbers (ByteExcess) for the rows of the most common step (all
  // of them for a cosine similarity, whose diagonal is 1), against the cover as bytes
  // (`cover_bytes`, made at the start of each lazy step); other rows, and weighted problems,
  // from the float decode of their ByteRow.
  const bool whole = bounds && !weighted && Q == 1;
  float whole_step = 0;
  std::vector<uint8_t> cover_bytes(whole ? N : 0);
  auto byte_bound = [&](int64_t j, int64_t next = -1) -> T {
    if constexpr (std::is_same<T, float>::value) {
      const float unit = H_step[j];
      if (whole && unit == whole_step)
        return ByteExcessBound(unit, ByteExcess(H + j * N, cover_bytes.data(), N, next < 0 ? nullptr : H + next * N), N);
      if (unit < std::numeric_limits<float>::infinity()) return cover_gain(ByteRow{H + j * N, unit}, j);
    }
    return kInf;
  };
  auto make_bytes = [&](int64_t j) {
    if constexpr (std::is_same<T, float>::value) H_step[j] = ByteRoundUp(S + j * N, H + j * N, N);
  };
  std::vector<int32_t> bounded(bounds ? N : 0, -1);  // step at which H last bounded a candidate
  // Dense steps evaluate every eligible candidate, also those the spent budget excludes from
  // the pick, as jaxsel.greedy's XLA loop does: the certificate then has every current gain.
  std::vector<T> last(lazy ? 0 : N, T(0)), column(SI != nullptr ? N : 0);
  // The direct dense steps without costs: the gains with ineligible candidates as 0 (zready:
  // written this step), whose top K are the certificate's (GainBounder::TopKOf).
  std::vector<T> zgain(SI != nullptr && C == nullptr ? N : 0);
  thread_local ItemMajorGainer<T> item_major_kept;
  ItemMajorGainer<T>* item_major = SI != nullptr ? &item_major_kept : nullptr;
  if (item_major != nullptr) item_major->Reset(N, Q);
  bool zready = false;
  // The dense choice over [lo, hi): each eligible candidate's gain evaluated into last[j], or
  // with `given` read from there (the direct item-major steps write every gain first).
  auto scan = [&](int64_t lo, int64_t hi, bool given = false) {
    Best<T> best;
    for (int64_t j = lo; j < hi; ++j) {
      if (!eligible[j]) continue;
      const T g = given ? last[j] : gain(j), c = crit_of(g, j);
      last[j] = g;
      if (!avail[j] || !fits(j)) continue;
      if (c > best.crit || best.j < 0) best = {c, j, g};
    }
    return best;
  };
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, N * Q));
  // Lazy (CELF): a max-heap of stale upper bounds of the criterion, ordered by (bound desc,
  // index asc). Float gains never grow as the cover grows (each relu term is monotone and the
  // summation order is fixed), so a bound is safe; a fresh top beats every other bound, and on
  // equal bounds the lower index, so the pick is dense greedy's. A candidate that no longer
  // fits the budget never will again: it leaves the heap when it reaches the top.
  std::vector<int32_t> stamp;  // step at which a candidate's bound was last evaluated
  std::vector<T> fresh;        // its gain then (or at a later step, where `seen` says so)
  std::vector<int32_t> seen;   // step at which the certificate last re-evaluated it
  std::vector<std::pair<T, int64_t>> heap;  // (bound, index), max-heap, inline keys
  auto above = [](const std::pair<T, int64_t>& a, const std::pair<T, int64_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  auto below = [&](const std::pair<T, int64_t>& a, const std::pair<T, int64_t>& b) { return above(b, a); };
  std::vector<int32_t> stale;  // a batch of stale tops, bounded on all threads
  std::vector<T> stale_u;
  constexpr int64_t kBatchFrom = 32, kBatchMax = 1024;
  // The top's key only ever decreases (or the top leaves): one sift-down per change.
  auto sift_down = [&](size_t i) {
    const size_t n = heap.size();
    auto item = heap[i];
    while (true) {
      size_t c = 2 * i + 1;
      if (c >= n) break;
      if (c + 1 < n && above(heap[c + 1], heap[c])) ++c;
      if (!above(heap[c], item)) break;
      heap[i] = heap[c];
      i = c;
    }
    heap[i] = item;
  };
  auto pop_top = [&]() {
    heap[0] = heap.back();
    heap.pop_back();
    if (!heap.empty()) sift_down(0);
  };
  const int64_t parts = 4 * (threads + 1);
  auto dense_best = [&]() {
    Best<T> best;
    if (SI != nullptr) {
      item_major->Gains(SI, cover.data(), W, weighted, saturated, last.data());
      if (C == nullptr) {
        // Without costs every eligible candidate is available and its criterion is its gain
        // (≥ 0): the largest z, lowest index on ties, is scan's choice where it is above 0.
        using Vv = typename Vec<T>::type;
        constexpr int64_t L = Vec<T>::kLanes;
        T* __restrict z = zgain.data();
        const T* __restrict g = last.data();
        const char* __restrict el = eligible.data();
        for (int64_t j = 0; j < N; ++j) z[j] = el[j] ? g[j] : T(0);
        Vv mx = {};
        int64_t j = 0;
        for (; j + L <= N; j += L) {
          const Vv x = Load<Vv>(z + j);
          mx = x > mx ? x : mx;
        }
        T top = 0;
        for (int64_t l = 0; l < L; ++l) top = mx[l] > top ? mx[l] : top;
        for (; j < N; ++j) top = z[j] > top ? z[j] : top;
        zready = true;
        if (top > T(0)) {
          for (j = 0; z[j] != top; ++j) {
          }
          return Best<T>{top, j, top};
        }
      }
      return scan(0, N, true);
    }
    if (!parallel) return scan(0, N);
    std::vector<Best<T>> part(parts);
    pfor(parts, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p) part[p] = scan(N * p / parts, N * (p + 1) / parts);
    });
    for (const auto& p : part)  // in index order: strict > keeps the lowest index on ties
      if (p.j >= 0 && (best.j < 0 || p.crit > best.crit)) best = p;
    return best;
  };
  std::vector<size_t> frontier;  // heap positions, a max-heap by their keys
  auto heap_top_k = [&]() {
    T total = 0;
    if (heap.empty()) return total;
    auto lower = [&](size_t a, size_t b) { return above(heap[b], heap[a]); };
    frontier.assign(1, 0);
    for (int64_t taken_k = 0; taken_k < K && !frontier.empty(); ++taken_k) {
      std::pop_heap(frontier.begin(), frontier.end(), lower);
      const size_t p = frontier.back();
      frontier.pop_back();
      total += heap[p].first > T(0) ? heap[p].first : T(0);
      for (size_t c = 2 * p + 1; c <= 2 * p + 2 && c < heap.size(); ++c) {
        frontier.push_back(c);
        std::push_heap(frontier.begin(), frontier.end(), lower);
      }
    }
    return total;
  };
  GainBounder<T> bounder;
  T bound = kInf;
  int64_t step = 0;
  for (; step < K; ++step) {
    Best<T> best;
    if (!lazy) {
      best = dense_best();
      // The thread's next problem (`next`, small: see Greedy) into the cache, a share after
      // each step but the last: its first step then reads it from there.
      if (next != nullptr && step < K - 1) {
        const int64_t lines = (N * N * int64_t(sizeof(T)) + 63) / 64, per = (lines + K - 2) / (K - 1);
        const char* base = reinterpret_cast<const char*>(next);
        for (int64_t l = step * per; l < lines && l < (step + 1) * per; ++l) __builtin_prefetch(base + 64 * l, 0, 2);
      }
    } else {
      if (step == 0) {
        fresh.assign(N, T(0));
        stamp.assign(N, 0);
        seen.assign(N, -1);
        auto eval = [&](int64_t lo, int64_t hi) {
          for (int64_t j = lo; j < hi; ++j)
            if (avail[j] && fits(j)) {
              fresh[j] = gain(j);
              if (bounds) make_bytes(j);
            }
        };
        if (parallel) pfor(N, grain, eval);
        else eval(0, N);
        for (int64_t j = 0; j < N; ++j)
          if (avail[j] && fits(j)) heap.emplace_back(crit_of(fresh[j], j), j);
        if (whole) {  // the most common finite step of the rows written
          std::vector<float> steps;
          for (int64_t j = 0; j < N; ++j)
            if (avail[j] && fits(j) && H_step[j] < kInf) steps.push_back(H_step[j]);
          std::sort(steps.begin(), steps.end());
          for (size_t a = 0, most = 0; a < steps.size();) {
            size_t b = a;
            while (b < steps.size() && steps[b] == steps[a]) ++b;
            if (b - a > most) most = b - a, whole_step = steps[a];
            a = b;
          }
        }
        for (size_t i = heap.size() / 2; i-- > 0;) sift_down(i);
      }
      int64_t bounded_now = 0;  // byte bounds taken this step
      if constexpr (std::is_same<T, float>::value)
        if (whole && whole_step > 0) CoverBytes(cover.data(), whole_step, cover_bytes.data(), N);
      while (!heap.empty()) {
        const int64_t j = heap[0].second;
        if (!fits(j)) {
          pop_top();
          continue;
        }
        if (stamp[j] == step) {
          best = {heap[0].first, j, fresh[j]};
          break;
        }
        if (bounds && bounded[j] != step && parallel && bounded_now >= kBatchFrom) {
          // A step that has already bounded many stale tops one at a time (the first steps,
          // where most candidates' gains fall below the new top's): the next stale tops, as
          // many as were bounded so far (the batch doubles, so about twice what one at a time
          // would bound at most), are taken off the heap, bounded on all threads and put
          // back. Keys stay upper bounds, so the pick is CELF's; more of them may be tighter,
          // and with them the certificate. N = 4000 / 10000, k = 100: the solve 1.4x / 1.5x
          // faster (bench/README, ninth session).
          const int64_t want = std::min<int64_t>(kBatchMax, bounded_now);
          stale.clear();
          while (!heap.empty() && static_cast<int64_t>(stale.size()) < want) {
            const int64_t t = heap[0].second;
            if (!fits(t)) {
              pop_top();
              continue;
            }
            if (stamp[t] == step || bounded[t] == step) break;
            stale.push_back(static_cast<int32_t>(t));
            pop_top();
          }
          stale_u.resize(stale.size());
          pfor(static_cast<int64_t>(stale.size()), 1, [&](int64_t lo, int64_t hi) {
            for (int64_t i = lo; i < hi; ++i) stale_u[i] = byte_bound(stale[i], i + 1 < hi ? stale[i + 1] : -1);
          });
          for (size_t i = 0; i < stale.size(); ++i) {
            const int32_t t = stale[i];
            bounded[t] = static_cast<int32_t>(step);
            if (stale_u[i] < fresh[t]) fresh[t] = stale_u[i];
            heap.emplace_back(crit_of(fresh[t], t), t);
            std::push_heap(heap.begin(), heap.end(), below);
          }
          bounded_now += static_cast<int64_t>(stale.size());
          continue;
        }
        if (bounds && bounded[j] != step) {
          ++bounded_now;
          bounded[j] = static_cast<int32_t>(step);
          const T u = byte_bound(j);
          if (u < fresh[j]) {
            fresh[j] = u;  // a tighter stale bound; j stays stale
            heap[0].first = crit_of(u, j);
            sift_down(0);
          }
          continue;  // still on top: read its float32 row
        }
        // The float32 row, one at a time: after the byte bounds, about one per step.
        fresh[j] = gain(j);
        stamp[j] = static_cast<int32_t>(step);
        heap[0].first = crit_of(fresh[j], j);
        sift_down(0);
      }
    }
    // The certificate at S (the cover is not updated yet): f(S) + the most a feasible set adds.
    T* u = lazy ? fresh.data() : last.data();
    T adds = kInf;
    if (C != nullptr && !lazy) {
      T critical;
      adds = bounder.Knapsack(u, eligible.data(), C, budget, N, &critical);
    } else if (C != nullptr) {
      // Lazy steps re-evaluate the stale gains the knapsack takes (a few under a token budget):
      // a candidate the spent budget excludes is never re-evaluated by the picks, and its gain
      // from an early step would loosen the bound. The CELF heap keeps its older, larger keys.
      adds = bounder.LazyKnapsack(
          u, eligible.data(), C, budget, N,
          [&](int64_t i) { return stamp[i] == step || seen[i] == step; },
          [&](int64_t i) { u[i] = gain(i), seen[i] = static_cast<int32_t>(step); });
    }
    // Lazy without costs: the heap holds exactly the eligible candidates, keyed by u, so its K
    // largest keys come from a walk down its top (O(K log K), largest first, as TopK sums them).
    const T top = lazy && C == nullptr ? heap_top_k()
                  : zready              ? bounder.TopKOf(zgain.data(), K, N)
                                        : bounder.TopK(u, eligible.data(), K, N);
    zready = false;
    adds = top < adds ? top : adds;
    bound = value + adds < bound ? value + adds : bound;
    if (best.j < 0 || best.gain < floor) break;
    const int64_t j = best.j;
    const T* row = S + j * N;
    if (SI != nullptr) {  // candidate j's column
      for (int64_t i = 0; i < N; ++i) column[i] = SI[i * N + j];
      row = column.data();
    }
    if (saturated) {
      for (int64_t i = 0; i < N; ++i) best_sim[i] = row[i] > best_sim[i] ? row[i] : best_sim[i];
      for (int64_t q = 0; q < Q; ++q) {
        T* c = cover.data() + q * N;
        const T* r = W + q * N;
        for (int64_t i = 0; i < N; ++i) c[i] = r[i] < best_sim[i] ? r[i] : best_sim[i];
      }
    } else {
      for (int64_t q = 0; q < Q; ++q) {
        T* c = cover.data() + q * N;
        const T r = weighted ? W[q * N + j] : T(1);
        for (int64_t i = 0; i < N; ++i) {
          const T x = weighted ? r * row[i] : row[i];
          c[i] = x > c[i] ? x : c[i];
        }
      }
    }
    value = 0;
    for (int64_t q = 0; q < Q; ++q) value += Sum(cover.data() + q * N, N);
    avail[j] = 0;
    eligible[j] = 0;
    if (C != nullptr) spent += C[j];
    if (lazy) pop_top();  // j is the heap's top
    I[step] = static_cast<int32_t>(j);
    G[step] = best.gain;
    X[step] = value;
    ++taken;
  }
  for (; step < K; ++step) {
    I[step] = -1;
    G[step] = 0;
    X[step] = value;
  }
  *spent_out = spent;
  *bound_out = bound;
  return taken;
}

// dst[j, i] = src[i, j] for the rows j in [lo, hi) of dst [N, N], in cache-sized tiles; float32
// in 8 x 8 blocks transposed in registers (Transpose8), the ragged edges one by one.
template <typename T>
void TransposeRows(const T* __restrict src, T* __restrict dst, int64_t N, int64_t lo, int64_t hi) {
  constexpr int64_t kTile = 64;
  int64_t j8 = lo, i8 = 0;  // [lo, j8) x [0, i8) done in blocks
  if constexpr (std::is_same<T, float>::value) {
    using jaxsel::F8;
    j8 = lo + (hi - lo) / 8 * 8, i8 = N / 8 * 8;
    for (int64_t jb = lo; jb < j8; jb += kTile)
      for (int64_t ib = 0; ib < i8; ib += kTile)
        for (int64_t j0 = jb; j0 < std::min(jb + kTile, j8); j0 += 8)
          for (int64_t i0 = ib; i0 < std::min(ib + kTile, i8); i0 += 8) {
            F8 r[8];
            for (int k = 0; k < 8; ++k) std::memcpy(&r[k], src + (i0 + k) * N + j0, sizeof(F8));
            jaxsel::Transpose8(r);
            for (int c = 0; c < 8; ++c) std::memcpy(dst + (j0 + c) * N + i0, &r[c], sizeof(F8));
          }
  }
  for (int64_t j = lo; j < j8; ++j)
    for (int64_t i = i8; i < N; ++i) dst[j * N + i] = src[i * N + j];
  for (int64_t jb = j8; jb < hi; jb += kTile) {
    const int64_t je = std::min(jb + kTile, hi);
    for (int64_t ib = 0; ib < N; ib += kTile) {
      const int64_t ie = std::min(ib + kTile, N);
      for (int64_t j = jb; j < je; ++j)
        for (int64_t i = ib; i < ie; ++i) dst[j * N + i] = src[i * N + j];
    }
  }
}

// Scratch read at random rows: 2 MiB aligned and, on Linux, backed by huge pages where the
// kernel allows (fewer TLB misses per row); released by HugeFree.
template <typename T>
T* HugeAlloc(int64_t count) {
  constexpr size_t kAlign = size_t(2) << 20;
  const size_t bytes = (static_cast<size_t>(count) * sizeof(T) + kAlign - 1) / kAlign * kAlign;
  void* p = nullptr;
  if (posix_memalign(&p, kAlign, bytes) != 0) return nullptr;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  madvise(p, bytes, MADV_HUGEPAGE);
#endif
  return static_cast<T*>(p);
}
struct HugeFree {
  void operator()(void* p) const { std::free(p); }
};

template <typename T>
ffi::Error Greedy(ffi::ThreadPool pool, ffi::AnyBuffer rows, ffi::AnyBuffer w, ffi::Buffer<ffi::PRED> valid,
                  ffi::Buffer<ffi::F32> costs, ffi::Buffer<ffi::F32> budget, ffi::AnyBuffer min_gain,
                  ffi::Result<ffi::Buffer<ffi::S32>> indices, ffi::Result<ffi::AnyBuffer> gains,
                  ffi::Result<ffi::AnyBuffer> values, ffi::Result<ffi::Buffer<ffi::S32>> count,
                  ffi::Result<ffi::Buffer<ffi::F32>> cost, ffi::Result<ffi::AnyBuffer> bound,
                  bool weighted, bool lazy, bool has_costs, bool ratio, bool saturated,
                  bool item_major) {
  auto rd = rows.dimensions(), wd = w.dimensions(), vd = valid.dimensions(), md = min_gain.dimensions();
  auto kd = costs.dimensions(), bd = budget.dimensions();
  auto od = indices->dimensions();
  const int64_t nb = static_cast<int64_t>(od.size()) - 1;
  if (nb < 0 || static_cast<int64_t>(rd.size()) != nb + 2 || static_cast<int64_t>(wd.size()) != nb + 2 ||
      static_cast<int64_t>(vd.size()) != nb + 1 || static_cast<int64_t>(md.size()) != nb ||
      static_cast<int64_t>(kd.size()) != nb + 1 || static_cast<int64_t>(bd.size()) != nb)
    return ffi::Error::InvalidArgument("jaxsel_cover_greedy: inconsistent ranks");
  weighted |= saturated;  // saturated coverage always reads its [Q, N] levels from w
  Problem pr{rd[nb + 1], weighted ? wd[nb] : 1, od[nb], weighted, lazy, ratio, saturated};
  const int64_t N = pr.N, Q = pr.Q, K = pr.K;
  if (rd[nb] != N || vd[nb] != N || (weighted && wd[nb + 1] != N) || (has_costs && kd[nb] != N))
    return ffi::Error::InvalidArgument("jaxsel_cover_greedy: inconsistent shapes");
  const Batch batch(od, nb);
  const T* rp = reinterpret_cast<const T*>(rows.untyped_data());
  const T* wp = reinterpret_cast<const T*>(w.untyped_data());
  const bool* vp = valid.typed_data();
  const float* kp = costs.typed_data();
  const float* bp = budget.typed_data();
  const T* mp = reinterpret_cast<const T*>(min_gain.untyped_data());
  int32_t* ip = indices->typed_data();
  T* gp = reinterpret_cast<T*>(gains->untyped_data());
  T* xp = reinterpret_cast<T*>(values->untyped_data());
  int32_t* cp = count->typed_data();
  float* sp = cost->typed_data();
  T* bp_out = reinterpret_cast<T*>(bound->untyped_data());
  const int64_t threads = std::max<int64_t>(1, pool.num_threads());
  // Spread problems over the threads when there are enough of them, else each step's rows.
  const bool by_problem = batch.count >= 2 * threads || N * N * Q < (int64_t(1) << 18);
  auto pfor = [&](int64_t total, int64_t grain, const auto& fn) { ParallelFor(pool, total, grain, fn); };
  // Item-major input (rows[b, i, j] = s_ij: an objective built inside jit hands the kernel its
  // input as it came, so XLA makes no transposed copy of the batch): one large problem, or a
  // lazy run outside the rule below, is transposed into a scratch buffer first (in cache for a
  // small problem) and solved as candidate-major. Small item-major problems, one per thread, are solved straight from the input with dense
  // steps (SolveOne's SI: every gain at once, a register top-K for the certificate): faster
  // than a transpose and CELF's heap while K·N is small (bench/README.md, "direct item-major":
  // 512 x 100, k = 10), and the same picks, gains and values; lazy then returns dense
  // greedy's certificate, as jaxsel.greedy's XLA loop does on small problems. Dense runs of
  // problems solved one per thread always take them: at N = 512-1024 they measured faster
  // than a transpose into scratch too.
  constexpr int64_t kDirectMaxK = 16, kDirectMaxNK = 2048;
  const bool direct = item_major && by_problem && (!lazy || (K <= kDirectMaxK && N * K <= kDirectMaxNK));
  // Direct problems that fit a core's cache twice over are fetched ahead, while the one
  // before is solved (SolveOne's `next`): measured 7% faster on 512 x 100 (bench/README).
  constexpr int64_t kPrefetchMaxBytes = int64_t(256) << 10;
  const bool prefetch = direct && N * N * int64_t(sizeof(T)) <= kPrefetchMaxBytes;
  std::vector<T> whole;  // one large problem's transpose, made on all threads
  if (item_major && !by_problem && batch.count > 0) whole.resize(N * N);
  auto matrix = [&](int64_t b) -> const T* {
    const T* src = rp + batch.Offset(b, rd, N * N);
    if (!item_major || direct) return src;
    if (!by_problem) {
      pfor(N, std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(1, N)),
           [&](int64_t lo, int64_t hi) { TransposeRows<T>(src, whole.data(), N, lo, hi); });
      return whole.data();
    }
    thread_local std::vector<T> scratch;
    if (static_cast<int64_t>(scratch.size()) < N * N) scratch.resize(N * N);
    TransposeRows<T>(src, scratch.data(), N, 0, N);
    return scratch.data();
  };
  // One large float32 lazy problem gets the scratch of its byte bounds (SolveOne): N·N bytes,
  // then the N steps; kept between calls (the first call pays for its pages; at most
  // kBoundsMaxBytes), or made for this call alone while another call holds it.
  uint8_t* bytes = nullptr;
  static std::mutex bytes_mu;
  static std::unique_ptr<uint8_t[], HugeFree> bytes_kept;
  static int64_t bytes_kept_size = 0;
  std::unique_lock<std::mutex> bytes_lock(bytes_mu, std::defer_lock);
  std::unique_ptr<uint8_t[], HugeFree> bytes_own;
  constexpr int64_t kBoundsMinN = 2048, kBoundsMaxBytes = int64_t(512) << 20;
  const int64_t bytes_size = N * N + 4 * N + 64;  // the steps start 64-byte aligned
  if (std::is_same<T, float>::value && lazy && !saturated && !by_problem && N >= kBoundsMinN &&
      bytes_size <= kBoundsMaxBytes && batch.count > 0) {
    if (bytes_lock.try_lock()) {
      if (bytes_kept_size < bytes_size) {
        bytes_kept.reset();
        bytes_kept.reset(HugeAlloc<uint8_t>(bytes_size));
        bytes_kept_size = bytes_kept ? bytes_size : 0;
      }
      bytes = bytes_kept.get();
    } else {
      bytes_own.reset(HugeAlloc<uint8_t>(bytes_size));
      bytes = bytes_own.get();
    }  // out of memory: bytes stays null, and the solve runs without the bounds
  }
  float* bytes_step = bytes == nullptr ? nullptr : reinterpret_cast<float*>(bytes + (N * N + 63) / 64 * 64);
  auto solve = [&](int64_t b, const T* next = nullptr) {
    const T* m = matrix(b);
    cp[b] = SolveOne<T>(pr, direct ? nullptr : m, direct ? m : nullptr, bytes, bytes_step, wp + batch.Offset(b, wd, weighted ? Q * N : 0),
                        vp + batch.Offset(b, vd, N), has_costs ? kp + batch.Offset(b, kd, N) : nullptr,
                        bp[batch.Offset(b, bd, 1)], mp[batch.Offset(b, md, 1)], !by_problem, threads, pfor,
                        ip + b * K, gp + b * K, xp + b * K, sp + b, bp_out + b, next);
  };
  if (by_problem) {
    ParallelFor(pool, batch.count, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) solve(b, prefetch && b + 1 < hi ? rp + batch.Offset(b + 1, rd, N * N) : nullptr);
    });
  } else {
    for (int64_t b = 0; b < batch.count; ++b) solve(b);
  }
  return ffi::Error::Success();
}

ffi::Error CoverGreedy(ffi::ThreadPool pool, ffi::AnyBuffer rows, ffi::AnyBuffer w, ffi::Buffer<ffi::PRED> valid,
                       ffi::Buffer<ffi::F32> costs, ffi::Buffer<ffi::F32> budget, ffi::AnyBuffer min_gain,
                       ffi::Result<ffi::Buffer<ffi::S32>> indices, ffi::Result<ffi::AnyBuffer> gains,
                       ffi::Result<ffi::AnyBuffer> values, ffi::Result<ffi::Buffer<ffi::S32>> count,
                       ffi::Result<ffi::Buffer<ffi::F32>> cost, ffi::Result<ffi::AnyBuffer> bound,
                       bool weighted, bool lazy, bool has_costs, bool ratio, bool saturated,
                       bool item_major) {
  auto t = rows.element_type();
  if (w.element_type() != t || min_gain.element_type() != t || gains->element_type() != t ||
      values->element_type() != t || bound->element_type() != t)
    return ffi::Error::InvalidArgument("jaxsel_cover_greedy: mixed dtypes");
  if (t == ffi::DataType::F32)
    return Greedy<float>(pool, rows, w, valid, costs, budget, min_gain, indices, gains, values, count, cost,
                         bound, weighted, lazy, has_costs, ratio, saturated, item_major);
  if (t == ffi::DataType::F64)
    return Greedy<double>(pool, rows, w, valid, costs, budget, min_gain, indices, gains, values, count, cost,
                          bound, weighted, lazy, has_costs, ratio, saturated, item_major);
  return ffi::Error::InvalidArgument("jaxsel_cover_greedy: float32 or float64 only");
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxselCoverGains, CoverGains,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<bool>("weighted"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxselCoverGreedy, CoverGreedy,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::PRED>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<bool>("weighted")
                                  .Attr<bool>("lazy")
                                  .Attr<bool>("has_costs")
                                  .Attr<bool>("ratio")
                                  .Attr<bool>("saturated")
                                  .Attr<bool>("item_major"));

// ---------------------------------------------------------------------------------------------
// Host-side preparation of a similarity matrix in host memory (a NumPy array), called through
// ctypes, not XLA: the input checks (finite, least entry) and the candidate-major copy (the
// transpose, a dtype conversion, the valid mask) in one pass over the matrix.

namespace jaxsel_host {

using jaxsel::F8;
using jaxsel::Transpose8;
typedef double D8 __attribute__((vector_size(64)));
typedef int32_t I8 __attribute__((vector_size(32)));
typedef int64_t L8 __attribute__((vector_size(64)));

template <typename I> struct V8;
template <> struct V8<float> { typedef F8 type; typedef I8 mask; };
template <> struct V8<double> { typedef D8 type; typedef L8 mask; };

template <typename V>
inline void StoreU(void* p, V v) {
  std::memcpy(p, &v, sizeof(V));
}

// Running statistics of the input: least entry (NaN ignored) and whether any is NaN/inf.
template <typename I>
struct Stats {
  typedef typename V8<I>::type V;
  typedef typename V8<I>::mask M;
  V mn;
  M bad = {};
  I mn1 = std::numeric_limits<I>::infinity();
  bool bad1 = false;
  Stats() { mn = V{} + std::numeric_limits<I>::infinity(); }
  inline void Add(V x) {
    mn = x < mn ? x : mn;
    V d = x - x;  // 0 for finite entries, NaN for NaN and ±inf
    bad |= (d != d);
  }
  inline void Add1(I x) {
    mn1 = x < mn1 ? x : mn1;
    bad1 |= !(x - x == 0);
  }
  I Min() const {
    I m = mn1;
    for (int l = 0; l < 8; ++l) m = mn[l] < m ? mn[l] : m;
    return m;
  }
  bool Bad() const {
    bool b = bad1;
    for (int l = 0; l < 8; ++l) b |= bad[l] != 0;
    return b;
  }
};

inline F8 ToF8(F8 x) { return x; }
inline F8 ToF8(D8 x) { return __builtin_convertvector(x, F8); }


// Output rows [lo, hi) of `out` [n, n], or with out == nullptr a check of input rows [lo, hi).
// transpose: out[j, i] = in[i, j], else in[j, i]; with `valid` (or nullptr) an entry in an
// invalid row or column is written as zero. Returns bit 1 when an input entry is NaN/inf and
// bit 2 when a written entry is (a float64 beyond float32's range); *min_out is the least
// input entry seen (NaN ignored).
template <typename I, typename O>
int32_t Prepare(const I* __restrict in, O* __restrict out, int64_t n, int64_t lo, int64_t hi,
                bool transpose, const uint8_t* __restrict valid, double* min_out) {
  typedef typename V8<I>::type V;
  Stats<I> st;
  bool bad_out = false;
  auto put = [&](O* dst, I x, bool keep) {
    const O y = keep ? static_cast<O>(x) : O(0);
    bad_out |= !(y - y == 0);
    *dst = y;
  };
  if (out == nullptr || !transpose || !std::is_same<O, float>::value) {
    if (out != nullptr && transpose) {  // float64 output (x64): a plain tiled transpose
      constexpr int64_t T = 32;
      for (int64_t jb = lo; jb < hi; jb += T)
        for (int64_t ib = 0; ib < n; ib += T)
          for (int64_t j = jb; j < std::min(jb + T, hi); ++j)
            for (int64_t i = ib; i < std::min(ib + T, n); ++i) {
              const I x = in[i * n + j];
              st.Add1(x);
              put(out + j * n + i, x, valid == nullptr || (valid[i] && valid[j]));
            }
    } else {
      for (int64_t j = lo; j < hi; ++j) {
        const I* src = in + j * n;
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) st.Add(Load<V>(src + i));
        for (; i < n; ++i) st.Add1(src[i]);
        if (out == nullptr) continue;
        O* dst = out + j * n;
        if (valid == nullptr && std::is_same<I, O>::value) {
          std::memcpy(dst, src, n * sizeof(O));
        } else {
          for (i = 0; i < n; ++i) put(dst + i, src[i], valid == nullptr || (valid[i] && valid[j]));
        }
      }
    }
  } else {
    // 8 x 8 blocks transposed in registers; a strip of 16 output rows reads whole 64-byte
    // lines of 8 input rows at a time.
    float* o = reinterpret_cast<float*>(out);
    F8 bad8 = {};
    // Tiles of 64 output rows x 128 input rows: few enough pages for the TLB.
    constexpr int64_t TJ = 256, TI = 256;
    const int64_t j8 = lo + (hi - lo) / 8 * 8, i8 = n / 8 * 8;
    for (int64_t jb = lo; jb < j8; jb += TJ) {
      const int64_t je = std::min(jb + TJ, j8);
      for (int64_t ib = 0; ib < i8; ib += TI) {
        const int64_t ie = std::min(ib + TI, i8);
        for (int64_t j0 = jb; j0 < je; j0 += 8) {
          for (int64_t i0 = ib; i0 < ie; i0 += 8) {
            F8 r[8];
            for (int k = 0; k < 8; ++k) {
              V x = Load<V>(in + (i0 + k) * n + j0);
              st.Add(x);
              r[k] = ToF8(x);
            }
            Transpose8(r);
            for (int c = 0; c < 8; ++c) {
              F8 y = r[c];
              if (valid != nullptr) {
                F8 keep;
                for (int l = 0; l < 8; ++l) keep[l] = (valid[j0 + c] && valid[i0 + l]) ? 1.0f : 0.0f;
                y = keep != 0 ? y : F8{};
              }
              bad8 += y - y;
              StoreU(o + (j0 + c) * n + i0, y);
            }
          }
        }
      }
    }
    // The ragged edges: input rows past the last multiple of 8, output rows past j8.
    for (int64_t i = i8; i < n; ++i)
      for (int64_t j = lo; j < j8; ++j) {
        const I x = in[i * n + j];
        st.Add1(x);
        put(out + j * n + i, x, valid == nullptr || (valid[i] && valid[j]));
      }
    for (int64_t j = j8; j < hi; ++j)
      for (int64_t i = 0; i < n; ++i) {
        const I x = in[i * n + j];
        st.Add1(x);
        put(out + j * n + i, x, valid == nullptr || (valid[i] && valid[j]));
      }
    for (int l = 0; l < 8; ++l) bad_out |= bad8[l] != 0;
  }
  *min_out = static_cast<double>(st.Min());
  return (st.Bad() ? 1 : 0) | (bad_out ? 2 : 0);
}

// Whether in[i, j] == in[j, i] for the rows i in [lo, hi) and every j > i (tiles of 8 x 8
// compared in registers), with the statistics of rows [lo, hi). Stops early (returning bit 4)
// at the first difference, or when *stop becomes non-zero (another range found one).
template <typename I>
int32_t Symmetric(const I* __restrict in, int64_t n, int64_t lo, int64_t hi, const volatile int32_t* stop,
                  double* min_out) {
  typedef typename V8<I>::type V;
  Stats<I> st;
  for (int64_t i0 = lo; i0 < hi; i0 += 8) {
    if (*stop) return 4;
    const int64_t ie = std::min(i0 + 8, hi);
    for (int64_t i = i0; i < ie; ++i) {
      const I* row = in + i * n;
      int64_t j = 0;
      for (; j + 8 <= n; j += 8) st.Add(Load<V>(row + j));
      for (; j < n; ++j) st.Add1(row[j]);
    }
    if (ie - i0 == 8) {
      // The diagonal block and the blocks right of it, against the blocks below it.
      int64_t j0 = i0;
      for (; j0 + 8 <= n; j0 += 8) {
        F8 a[8], b[8];
        for (int k = 0; k < 8; ++k) {
          a[k] = ToF8(Load<V>(in + (i0 + k) * n + j0));
          b[k] = ToF8(Load<V>(in + (j0 + k) * n + i0));
        }
        Transpose8(a);
        I8 diff = {};
        for (int k = 0; k < 8; ++k) diff |= (a[k] != b[k]) & ((a[k] == a[k]) | (b[k] == b[k]));
        bool any = false;
        for (int l = 0; l < 8; ++l) any |= diff[l] != 0;
        if (any) return 4;
        if (std::is_same<I, double>::value) {  // float32 images agree; the float64 values must too
          for (int k = 0; k < 8; ++k)
            for (int c = 0; c < 8; ++c)
              if (in[(i0 + k) * n + j0 + c] != in[(j0 + c) * n + i0 + k]) return 4;
        }
      }
      for (int64_t i = i0; i < ie; ++i)
        for (int64_t j = j0; j < n; ++j)
          if (in[i * n + j] != in[j * n + i]) return 4;
    } else {
      for (int64_t i = i0; i < ie; ++i)
        for (int64_t j = i + 1; j < n; ++j)
          if (in[i * n + j] != in[j * n + i]) return 4;
    }
  }
  *min_out = static_cast<double>(st.Min());
  return st.Bad() ? 1 : 0;
}

// A randomized symmetry test of a float32 matrix, with the input checks, in one pass over rows
// [lo, hi) (and, with out != nullptr, their straight copy): with x_ij the bit pattern of in[i, j]
// as an integer and `a` [n] random 64-bit weights, row_hash[i] = Σ_j a_j x_ij and
// col_hash[j] += a_i x_ij (mod 2^64). A symmetric matrix has row_hash == col_hash (summed over
// all rows). A matrix with some x_kj ≠ x_jk has (row_hash − col_hash)_k = Σ_j a_j (x_kj − x_jk),
// and as each difference is below 2^32 in size, a uniform a_j makes that zero with probability
// at most 2^-32 (Freivalds' test in the integers mod 2^64). Returns bit 1 when an entry is
// NaN/inf; *min_out is the least entry.
inline int32_t SymmetryHash(const float* __restrict in, float* __restrict out, int64_t n, int64_t lo, int64_t hi,
                            const uint64_t* __restrict a, uint64_t* __restrict row_hash,
                            uint64_t* __restrict col_hash, double* min_out) {
  typedef uint64_t U8 __attribute__((vector_size(64)));
  typedef uint32_t W8 __attribute__((vector_size(32)));
  Stats<float> st;
  // Rows [i, i + R): their terms of a column block are summed in registers and added to
  // col_hash once (the sums are mod 2^64, in any order the same), so col_hash (8n bytes) is
  // read and written once per R rows instead of once per row: at N = 10000 it was most of the
  // pass's cache traffic. kRows rows at a time, the last few one by one.
  auto rows = [&](auto rows_at_once, int64_t i) {
    constexpr int64_t R = decltype(rows_at_once)::value;
    U8 ai[R], acc[R];
    for (int64_t r = 0; r < R; ++r) ai[r] = U8{} + a[i + r], acc[r] = U8{};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
      const U8 aj = Load<U8>(a + j);
      U8 col = {};
      for (int64_t r = 0; r < R; ++r) {
        const F8 x = Load<F8>(in + (i + r) * n + j);
        st.Add(x);
        W8 w;
        std::memcpy(&w, &x, sizeof(w));
        const U8 b = __builtin_convertvector(w, U8);
        acc[r] += b * aj;
        col += b * ai[r];
      }
      StoreU(col_hash + j, Load<U8>(col_hash + j) + col);
    }
    for (int64_t r = 0; r < R; ++r) {
      const float* src = in + (i + r) * n;
      uint64_t h = 0;
      for (int l = 0; l < 8; ++l) h += acc[r][l];
      for (int64_t t = j; t < n; ++t) {
        st.Add1(src[t]);
        uint32_t w;
        std::memcpy(&w, src + t, 4);
        h += a[t] * w;
        col_hash[t] += a[i + r] * w;
      }
      row_hash[i + r] = h;
      if (out != nullptr) std::memcpy(out + (i + r) * n, src, n * sizeof(float));
    }
  };
#if defined(__AVX512F__)
  constexpr int64_t kRows = 8;
#else
  constexpr int64_t kRows = 4;  // 16 vector registers
#endif
  int64_t i = lo;
  for (; i + kRows <= hi; i += kRows) rows(std::integral_constant<int64_t, kRows>{}, i);
  for (; i < hi; ++i) rows(std::integral_constant<int64_t, 1>{}, i);
  *min_out = static_cast<double>(st.Min());
  return st.Bad() ? 1 : 0;
}

}  // namespace jaxsel_host

// `count` problems [count, n, n] one after another (valid: [count, n]); rows [lo, hi) of each.
extern "C" int32_t JaxselHostPrepare(const void* in, int32_t in_f64, void* out, int32_t out_f64, int64_t n,
                                     int64_t count, int64_t lo, int64_t hi, int32_t transpose,
                                     const uint8_t* valid, double* min_out) {
  using jaxsel_host::Prepare;
  int32_t flags = 0;
  double mn = std::numeric_limits<double>::infinity();
  for (int64_t b = 0; b < count; ++b) {
    const int64_t off = b * n * n;
    const uint8_t* v = valid == nullptr ? nullptr : valid + b * n;
    double m = mn;
    if (in_f64) {
      const double* x = static_cast<const double*>(in) + off;
      flags |= out_f64 ? Prepare<double, double>(x, static_cast<double*>(out) + off, n, lo, hi, transpose, v, &m)
                       : Prepare<double, float>(x, static_cast<float*>(out) + off, n, lo, hi, transpose, v, &m);
    } else {
      if (out_f64) return -1;
      flags |= Prepare<float, float>(static_cast<const float*>(in) + off, static_cast<float*>(out) + off, n, lo,
                                     hi, transpose, v, &m);
    }
    mn = m < mn ? m : mn;
  }
  *min_out = mn;
  return flags;
}

extern "C" int32_t JaxselHostSymmetric(const void* in, int32_t in_f64, int64_t n, int64_t count, int64_t lo,
                                       int64_t hi, const int32_t* stop, double* min_out) {
  using jaxsel_host::Symmetric;
  int32_t flags = 0;
  double mn = std::numeric_limits<double>::infinity();
  for (int64_t b = 0; b < count && !(flags & 4); ++b) {
    double m = mn;
    flags |= in_f64 ? Symmetric<double>(static_cast<const double*>(in) + b * n * n, n, lo, hi, stop, &m)
                    : Symmetric<float>(static_cast<const float*>(in) + b * n * n, n, lo, hi, stop, &m);
    mn = m < mn ? m : mn;
  }
  *min_out = mn;
  return flags;
}

// SymmetryHash over rows [lo, hi) of one float32 problem; col_hash [n] is this range's own.
extern "C" int32_t JaxselHostSymmetryHash(const float* in, float* out, int64_t n, int64_t lo, int64_t hi,
                                          const uint64_t* a, uint64_t* row_hash, uint64_t* col_hash,
                                          double* min_out) {
  return jaxsel_host::SymmetryHash(in, out, n, lo, hi, a, row_hash, col_hash, min_out);
}
