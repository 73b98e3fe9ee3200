// Fused multi-head self-attention forward (float32) for jaxsel's BERT encoders, as an XLA
// FFI handler (CPU).
//
// qkv [..., R, 3H] rows (query | key | value, each H = heads · d, head-major within),
// qkv_bias [..., 3H] (added here, so XLA need not write the rows twice), bias [..., R] (the
// additive key bias of each row: 0, or a large negative on masked keys),
// bounds [..., S + 1] s32 (sequence s owns rows [bounds[s], bounds[s + 1])) → out [..., R, H].
//
// Per sequence and head: out_i = Σ_k e_ik v_k / Σ_k e_ik with e_ik = exp(s_ik − max_k s_ik),
// s_ik = (q_i · k_k) · scale + bias_k, over the keys of the sequence: XLA's formula in
// jaxsel/encoders/bert.py, same float32 operations in a different summation order. Keys after
// the last unmasked key of a sequence are skipped: their e is exactly 0 in float32. Rows
// outside every sequence (the filler rows of a packed batch) are zero. Leading axes are
// vmap's (all the same size: "broadcast_all"). (sequence, head) pairs run in parallel on
// XLA's intra-op thread pool.
//
// The rows may be a padded batch (bounds = 0, L, 2L, ...) or the packed real tokens of one
// (bounds = running sum of the lengths): attention never needs them laid out [B, n, L, d].

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>
#if defined(__AVX512F__) || defined(__FMA__)
#include <immintrin.h>
#endif

#include "parallel.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using jaxsel::ParallelFor;

typedef float V __attribute__((vector_size(64)));  // 16 floats: one AVX-512 register
typedef int32_t VI __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;
constexpr int64_t kQueries = 8;  // query rows per block: 8 × 2 vector accumulators
constexpr float kMasked = -1e30f;  // a key whose bias is below this is masked

inline V Load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

inline void Store(float* p, V v) { std::memcpy(p, &v, sizeof(V)); }

// a · b + c in one rounding (the compiler does not contract `a * b + c` under -std=c++17).
inline V Fma(V a, V b, V c) {
#if defined(__AVX512F__)
  __m512 r = _mm512_fmadd_ps(reinterpret_cast<__m512&>(a), reinterpret_cast<__m512&>(b),
                             reinterpret_cast<__m512&>(c));
  return reinterpret_cast<V&>(r);
#elif defined(__FMA__)
  __m256 a2[2], b2[2], c2[2];
  std::memcpy(a2, &a, 64);
  std::memcpy(b2, &b, 64);
  std::memcpy(c2, &c, 64);
  c2[0] = _mm256_fmadd_ps(a2[0], b2[0], c2[0]);
  c2[1] = _mm256_fmadd_ps(a2[1], b2[1], c2[1]);
  V r;
  std::memcpy(&r, c2, 64);
  return r;
#else
  return a * b + c;
#endif
}

