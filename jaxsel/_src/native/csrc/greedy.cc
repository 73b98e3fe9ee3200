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
#include <atomic>
#include <cstdint>
#include <cstring>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <utility>
#include <limits>
#include <memory>
#include <vector>

#include "parallel.h"
#include "xla/ffi/api/ffi.h"

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

// Σ_i max(0, w·p[i] − c[i]).
template <typename T, bool kWeighted>
inline T RowGain(const T* __restrict p, const T* __restrict c, T w, int64_t n) {
  using V = typename Vec<T>::type;
  constexpr int64_t L = Vec<T>::kLanes;
  const V zero = {};
  const V wv = zero + w;
  V a0 = zero, a1 = zero;
  auto term = [&](V x, V cv) {
    V d = (kWeighted ? wv * x : x) - cv;
    return d > zero ? d : zero;
  };
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    a0 += term(Load<V>(p + i), Load<V>(c + i));
    a1 += term(Load<V>(p + i + L), Load<V>(c + i + L));
  }
  if (i + L <= n) {
    a0 += term(Load<V>(p + i), Load<V>(c + i));
    i += L;
  }
  if (i < n) a1 += term(LoadTail<T>(p + i, n - i), LoadTail<T>(c + i, n - i));
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
    return d > zero ? d : zero;
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
// rows [..., N, N], w [..., Q, N] (facility location: relevance r_qj, ignored unless
// weighted; saturated coverage: the levels r_qi), valid [..., N] pred, costs [..., N] f32
// (ignored unless has_costs), budget [...] f32, min_gain [...] (−inf: none) → indices [..., K] s32, gains [..., K], values [..., K], count [...] s32,
// cost [...] f32.
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

// One problem's greedy. `pfor(total, grain, fn)` runs fn(lo, hi) over [0, total), in
// parallel or not; I, G, X are the problem's [K] outputs, *spent_out its total cost.
template <typename T, typename PFor>
int32_t SolveOne(const Problem& pr, const T* S, const T* W, const bool* V, const float* C, float budget,
                 T floor, bool parallel, int64_t threads, const PFor& pfor, int32_t* I, T* G, T* X,
                 float* spent_out) {
  const int64_t N = pr.N, Q = pr.Q, K = pr.K;
  const bool weighted = pr.weighted, lazy = pr.lazy, ratio = pr.ratio && C != nullptr;
  const bool saturated = pr.saturated;
  constexpr T kInf = std::numeric_limits<T>::infinity();
  // Facility location: cover[q, i] = max_{j∈S} w_qj s_ji. Saturated coverage: best[i] =
  // max_{j∈S} s_ji and cover[q, i] = min(r_qi, best[i]) (W holds r).
  std::vector<T> cover(Q * N, T(0)), best_sim(saturated ? N : 0, T(0));
  std::vector<char> avail(N);
  for (int64_t j = 0; j < N; ++j) avail[j] = V[j];
  int32_t taken = 0;
  T value = 0;
  float spent = 0;
  auto fits = [&](int64_t j) { return C == nullptr || C[j] <= budget - spent; };
  auto crit_of = [&](T g, int64_t j) -> T {
    if (!ratio) return g;
    const float c = C[j];
    return c > 0 ? g / static_cast<T>(c) : (g > 0 ? kInf : T(0));
  };
  auto gain = [&](int64_t j) {
    const T* row = S + j * N;
    T g = 0;
    for (int64_t q = 0; q < Q; ++q)
      g += saturated ? RowGainSat<T>(row, W + q * N, cover.data() + q * N, N)
           : weighted ? RowGain<T, true>(row, cover.data() + q * N, W[q * N + j], N)
                      : RowGain<T, false>(row, cover.data() + q * N, T(1), N);
    return g;
  };
  auto scan = [&](int64_t lo, int64_t hi) {
    Best<T> best;
    for (int64_t j = lo; j < hi; ++j) {
      if (!avail[j] || !fits(j)) continue;
      const T g = gain(j), c = crit_of(g, j);
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
  std::vector<T> fresh;        // its gain then
  std::vector<std::pair<T, int64_t>> heap;  // (bound, index), max-heap, inline keys
  auto above = [](const std::pair<T, int64_t>& a, const std::pair<T, int64_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
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
    if (!parallel) return scan(0, N);
    std::vector<Best<T>> part(parts);
    pfor(parts, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p) part[p] = scan(N * p / parts, N * (p + 1) / parts);
    });
    for (const auto& p : part)  // in index order: strict > keeps the lowest index on ties
      if (p.j >= 0 && (best.j < 0 || p.crit > best.crit)) best = p;
    return best;
  };
  int64_t step = 0;
  for (; step < K; ++step) {
    Best<T> best;
    if (!lazy) {
      best = dense_best();
    } else {
      if (step == 0) {
        fresh.assign(N, T(0));
        stamp.assign(N, 0);
        auto eval = [&](int64_t lo, int64_t hi) {
          for (int64_t j = lo; j < hi; ++j)
            if (avail[j] && fits(j)) fresh[j] = gain(j);
        };
        if (parallel) pfor(N, grain, eval);
        else eval(0, N);
        for (int64_t j = 0; j < N; ++j)
          if (avail[j] && fits(j)) heap.emplace_back(crit_of(fresh[j], j), j);
        for (size_t i = heap.size() / 2; i-- > 0;) sift_down(i);
      }
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
        // One evaluation at a time, even for one large problem: re-evaluations read random
        // rows and are memory bound; batches of them on all threads measured no faster.
        fresh[j] = gain(j);
        stamp[j] = static_cast<int32_t>(step);
        heap[0].first = crit_of(fresh[j], j);
        sift_down(0);
      }
    }
    if (best.j < 0 || best.gain < floor) break;
    const int64_t j = best.j;
    const T* row = S + j * N;
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
  return taken;
}

