// Every candidate's gain at once from an item-major matrix (as an objective built inside jit
// hands it over), without a transposed copy: small problems of a batch take their dense
// steps from here.
#ifndef JAXSEL_CSRC_ITEM_MAJOR_H_
#define JAXSEL_CSRC_ITEM_MAJOR_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "gains.h"
#include "simd.h"

namespace jaxsel {

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
  // Written as compare-and-select on the whole 64-byte vector, not simd.h's Min / Relu: with
  // AVX2 these lanes stay in the compiler's own lowering, which the item loops below run 1.4x
  // faster than Select's two 32-byte halves (the in-jit batch); the same lanes, the same bits.
  template <bool kWeighted, bool kSaturated>
  static V Term(V x, V cv, V level) {
    V d;
    if constexpr (kSaturated) d = (x < level ? x : level) - cv;
    else if constexpr (kWeighted) d = level * x - cv;
    else d = x - cv;
#if defined(__AVX512F__)
    return Relu(d);
#else
    const V zero = {};
    return d > zero ? d : zero;
#endif
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
    for (int64_t i = 0; i < N; ++i) {
      const T* __restrict row = M + i * N;
      const V cv = Splat<V>(c[i]);
      V rv = {};
      if constexpr (kSaturated) rv = Splat<V>(r[i]);
      V* __restrict slot = sums + Slot(i);
      for (int64_t b = 0; b < blocks; ++b) {  // block b's vector of the row (the last may be short)
        const V x = b < full ? Load<V>(row + b * L) : LoadTail<T>(row + b * L, m);
        V w = {};
        if constexpr (kWeighted && !kSaturated) w = weights[b];
        slot[b * 2 * L] += Term<kWeighted, kSaturated>(x, cv, kSaturated ? rv : w);
      }
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
}  // namespace jaxsel

#endif  // JAXSEL_CSRC_ITEM_MAJOR_H_
