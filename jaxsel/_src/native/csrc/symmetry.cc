// jaxsel_symmetry_check (XLA FFI, CPU): whether a float32 matrix x [N, N] is symmetric, with the
// input checks of a similarity matrix (its least entry, whether every entry is finite), in one
// pass over x. A symmetric similarity is its own candidate-major layout, so the objective then
// keeps the caller's array instead of writing a transposed copy.
//
// Symmetry is Freivalds' test on the entries' bit patterns: with x_ij the bits of x[i, j] as an
// integer (below 2^32) and `a` [N] random 32-bit weights (from `seed`), row_hash[i] = Σ_j a_j x_ij
// and col_hash[j] = Σ_i a_i x_ij (mod 2^64). A symmetric matrix has row_hash == col_hash. A matrix
// with some x_kj ≠ x_jk has (row_hash − col_hash)_k = a_j d + (the other terms), d = x_kj − x_jk,
// 0 < |d| < 2^32; as |(a − a') d| < 2^64 for a ≠ a' in [0, 2^32), a ↦ a d (mod 2^64) is one to one
// there, so a uniform a_j makes the difference zero with probability at most 2^-32. Each term is
// one 32 x 32 → 64-bit multiply (PMULUDQ). (+0.0 and −0.0 at mirrored places count as asymmetric.)
//
// x [N, N] f32, seed [2] u32 → symmetric pred[], least f32[] (NaN ignored), finite pred[].

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <thread>
#include <type_traits>
#include <vector>

