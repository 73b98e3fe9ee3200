// The greedy kernels' XLA FFI handlers (CPU):
//
// * jaxsel_cover_gains: facility-location gains of a block of candidate rows,
//     gains[b, m] = Σ_q Σ_i max(0, w[b, q, m] · rows[b, idx[b, m], i] − cover[b, q, i]),
//   rows [..., R, N] (candidate-major similarity), cover [..., Q, N], w [..., Q, M] (ignored
//   unless `weighted`), idx [..., M] int32 (rows to evaluate) → gains [..., M]. Rows are
//   spread over XLA's intra-op thread pool; each row is reduced by the same code whatever its
//   chunk, so a candidate's gain never depends on which others were evaluated with it.
// * jaxsel_cover_greedy: a whole greedy run per problem (solve.h), dense or lazy, for facility
//   location / coverage / saturated coverage. rows [..., N, N] (candidate-major; item-major
//   where `item_major`), w [..., Q, N] (facility location: relevance r_qj, ignored unless
//   weighted; saturated coverage: the levels r_qi), valid [..., N] pred, costs [..., N] f32
//   (ignored unless has_costs), budget [...] f32, min_gain [...] (−inf: none) → indices
//   [..., K] s32, gains [..., K], values [..., K], count [...] s32, cost [...] f32, bound [...]
//   (the certificate). A problem's matrix stays in cache for all K steps; problems of a batch
//   run in parallel, a single large problem spreads each step's rows over the threads instead.
//
// Leading batch axes broadcast (size 1 against B: jax.vmap's "expand_dims").

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "gains.h"
#include "item_major.h"
#include "parallel.h"
#include "scratch.h"
#include "simd.h"
#include "solve.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxsel {
namespace {

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

// dst[j, i] = src[i, j] for the rows j in [lo, hi) of dst [N, N], in cache-sized tiles; float32
// in 8 x 8 blocks transposed in registers (Transpose8), the ragged edges one by one.
template <typename T>
void TransposeRows(const T* __restrict src, T* __restrict dst, int64_t N, int64_t lo, int64_t hi) {
  constexpr int64_t kTile = 64;
  int64_t j8 = lo, i8 = 0;  // [lo, j8) x [0, i8) done in blocks
  if constexpr (std::is_same<T, float>::value) {
        j8 = lo + (hi - lo) / 8 * 8, i8 = N / 8 * 8;
    for (int64_t jb = lo; jb < j8; jb += kTile)
      for (int64_t ib = 0; ib < i8; ib += kTile)
        for (int64_t j0 = jb; j0 < std::min(jb + kTile, j8); j0 += 8)
          for (int64_t i0 = ib; i0 < std::min(ib + kTile, i8); i0 += 8) {
            F8 r[8];
            for (int k = 0; k < 8; ++k) std::memcpy(&r[k], src + (i0 + k) * N + j0, sizeof(F8));
            Transpose8(r);
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

template <typename T>
ffi::Error Greedy(ffi::ThreadPool pool, ffi::AnyBuffer rows, ffi::AnyBuffer w, ffi::Buffer<ffi::PRED> valid,
                  ffi::Buffer<ffi::F32> costs, ffi::Buffer<ffi::F32> budget, ffi::AnyBuffer min_gain,
                  ffi::Result<ffi::Buffer<ffi::S32>> indices, ffi::Result<ffi::AnyBuffer> gains,
                  ffi::Result<ffi::AnyBuffer> values, ffi::Result<ffi::Buffer<ffi::S32>> count,
                  ffi::Result<ffi::Buffer<ffi::F32>> cost, ffi::Result<ffi::AnyBuffer> bound,
                  bool weighted, bool lazy, bool has_costs, bool ratio, bool saturated, bool item_major,
                  bool byte_bounds) {
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
  // input as it came, so XLA makes no transposed copy of the batch). Small problems solved one
  // per thread take their dense steps straight from it (SolveOne's SI: every gain at once);
  // lazy ones too while K·N is small, where dense steps beat CELF's heap (the same picks, gains
  // and values; lazy then returns dense greedy's certificate, as jaxsel.greedy's XLA loop does
  // on small problems). Otherwise the problem is transposed first, into a buffer of this call.
  constexpr int64_t kDirectMaxK = 16, kDirectMaxNK = 2048;
  const bool direct = item_major && by_problem && (!lazy || (K <= kDirectMaxK && N * K <= kDirectMaxNK));
  // One large problem's transpose, made on all threads, in a buffer kept between calls.
  const bool transpose_whole = item_major && !by_problem && batch.count > 0;
  Scratch whole_buf(transpose_whole ? N * N * sizeof(T) : 0);
  T* whole = reinterpret_cast<T*>(whole_buf.data());
  if (transpose_whole && whole == nullptr)
    return ffi::Error(ffi::ErrorCode::kResourceExhausted, "jaxsel_cover_greedy: no memory for a transpose");
  // Problem b's candidate-major matrix (or, with `direct`, its item-major input); `transposed`
  // holds the transpose of a small problem, one buffer per chunk of problems.
  auto matrix = [&](int64_t b, std::vector<T>& transposed) -> const T* {
    const T* src = rp + batch.Offset(b, rd, N * N);
    if (!item_major || direct) return src;
    if (!by_problem) {
      pfor(N, std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(1, N)),
           [&](int64_t lo, int64_t hi) { TransposeRows<T>(src, whole, N, lo, hi); });
      return whole;
    }
    if (static_cast<int64_t>(transposed.size()) < N * N) transposed.resize(N * N);
    TransposeRows<T>(src, transposed.data(), N, 0, N);
    return transposed.data();
  };
  // A large float32 lazy problem solved on all threads bounds its stale tops from its rows
  // rounded up to bytes (byte_bounds.h): N·N bytes and the N steps, in a buffer kept between
  // calls (scratch.h; the problems of a small batch share it, as they are solved one after
  // another). Without the memory, the steps go without the bounds (the same picks).
  byte_bounds &= std::is_same<T, float>::value && lazy && !saturated && !by_problem && batch.count > 0;
  Scratch bytes_buf(byte_bounds ? (N * N + 63) / 64 * 64 + 4 * N : 0);  // the steps 64-byte aligned
  uint8_t* bytes = bytes_buf.data();
  float* bytes_step = bytes == nullptr ? nullptr : reinterpret_cast<float*>(bytes + (N * N + 63) / 64 * 64);
  // `transposed` and `gainer`: buffers of one chunk of problems (one thread's).
  auto solve = [&](int64_t b, std::vector<T>& transposed, ItemMajorGainer<T>& gainer) {
    const T* m = matrix(b, transposed);
    cp[b] = SolveOne<T>(pr, direct ? nullptr : m, direct ? m : nullptr, &gainer, bytes, bytes_step, wp + batch.Offset(b, wd, weighted ? Q * N : 0),
                        vp + batch.Offset(b, vd, N), has_costs ? kp + batch.Offset(b, kd, N) : nullptr,
                        bp[batch.Offset(b, bd, 1)], mp[batch.Offset(b, md, 1)], !by_problem, threads, pfor,
                        ip + b * K, gp + b * K, xp + b * K, sp + b, bp_out + b);
  };
  if (by_problem) {
    ParallelFor(pool, batch.count, 1, [&](int64_t lo, int64_t hi) {
      std::vector<T> transposed;
      ItemMajorGainer<T> gainer;
      for (int64_t b = lo; b < hi; ++b) solve(b, transposed, gainer);
    });
  } else {
    std::vector<T> transposed;
    ItemMajorGainer<T> gainer;
    for (int64_t b = 0; b < batch.count; ++b) solve(b, transposed, gainer);
  }
  return ffi::Error::Success();
}

ffi::Error CoverGreedy(ffi::ThreadPool pool, ffi::AnyBuffer rows, ffi::AnyBuffer w, ffi::Buffer<ffi::PRED> valid,
                       ffi::Buffer<ffi::F32> costs, ffi::Buffer<ffi::F32> budget, ffi::AnyBuffer min_gain,
                       ffi::Result<ffi::Buffer<ffi::S32>> indices, ffi::Result<ffi::AnyBuffer> gains,
                       ffi::Result<ffi::AnyBuffer> values, ffi::Result<ffi::Buffer<ffi::S32>> count,
                       ffi::Result<ffi::Buffer<ffi::F32>> cost, ffi::Result<ffi::AnyBuffer> bound,
                       bool weighted, bool lazy, bool has_costs, bool ratio, bool saturated, bool item_major,
                       bool byte_bounds) {
  auto t = rows.element_type();
  if (w.element_type() != t || min_gain.element_type() != t || gains->element_type() != t ||
      values->element_type() != t || bound->element_type() != t)
    return ffi::Error::InvalidArgument("jaxsel_cover_greedy: mixed dtypes");
  if (t == ffi::DataType::F32)
    return Greedy<float>(pool, rows, w, valid, costs, budget, min_gain, indices, gains, values, count, cost,
                         bound, weighted, lazy, has_costs, ratio, saturated, item_major, byte_bounds);
  if (t == ffi::DataType::F64)
    return Greedy<double>(pool, rows, w, valid, costs, budget, min_gain, indices, gains, values, count, cost,
                          bound, weighted, lazy, has_costs, ratio, saturated, item_major, byte_bounds);
  return ffi::Error::InvalidArgument("jaxsel_cover_greedy: float32 or float64 only");
}

}  // namespace
}  // namespace jaxsel

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxselCoverGains, jaxsel::CoverGains,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<bool>("weighted"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxselCoverGreedy, jaxsel::CoverGreedy,
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
                                  .Attr<bool>("item_major")
                                  .Attr<bool>("byte_bounds"));

// The scratch cache (scratch.h), for jaxsel's `native.clear_scratch()` and its tests (ctypes):
// the bytes kept idle, and (clear: free them all) setting the most it keeps; returns the bytes freed.
// JaxselScratchTake / JaxselScratchGive lend a buffer to Python (`native.host_buffer`: the
// aligned copy of a caller's host matrix that XLA shares), given back when its last view is gone.
extern "C" {
void* JaxselScratchTake(uint64_t bytes) { return jaxsel::ScratchCache::Get().Take(bytes); }
void JaxselScratchGive(void* p, uint64_t bytes) {
  jaxsel::ScratchCache::Get().Return(static_cast<uint8_t*>(p), bytes);
}
uint64_t JaxselScratchIdleBytes() { return jaxsel::ScratchCache::Get().IdleBytes(); }
uint64_t JaxselScratchLimit() { return jaxsel::ScratchCache::Get().Limit(); }
uint64_t JaxselScratchConfigure(int32_t clear, uint64_t limit) {
  return jaxsel::ScratchCache::Get().Configure(clear != 0, limit);
}
}