template <typename T>
ffi::Error Greedy(ffi::ThreadPool pool, ffi::AnyBuffer rows, ffi::AnyBuffer w, ffi::Buffer<ffi::PRED> valid,
                  ffi::Buffer<ffi::F32> costs, ffi::Buffer<ffi::F32> budget, ffi::AnyBuffer min_gain,
                  ffi::Result<ffi::Buffer<ffi::S32>> indices, ffi::Result<ffi::AnyBuffer> gains,
                  ffi::Result<ffi::AnyBuffer> values, ffi::Result<ffi::Buffer<ffi::S32>> count,
                  ffi::Result<ffi::Buffer<ffi::F32>> cost, bool weighted, bool lazy, bool has_costs,
                  bool ratio, bool saturated) {
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
  const int64_t threads = std::max<int64_t>(1, pool.num_threads());
  // Spread problems over the threads when there are enough of them, else each step's rows.
  const bool by_problem = batch.count >= 2 * threads || N * N * Q < (int64_t(1) << 18);
  auto pfor = [&](int64_t total, int64_t grain, const auto& fn) { ParallelFor(pool, total, grain, fn); };
  auto solve = [&](int64_t b) {
    cp[b] = SolveOne<T>(pr, rp + batch.Offset(b, rd, N * N), wp + batch.Offset(b, wd, weighted ? Q * N : 0),
                        vp + batch.Offset(b, vd, N), has_costs ? kp + batch.Offset(b, kd, N) : nullptr,
                        bp[batch.Offset(b, bd, 1)], mp[batch.Offset(b, md, 1)], !by_problem, threads, pfor,
                        ip + b * K, gp + b * K, xp + b * K, sp + b);
  };
  if (by_problem) {
    ParallelFor(pool, batch.count, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) solve(b);
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
                       ffi::Result<ffi::Buffer<ffi::F32>> cost, bool weighted, bool lazy, bool has_costs,
                       bool ratio, bool saturated) {
  auto t = rows.element_type();
  if (w.element_type() != t || min_gain.element_type() != t || gains->element_type() != t ||
      values->element_type() != t)
    return ffi::Error::InvalidArgument("jaxsel_cover_greedy: mixed dtypes");
  if (t == ffi::DataType::F32)
    return Greedy<float>(pool, rows, w, valid, costs, budget, min_gain, indices, gains, values, count, cost,
                         weighted, lazy, has_costs, ratio, saturated);
  if (t == ffi::DataType::F64)
    return Greedy<double>(pool, rows, w, valid, costs, budget, min_gain, indices, gains, values, count, cost,
                          weighted, lazy, has_costs, ratio, saturated);
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
                                  .Attr<bool>("weighted")
                                  .Attr<bool>("lazy")
                                  .Attr<bool>("has_costs")
                                  .Attr<bool>("ratio")
                                  .Attr<bool>("saturated"));