#include "parallel.h"
#include "simd.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxsel {
namespace {

// Vectors of the widest the target has: kW 64-bit lanes, each holding two entries' bits (the
// hashes are sums mod 2^64, the least entry a minimum: neither depends on the width or order, so
// every CPU variant agrees).
#if defined(__AVX512F__)
constexpr int kW = 8;
#else
constexpr int kW = 4;  // AVX2 and below: a 64-byte vector would be kept in memory
#endif
constexpr int kF = 2 * kW;  // entries per vector
typedef uint64_t UW __attribute__((vector_size(8 * kW)));
typedef float FW __attribute__((vector_size(4 * kF)));

// Running least entry and finiteness of the entries seen, kF lanes and one scalar.
struct Stats {
  FW mn = FW{} + std::numeric_limits<float>::infinity();
  FW bad = {};  // Σ x − x: 0 while every entry is finite, NaN after a NaN or ±inf
  float mn1 = std::numeric_limits<float>::infinity();
  bool bad1 = false;
  // The R rows' vectors at one position, folded first (one addition on the running chain).
  template <int64_t R>
  void Add(const FW (&x)[R]) {
    FW m = x[0], b = x[0] - x[0];
    for (int64_t r = 1; r < R; ++r) m = Min(x[r], m), b += x[r] - x[r];
    mn = Min(m, mn);
    bad += b;
  }
  void Add1(float x) {
    mn1 = x < mn1 ? x : mn1;
    bad1 |= !(x - x == 0.0f);
  }
  float Min1() const {
    float m = mn1;
    for (int l = 0; l < kF; ++l) m = mn[l] < m ? mn[l] : m;
    return m;
  }
  bool Finite() const {
    bool ok = !bad1;
    for (int l = 0; l < kF; ++l) ok &= bad[l] == 0.0f;
    return ok;
  }
};

// (x mod 2^32) · (y mod 2^32) lane by lane, exact in 64 bits: one PMULUDQ.
inline UW MulLow(UW x, UW y) {
#if defined(__AVX512F__)
  const __m512i r = _mm512_mul_epu32(reinterpret_cast<const __m512i&>(x), reinterpret_cast<const __m512i&>(y));
  return reinterpret_cast<const UW&>(r);
#elif defined(__AVX2__)
  const __m256i r = _mm256_mul_epu32(reinterpret_cast<const __m256i&>(x), reinterpret_cast<const __m256i&>(y));
  return reinterpret_cast<const UW&>(r);
#else
  const UW lo = UW{} + 0xffffffffull;
  return (x & lo) * (y & lo);
#endif
}

// Where column t's col_hash term sits in `col`: a vector of kF entries at j holds the even
// columns' sums in its first kW lanes and the odd ones' in the next kW (PMULUDQ takes the even
// 32-bit halves; the odd ones are shifted down to them); columns past the last whole vector
// (t ≥ nv) one by one.
inline int64_t ColSlot(int64_t t, int64_t nv) {
  if (t >= nv) return t;
  const int64_t off = t % kF;
  return t - off + (off % 2) * kW + off / 2;
}

// Rows [i, i + R) of x (row r at x + r·stride, any alignment): row_hash of each, their terms of
// col_hash added into `col` (laid out by ColSlot); with kCopy each row is also written to
// out + r·n while it is in the cache. R rows at a time, their column terms summed in registers,
// added to `col` once. `a` [n]: the weights, below 2^32.
template <int64_t R, bool kCopy>
void HashRows(const float* __restrict x, int64_t stride, float* __restrict out, int64_t n, int64_t i,
              const uint32_t* __restrict a, uint64_t* __restrict row_hash, uint64_t* __restrict col, Stats& st) {
  UW ai[R], acc[R];
  for (int64_t r = 0; r < R; ++r) ai[r] = UW{} + a[i + r], acc[r] = UW{};
  int64_t j = 0;
  for (; j + kF <= n; j += kF) {
    const UW aj = Load<UW>(a + j), aj_odd = aj >> 32;
    UW ce = {}, co = {};
    FW v[R];
    for (int64_t r = 0; r < R; ++r) {
      const UW b = Load<UW>(x + (i + r) * stride + j), b_odd = b >> 32;
      if constexpr (kCopy) std::memcpy(out + (i + r) * n + j, &b, sizeof(b));
      std::memcpy(&v[r], &b, sizeof(v[r]));
      acc[r] += MulLow(b, aj) + MulLow(b_odd, aj_odd);
      ce += MulLow(b, ai[r]);
      co += MulLow(b_odd, ai[r]);
    }
    st.Add(v);
    const UW se = Load<UW>(col + j) + ce, so = Load<UW>(col + j + kW) + co;
    std::memcpy(col + j, &se, sizeof(se));
    std::memcpy(col + j + kW, &so, sizeof(so));
  }
  for (int64_t r = 0; r < R; ++r) {
    const float* src = x + (i + r) * stride;
    uint64_t h = 0;
    for (int l = 0; l < kW; ++l) h += acc[r][l];
    for (int64_t t = j; t < n; ++t) {
      st.Add1(src[t]);
      if constexpr (kCopy) out[(i + r) * n + t] = src[t];
      uint32_t w;
      std::memcpy(&w, src + t, 4);
      h += uint64_t(a[t]) * w;
      col[t] += uint64_t(a[i + r]) * w;
    }
    row_hash[i + r] = h;
  }
}

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct CheckResult {
  bool symmetric, finite;
  float least;
};

// The pass over x [n, n] (rows `stride` floats apart), writing it to `out` [n, n] where not null.
// `pfor(parts, fn)` runs fn(p0, p1) over [0, parts) on the threads there are.
template <typename PFor>
CheckResult Check(const float* x, int64_t stride, float* out, int64_t n, uint64_t seed, int64_t threads,
                  const PFor& pfor) {
  uint64_t state = seed;
  std::vector<uint32_t> a(n);
  std::vector<uint64_t> row_hash(n);
  for (int64_t j = 0; j < n; ++j) a[j] = static_cast<uint32_t>(SplitMix64(state) >> 32);
  // Row blocks, each with its own column sums (added up below: the sums are mod 2^64, so in
  // any order the same).
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(n / 64, 4 * (threads + 1)));
  std::vector<uint64_t> cols(parts * n, 0);
  std::vector<Stats> stats(parts);
#if defined(__AVX512F__)
  constexpr int64_t kRows = 8;  // 32 vector registers
#else
  constexpr int64_t kRows = 4;
#endif
  auto rows = [&](auto copy) {
    constexpr bool kCopy = decltype(copy)::value;
    pfor(parts, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t lo = n * p / parts, hi = n * (p + 1) / parts;
        uint64_t* col = cols.data() + p * n;
        int64_t i = lo;
        for (; i + kRows <= hi; i += kRows)
          HashRows<kRows, kCopy>(x, stride, out, n, i, a.data(), row_hash.data(), col, stats[p]);
        for (; i < hi; ++i) HashRows<1, kCopy>(x, stride, out, n, i, a.data(), row_hash.data(), col, stats[p]);
      }
    });
  };
  if (out != nullptr) rows(std::true_type{});
  else rows(std::false_type{});
  CheckResult res{true, true, std::numeric_limits<float>::infinity()};
  const int64_t nv = n / kF * kF;
  for (int64_t j = 0; j < n; ++j) {
    uint64_t c = 0;
    const int64_t slot = ColSlot(j, nv);
    for (int64_t p = 0; p < parts; ++p) c += cols[p * n + slot];
    res.symmetric &= c == row_hash[j];
  }
  for (const Stats& st : stats) res.finite &= st.Finite(), res.least = std::min(res.least, st.Min1());
  return res;
}

