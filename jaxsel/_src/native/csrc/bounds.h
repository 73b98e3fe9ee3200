// The certificate of a greedy run: how much any feasible set could still add to the current
// selection, from upper bounds of the candidates' gains (jaxsel.greedy's `_gain_bound`).
#ifndef JAXSEL_CSRC_BOUNDS_H_
#define JAXSEL_CSRC_BOUNDS_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "simd.h"

namespace jaxsel {

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
}  // namespace jaxsel

#endif  // JAXSEL_CSRC_BOUNDS_H_
