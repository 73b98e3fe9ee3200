// Byte upper bounds of float32 candidate rows, for lazy greedy on large problems: a stale
// candidate is first bounded from its row rounded up to bytes (a quarter of the bytes to
// read), and its float32 row is read only when that bound keeps it on top of the heap.
#ifndef JAXSEL_CSRC_BYTE_BOUNDS_H_
#define JAXSEL_CSRC_BYTE_BOUNDS_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "simd.h"

namespace jaxsel {

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
  // The largest entry and whether all are finite do not depend on the order they are met in:
  // the widest vector the target has (a 64-byte one would be kept in memory on AVX2).
#if defined(__AVX512F__)
  using V = Vec<float>::type;
#else
  using V = F8;
#endif
  constexpr int64_t L = sizeof(V) / sizeof(float);
  V vmax = {}, vbad = {};  // vbad sums x − x: 0, or NaN once an entry is NaN or ±inf
  int64_t j = 0;
  {
    // Four chains, so that the loop is not bound by the latency of one addition (neither
    // result depends on the order the entries are met in).
    V m[4] = {}, b[4] = {};
    for (; j + 4 * L <= n; j += 4 * L)
      for (int k = 0; k < 4; ++k) {
        const V v = Load<V>(x + j + k * L);
        m[k] = Max(v, m[k]);
        b[k] += v - v;
      }
    vmax = Max(Max(m[0], m[1]), Max(m[2], m[3]));
    vbad = (b[0] + b[1]) + (b[2] + b[3]);
  }
  for (; j + L <= n; j += L) {
    const V v = Load<V>(x + j);
    vmax = Max(v, vmax);
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
#elif defined(__AVX2__)
  // ⌈x / step⌉ ≤ 255 (255·step ≥ max x) and the packs saturate, so a negative lane (or one below
  // int32's range) gives 0 without the clamps of the scalar code. Where step ≤ 1, x > 0 gives
  // x / step ≥ x > 0, so only a step above 1 needs the fix-up to 1.
  auto quantize = [&](auto fix) {
    constexpr bool kFix = decltype(fix)::value;
    const __m256 vinv = _mm256_set1_ps(inv), zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
    for (; i + 32 <= n; i += 32) {
      __m256i w[4];
      for (int h = 0; h < 4; ++h) {
        const __m256 xv = _mm256_loadu_ps(x + i + 8 * h);
        __m256 y = _mm256_ceil_ps(_mm256_mul_ps(xv, vinv));
        if constexpr (kFix)
          y = _mm256_blendv_ps(y, one, _mm256_and_ps(_mm256_cmp_ps(xv, zero, _CMP_GT_OQ), _mm256_cmp_ps(y, one, _CMP_LT_OQ)));
        w[h] = _mm256_cvttps_epi32(y);
      }
      // 32 int32 to bytes, saturating: the packs interleave 128-bit lanes, the permute restores order.
      const __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(w[0], w[1]), _mm256_packs_epi32(w[2], w[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i),
                          _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
  };
  if (step > 1.0f) quantize(std::true_type{});
  else quantize(std::false_type{});
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
}  // namespace jaxsel

#endif  // JAXSEL_CSRC_BYTE_BOUNDS_H_