ffi::Error SymmetryCheck(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::U32> seed,
                         ffi::Result<ffi::Buffer<ffi::PRED>> symmetric, ffi::Result<ffi::Buffer<ffi::F32>> least,
                         ffi::Result<ffi::Buffer<ffi::PRED>> finite) {
  auto d = x.dimensions();
  if (d.size() != 2 || d[0] != d[1] || seed.element_count() != 2)
    return ffi::Error::InvalidArgument("jaxsel_symmetry_check: x must be [N, N] and seed [2]");
  const int64_t n = d[0];
  const int64_t threads = std::max<int64_t>(1, pool.num_threads());
  const CheckResult r = Check(
      x.typed_data(), n, nullptr, n, (uint64_t(seed.typed_data()[0]) << 32) | seed.typed_data()[1], threads,
      [&](int64_t parts, const auto& fn) { ParallelFor(pool, parts, 1, fn); });
  *symmetric->typed_data() = r.symmetric;
  *least->typed_data() = r.least;
  *finite->typed_data() = r.finite;
  return ffi::Error::Success();
}

}  // namespace
}  // namespace jaxsel

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxselSymmetryCheck, jaxsel::SymmetryCheck,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::U32>>()
                                  .Ret<ffi::Buffer<ffi::PRED>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::PRED>>());

// JaxselCheckCopy (a plain C function, called through ctypes on host memory, without XLA): the
// pass of jaxsel_symmetry_check over a caller's float32 x [n, n] whose rows are `stride` floats
// apart (NumPy's own arrays: 16-byte aligned, which XLA cannot share), writing each row into
// `out` [n, n] (64-byte aligned, contiguous: memory XLA shares) while it is in the cache; out
// null: the checks alone. The checks, the symmetry test and the copy XLA needs in one read of x,
// on `threads` threads. result: symmetric, finite (0/1) and the least entry.
extern "C" void JaxselCheckCopy(const float* x, int64_t n, int64_t stride, float* out, uint32_t seed0,
                                uint32_t seed1, int32_t threads, float* result) {
  const int64_t t = std::max<int32_t>(1, threads);
  const jaxsel::CheckResult r = jaxsel::Check(
      x, stride, out, n, (uint64_t(seed0) << 32) | seed1, t - 1, [&](int64_t parts, const auto& fn) {
        std::atomic<int64_t> next{0};
        auto work = [&]() {
          for (int64_t p; (p = next.fetch_add(1)) < parts;) fn(p, p + 1);
        };
        std::vector<std::thread> helpers;
        for (int64_t h = 1; h < std::min<int64_t>(t, parts); ++h) helpers.emplace_back(work);
        work();
        for (auto& h : helpers) h.join();
      });
  result[0] = r.symmetric, result[1] = r.finite, result[2] = r.least;
}
