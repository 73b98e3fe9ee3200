// jaxsel_symmetry_check (XLA FFI, CPU): whether a float32 matrix x [N, N] is symmetric, with the
// input checks of a similarity matrix (its least entry, whether every entry is finite), in one
// pass over x. A symmetric similarity is its own candidate-major layout, so the objective then
// keeps the caller's array instead of writing a transposed copy.
//
// Symmetry is Freivalds' test on the entries' bit patterns: with x_ij the bits of x[i, j] as an
// integer and `a` [N] random 64-bit weights (from `seed`), row_hash[i] = Σ_j a_j x_ij and
// col_hash[j] = Σ_i a_i x_ij (mod 2^64). A symmetric matrix has row_hash == col_hash. A matrix
// with some x_kj ≠ x_jk has (row_hash − col_hash)_k = Σ_j a_j (x_kj − x_jk), and as each
// difference is below 2^32 in size, uniform weights make that zero with probability at most
// 2^-32. (+0.0 and −0.0 at mirrored places count as asymmetric.)
//
// x [N, N] f32, seed [2] u32 → symmetric pred[], least f32[] (NaN ignored), finite pred[].

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "parallel.h"
#include "simd.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxsel {
namespace {

typedef uint64_t U8 __attribute__((vector_size(64)));
typedef uint32_t W8 __attribute__((vector_size(32)));

// Running least entry and finiteness of the entries seen, eight lanes and one scalar.
struct Stats {
  F8 mn = F8{} + std::numeric_limits<float>::infinity();
  F8 bad = {};  // Σ x − x: 0 while every entry is finite, NaN after a NaN or ±inf
  float mn1 = std::numeric_limits<float>::infinity();
  bool bad1 = false;
  void Add(F8 x) {
    mn = x < mn ? x : mn;
    bad += x - x;
  }
  void Add1(float x) {
    mn1 = x < mn1 ? x : mn1;
    bad1 |= !(x - x == 0.0f);
  }
  float Min() const {
    float m = mn1;
    for (int l = 0; l < 8; ++l) m = mn[l] < m ? mn[l] : m;
    return m;
  }
  bool Finite() const {
    bool ok = !bad1;
    for (int l = 0; l < 8; ++l) ok &= bad[l] == 0.0f;
    return ok;
  }
};

// Rows [lo, hi) of x: row_hash of each, their terms of col_hash added into `col` [n].
// R rows at a time, their column terms summed in registers and added to `col` once.
template <int64_t R>
void HashRows(const float* __restrict x, int64_t n, int64_t i, const uint64_t* __restrict a,
              uint64_t* __restrict row_hash, uint64_t* __restrict col, Stats& st) {
  U8 ai[R], acc[R];
  for (int64_t r = 0; r < R; ++r) ai[r] = U8{} + a[i + r], acc[r] = U8{};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const U8 aj = Load<U8>(a + j);
    U8 c = {};
    for (int64_t r = 0; r < R; ++r) {
      const F8 v = Load<F8>(x + (i + r) * n + j);
      st.Add(v);
      W8 w;
      std::memcpy(&w, &v, sizeof(w));
      const U8 b = __builtin_convertvector(w, U8);
      acc[r] += b * aj;
      c += b * ai[r];
    }
    const U8 sum = Load<U8>(col + j) + c;
    std::memcpy(col + j, &sum, sizeof(sum));
  }
  for (int64_t r = 0; r < R; ++r) {
    const float* src = x + (i + r) * n;
    uint64_t h = 0;
    for (int l = 0; l < 8; ++l) h += acc[r][l];
    for (int64_t t = j; t < n; ++t) {
      st.Add1(src[t]);
      uint32_t w;
      std::memcpy(&w, src + t, 4);
      h += a[t] * w;
      col[t] += a[i + r] * w;
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

ffi::Error SymmetryCheck(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::U32> seed,
                         ffi::Result<ffi::Buffer<ffi::PRED>> symmetric, ffi::Result<ffi::Buffer<ffi::F32>> least,
                         ffi::Result<ffi::Buffer<ffi::PRED>> finite) {
  auto d = x.dimensions();
  if (d.size() != 2 || d[0] != d[1] || seed.element_count() != 2)
    return ffi::Error::InvalidArgument("jaxsel_symmetry_check: x must be [N, N] and seed [2]");
  const int64_t n = d[0];
  const float* xp = x.typed_data();
  uint64_t state = (uint64_t(seed.typed_data()[0]) << 32) | seed.typed_data()[1];
  std::vector<uint64_t> a(n), row_hash(n);
  for (auto& v : a) v = SplitMix64(state);
  // Row blocks, each with its own column sums (added up below: the sums are mod 2^64, so in
  // any order the same).
  const int64_t threads = std::max<int64_t>(1, pool.num_threads());
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(n / 64, 4 * (threads + 1)));
  std::vector<uint64_t> cols(parts * n, 0);
  std::vector<Stats> stats(parts);
#if defined(__AVX512F__)
  constexpr int64_t kRows = 8;  // 32 vector registers
#else
  constexpr int64_t kRows = 4;
#endif
  ParallelFor(pool, parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t lo = n * p / parts, hi = n * (p + 1) / parts;
      int64_t i = lo;
      for (; i + kRows <= hi; i += kRows) HashRows<kRows>(xp, n, i, a.data(), row_hash.data(), cols.data() + p * n, stats[p]);
      for (; i < hi; ++i) HashRows<1>(xp, n, i, a.data(), row_hash.data(), cols.data() + p * n, stats[p]);
    }
  });
  bool same = true, ok = true;
  float mn = std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    uint64_t c = 0;
    for (int64_t p = 0; p < parts; ++p) c += cols[p * n + j];
    same &= c == row_hash[j];
  }
  for (const Stats& st : stats) ok &= st.Finite(), mn = std::min(mn, st.Min());
  *symmetric->typed_data() = same;
  *least->typed_data() = mn;
  *finite->typed_data() = ok;
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