// x in every lane (not `V{} + x`: 0 + x is not x for x = −0, so that costs a scalar add).
inline V Splat(float x) { return V{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }

// exp(x) for x <= 0 (Cephes expf: range reduction by ln 2 in two parts, degree-6 polynomial;
// within about 1 ulp of the true value); −inf (masked keys, padding) gives 0.
inline V Exp(V x) {
#if defined(__AVX512F__)
  // x ≥ −104: exp is 0 in float32 below; AVX-512's round and scale (p · 2^n, to denormals and 0).
  __m512 xv = _mm512_max_ps(reinterpret_cast<__m512&>(x), _mm512_set1_ps(-104.0f));
  __m512 nv = _mm512_roundscale_ps(_mm512_mul_ps(xv, _mm512_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  V n, xc;
  std::memcpy(&n, &nv, sizeof(V));
  std::memcpy(&xc, &xv, sizeof(V));
#else
  const V lo = Splat(-87.33654f);
  const VI under = x < lo;
  const V xc = x < lo ? lo : x;
  const V magic = Splat(12582912.0f);  // 1.5 · 2^23: adding it rounds to an integer
  const V n = (xc * Splat(1.44269504088896341f) + magic) - magic;
#endif
  V r = Fma(n, Splat(-0.693359375f), xc);
  r = Fma(n, Splat(2.12194440e-4f), r);
  V p = Splat(1.9875691500e-4f);
  p = Fma(p, r, Splat(1.3981999507e-3f));
  p = Fma(p, r, Splat(8.3334519073e-3f));
  p = Fma(p, r, Splat(4.1665795894e-2f));
  p = Fma(p, r, Splat(1.6666665459e-1f));
  p = Fma(p, r, Splat(5.0000001201e-1f));
  p = Fma(p, r * r, r) + Splat(1.0f);
#if defined(__AVX512F__)
  __m512 y = _mm512_scalef_ps(reinterpret_cast<__m512&>(p), nv);
  return reinterpret_cast<V&>(y);
#else
  // 2^n for n in [−126, 0]; below (x < −87.3, under float's smallest normal) 0.
  VI e = (__builtin_convertvector(n, VI) + 127) << 23;
  V two_n;
  std::memcpy(&two_n, &e, sizeof(V));
  return under ? Splat(0.0f) : p * two_n;
#endif
}

inline float MaxLanes(V a) {
  float m = a[0];
  for (int l = 1; l < kLanes; ++l) m = std::max(m, a[l]);
  return m;
}

// Σ of a vector's lanes by halving (one fixed tree).
inline float SumLanes(V a) {
  float t[kLanes];
  std::memcpy(t, &a, sizeof(t));
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) t[l] += t[l + w];
  return t[0];
}

// The register tile a_i = Σ_{t < n} x_i[t] · y[t · stride + (0 .. 31)] of kQueries rows x_i:
// 16 vector accumulators, two vector loads and kQueries broadcasts per step t.
inline void Tile(const float* const x[kQueries], const float* y, int64_t stride, int64_t n,
                 V a0[kQueries], V a1[kQueries]) {
  for (int64_t i = 0; i < kQueries; ++i) a0[i] = a1[i] = V{};
  for (int64_t t = 0; t < n; ++t) {
    const V y0 = Load(y + t * stride), y1 = Load(y + t * stride + kLanes);
    for (int64_t i = 0; i < kQueries; ++i) {
      const V xi = Splat(x[i][t]);
      a0[i] = Fma(xi, y0, a0[i]);
      a1[i] = Fma(xi, y1, a1[i]);
    }
  }
}

// Per-thread scratch, grown on demand.
struct Scratch {
  std::vector<float> kt;      // [d, nkp] keys transposed, zero-padded to nkp (multiple of 32)
  std::vector<float> v;       // [nk, dp] values, zero-padded to dp (multiple of 32)
  std::vector<float> kbias;   // [nkp] key bias, −inf on the padding
  std::vector<float> s;       // [kQueries, nkp] scores, then their exps
  std::vector<float> q;       // [kQueries, d] a block of queries
  void Fit(int64_t d, int64_t dp, int64_t nk, int64_t nkp) {
    if (static_cast<int64_t>(q.size()) < kQueries * d) q.resize(kQueries * d);
    if (static_cast<int64_t>(kt.size()) < d * nkp) kt.resize(d * nkp);
    if (static_cast<int64_t>(v.size()) < nk * dp) v.resize(nk * dp);
    if (static_cast<int64_t>(kbias.size()) < nkp) kbias.resize(nkp);
    if (static_cast<int64_t>(s.size()) < kQueries * nkp) s.resize(kQueries * nkp);
  }
};

// One (sequence, head): rows [0, n) of `q`, `k`, `v` (row stride `ld`) plus their biases
// `bq`, `bk`, `bv` [d] → `o` (row stride `ldo`).
void AttendOne(const float* q, const float* k, const float* v, const float* bq, const float* bk,
               const float* bv, const float* bias, float* o, int64_t n, int64_t d, int64_t ld, int64_t ldo,
               float scale, Scratch& sc) {
  int64_t nk = n;
  while (nk > 0 && !(bias[nk - 1] > kMasked)) --nk;
  if (nk == 0) nk = n;  // no unmasked key: every key counts, as in XLA's softmax
  const int64_t nkp = (nk + 2 * kLanes - 1) / (2 * kLanes) * (2 * kLanes);
  const int64_t dp = (d + 2 * kLanes - 1) / (2 * kLanes) * (2 * kLanes);
  sc.Fit(d, dp, nk, nkp);
  float* kt = sc.kt.data();
  float* vb = sc.v.data();
  float* kb = sc.kbias.data();
  for (int64_t j = 0; j < nk; ++j) {
    const float* kr = k + j * ld;
    const float* vr = v + j * ld;
    for (int64_t c = 0; c < d; ++c) kt[c * nkp + j] = kr[c] + bk[c];
    for (int64_t c = 0; c < d; ++c) vb[j * dp + c] = vr[c] + bv[c];
    std::fill(vb + j * dp + d, vb + (j + 1) * dp, 0.0f);
    kb[j] = bias[j];
  }
  for (int64_t c = 0; c < d; ++c) std::fill(kt + c * nkp + nk, kt + (c + 1) * nkp, 0.0f);
  std::fill(kb + nk, kb + nkp, -std::numeric_limits<float>::infinity());

  const V vscale = Splat(scale);
  for (int64_t i0 = 0; i0 < n; i0 += kQueries) {
    const int64_t nq = std::min<int64_t>(kQueries, n - i0);
    const float* qr[kQueries];
    for (int64_t i = 0; i < kQueries; ++i) {
      const float* row = q + (i0 + std::min(i, nq - 1)) * ld;  // the tail repeats a row
      float* qi = sc.q.data() + i * d;
      for (int64_t c = 0; c < d; ++c) qi[c] = row[c] + bq[c];
      qr[i] = qi;
    }
    float* s = sc.s.data();
    // Scores, 8 queries × 32 keys at a time: s = (q · k) · scale + bias, and their maxima.
    V m[kQueries];
    for (int64_t i = 0; i < kQueries; ++i) m[i] = Splat(-std::numeric_limits<float>::infinity());
    for (int64_t j = 0; j < nkp; j += 2 * kLanes) {
      V a0[kQueries], a1[kQueries];
      Tile(qr, kt + j, nkp, d, a0, a1);
      const V b0 = Load(kb + j), b1 = Load(kb + j + kLanes);
      for (int64_t i = 0; i < kQueries; ++i) {
        const V x0 = a0[i] * vscale + b0, x1 = a1[i] * vscale + b1;
        Store(s + i * nkp + j, x0);
        Store(s + i * nkp + j + kLanes, x1);
        m[i] = x0 > m[i] ? x0 : m[i];
        m[i] = x1 > m[i] ? x1 : m[i];
      }
    }
    // Softmax numerators in place, and their sums.
    float total[kQueries];
    for (int64_t i = 0; i < nq; ++i) {
      float* si = s + i * nkp;
      const V mv = Splat(MaxLanes(m[i]));
      V acc = V{};
      for (int64_t j = 0; j < nkp; j += kLanes) {
        const V e = Exp(Load(si + j) - mv);
        Store(si + j, e);
        acc += e;
      }
      total[i] = SumLanes(acc);
    }
    // Σ_k e_ik v_k, 8 queries × 32 dimensions at a time, then / Σ_k e_ik.
    const float* er[kQueries];
    for (int64_t i = 0; i < kQueries; ++i) er[i] = s + i * nkp;
    for (int64_t c0 = 0; c0 < dp; c0 += 2 * kLanes) {
      V a0[kQueries], a1[kQueries];
      Tile(er, vb + c0, dp, nk, a0, a1);
      const int64_t w = std::min<int64_t>(2 * kLanes, d - c0);
      for (int64_t i = 0; i < nq; ++i) {
        float t[2 * kLanes];
        Store(t, a0[i] / Splat(total[i]));
        Store(t + kLanes, a1[i] / Splat(total[i]));
        std::memcpy(o + (i0 + i) * ldo + c0, t, w * sizeof(float));
      }
    }
  }
}

ffi::Error Attention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> qkv, ffi::Buffer<ffi::F32> qkv_bias,
                     ffi::Buffer<ffi::F32> bias,
                     ffi::Buffer<ffi::S32> bounds, ffi::ResultBuffer<ffi::F32> out, int64_t heads,
                     float scale) {
  auto qd = qkv.dimensions(), cd = qkv_bias.dimensions(), bd = bias.dimensions(), sd = bounds.dimensions();
  auto od = out->dimensions();
  const int64_t nb = static_cast<int64_t>(od.size()) - 2;
  if (nb < 0 || static_cast<int64_t>(qd.size()) != nb + 2 || static_cast<int64_t>(cd.size()) != nb + 1 ||
      static_cast<int64_t>(bd.size()) != nb + 1 || static_cast<int64_t>(sd.size()) != nb + 1)
    return ffi::Error::InvalidArgument("jaxsel_attention: inconsistent ranks");
  int64_t g = 1;
  for (int64_t a = 0; a < nb; ++a) {
    if (qd[a] != od[a] || cd[a] != od[a] || bd[a] != od[a] || sd[a] != od[a])
      return ffi::Error::InvalidArgument("jaxsel_attention: leading axes differ");
    g *= od[a];
  }
  const int64_t R = od[nb], H = od[nb + 1], S = sd[nb] - 1;
  if (heads < 1 || H % heads != 0 || qd[nb] != R || qd[nb + 1] != 3 * H || cd[nb] != 3 * H || bd[nb] != R || S < 0)
    return ffi::Error::InvalidArgument("jaxsel_attention: inconsistent shapes");
  const int64_t d = H / heads;
  const float* qp = qkv.typed_data();
  const float* cp = qkv_bias.typed_data();
  const float* bp = bias.typed_data();
  const int32_t* sp = bounds.typed_data();
  float* op = out->typed_data();

  // Rows outside every sequence: zero.
  for (int64_t gi = 0; gi < g; ++gi) {
    const int32_t* bs = sp + gi * (S + 1);
    const int64_t first = std::clamp<int64_t>(bs[0], 0, R), last = std::clamp<int64_t>(bs[S], first, R);
    float* o = op + gi * R * H;
    std::fill(o, o + first * H, 0.0f);
    std::fill(o + last * H, o + R * H, 0.0f);
  }
  auto run = [&](int64_t lo, int64_t hi) {
    thread_local Scratch sc;
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t h = t % heads, s = (t / heads) % S, gi = t / (heads * S);
      const int32_t* bs = sp + gi * (S + 1);
      const int64_t r0 = std::clamp<int64_t>(bs[s], 0, R), r1 = std::clamp<int64_t>(bs[s + 1], r0, R);
      if (r1 == r0) continue;
      const float* base = qp + (gi * R + r0) * 3 * H + h * d;
      const float* cb = cp + gi * 3 * H + h * d;
      AttendOne(base, base + H, base + 2 * H, cb, cb + H, cb + 2 * H, bp + gi * R + r0,
                op + (gi * R + r0) * H + h * d, r1 - r0, d, 3 * H, H, scale, sc);
    }
  };
  if (S > 0) ParallelFor(pool, g * S * heads, 1, run);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxselAttention, Attention,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("heads")
                                  .Attr<float>("scale"));
