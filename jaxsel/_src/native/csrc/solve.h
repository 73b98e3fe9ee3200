// One problem's greedy run for facility location / coverage / saturated coverage: each step
// takes the available candidate with the highest criterion (the gain, or gain per unit cost),
// lowest index on ties, stops when none is left or the gain is below min_gain, and updates the
// cover. Gains come from RowGain, the code jaxsel_cover_gains uses, so every path agrees on
// them bit for bit. Dense steps evaluate every candidate; lazy steps (CELF) re-evaluate stale
// upper bounds from a heap until a fresh one is on top.
//
// With costs (float32, like the XLA path): a candidate is available while its cost fits in
// budget − spent (float32 arithmetic, as jnp does it), and with `ratio` the criterion is
// gain / cost (a free candidate with a positive gain: +inf; with none: 0). Every step also
// updates the certificate of jaxsel.greedy: the least over the steps of f(S) plus the most a
// feasible set can add (GainBounder).
#ifndef JAXSEL_CSRC_SOLVE_H_
#define JAXSEL_CSRC_SOLVE_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "bounds.h"
#include "byte_bounds.h"
#include "gains.h"
#include "item_major.h"
#include "lazy.h"
#include "simd.h"

namespace jaxsel {

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
// parallel or not; I, G, X are the problem's [K] outputs, *spent_out its total cost. S is the
// candidate-major matrix; or, with SI (item-major, S unused), every step is dense and takes
// all gains at once from SI with `gainer` (ItemMajorGainer: the same gains, hence the same run;
// the caller's, so that its buffers serve the problems one thread solves). H and H_step:
// scratch for the byte bounds of a large lazy float32 problem, or null.
template <typename T, typename PFor>
int32_t SolveOne(const Problem& pr, const T* S, const T* SI, ItemMajorGainer<T>* gainer, uint8_t* H,
                 float* H_step, const T* W, const bool* V,
                 const float* C, float budget, T floor, bool parallel, int64_t threads, const PFor& pfor,
                 int32_t* I, T* G, T* X, float* spent_out, T* bound_out) {
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
  // The gain from the empty set (the cover is all +0 before the first pick): the same bits as
  // `gain`, without reading the cover.
  auto first_gain = [&](int64_t j) {
    T g = 0;
    for (int64_t q = 0; q < Q; ++q)
      g += weighted ? RowGain<T, true>(S + j * N, EmptyCover{}, W[q * N + j], N)
                    : RowGain<T, false>(S + j * N, EmptyCover{}, T(1), N);
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
  // certificate, can differ.
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
  if (SI != nullptr) gainer->Reset(N, Q);
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
  CelfHeap<T> heap;
  std::vector<int32_t> stale;  // a batch of stale tops, bounded together
  std::vector<T> stale_u;
  constexpr int64_t kBatchFrom = 32, kBatchMax = 1024;
  const int64_t parts = 4 * (threads + 1);
  auto dense_best = [&]() {
    Best<T> best;
    if (SI != nullptr) {
      gainer->Gains(SI, cover.data(), W, weighted, saturated, last.data());
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
          mx = Max(x, mx);
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
  GainBounder<T> bounder;
  T bound = kInf;
  int64_t step = 0;
  for (; step < K; ++step) {
    Best<T> best;
    if (!lazy) {
      best = dense_best();
    } else {
      if (step == 0) {
        fresh.assign(N, T(0));
        stamp.assign(N, 0);
        seen.assign(N, -1);
        auto eval = [&](int64_t lo, int64_t hi) {
          for (int64_t j = lo; j < hi; ++j)
            if (avail[j] && fits(j)) {
              fresh[j] = saturated ? gain(j) : first_gain(j);
              if (bounds) make_bytes(j);
            }
        };
        if (parallel) pfor(N, grain, eval);
        else eval(0, N);
        for (int64_t j = 0; j < N; ++j)
          if (avail[j] && fits(j)) heap.Add(crit_of(fresh[j], j), j);
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
        heap.Heapify();
      }
      int64_t bounded_now = 0;  // byte bounds taken this step
      if constexpr (std::is_same<T, float>::value)
        if (whole && whole_step > 0) CoverBytes(cover.data(), whole_step, cover_bytes.data(), N);
      while (!heap.Empty()) {
        const int64_t j = heap.Top();
        if (!fits(j)) {
          heap.Pop();
          continue;
        }
        if (stamp[j] == step) {
          best = {heap.TopKey(), j, fresh[j]};
          break;
        }
        if (bounds && bounded[j] != step && parallel && bounded_now >= kBatchFrom) {
          // A step that has already bounded many stale tops one at a time (the first steps,
          // where most candidates' gains fall below the new top's): the next stale tops, as
          // many as were bounded so far (the batch doubles, so about twice what one at a time
          // would bound at most), are taken off the heap, bounded and put back. Keys stay
          // upper bounds, so the pick is CELF's; more of them may be tighter, and with them
          // the certificate. The batch is bounded on this thread, each row's successor
          // fetched meanwhile: handing a batch (about 100 rows of N bytes) to the pool and
          // waiting for it cost more than it saved (bench/RESULTS.md: 1.3x-1.6x slower on
          // 2 busy cores), a helper descheduled mid-batch stalling the whole step.
          const int64_t want = std::min<int64_t>(kBatchMax, bounded_now);
          stale.clear();
          while (!heap.Empty() && static_cast<int64_t>(stale.size()) < want) {
            const int64_t t = heap.Top();
            if (!fits(t)) {
              heap.Pop();
              continue;
            }
            if (stamp[t] == step || bounded[t] == step) break;
            stale.push_back(static_cast<int32_t>(t));
            heap.Pop();
          }
          stale_u.resize(stale.size());
          const int64_t m = static_cast<int64_t>(stale.size());
          for (int64_t i = 0; i < m; ++i) stale_u[i] = byte_bound(stale[i], i + 1 < m ? stale[i + 1] : -1);
          for (size_t i = 0; i < stale.size(); ++i) {
            const int32_t t = stale[i];
            bounded[t] = static_cast<int32_t>(step);
            if (stale_u[i] < fresh[t]) fresh[t] = stale_u[i];
            heap.Push(crit_of(fresh[t], t), t);
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
            heap.LowerTop(crit_of(u, j));
          }
          continue;  // still on top: read its float32 row
        }
        // The float32 row, one at a time: after the byte bounds, about one per step.
        fresh[j] = gain(j);
        stamp[j] = static_cast<int32_t>(step);
        heap.LowerTop(crit_of(fresh[j], j));
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
    const T top = lazy && C == nullptr ? heap.TopKSum(K)
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
    if (lazy) heap.Pop();  // j is the heap's top
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
}  // namespace jaxsel

#endif  // JAXSEL_CSRC_SOLVE_H_
