// The heap of lazy greedy (CELF): stale upper bounds of the candidates' criteria, ordered by
// (key descending, index ascending), so that a fresh top beats every other bound and, on equal
// keys, the lower index wins: the pick is dense greedy's.
#ifndef JAXSEL_CSRC_LAZY_H_
#define JAXSEL_CSRC_LAZY_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace jaxsel {

template <typename T>
struct CelfHeap {
  using Item = std::pair<T, int64_t>;  // (key, candidate)
  std::vector<Item> items;             // a max-heap by Above
  std::vector<size_t> frontier;        // TopKSum's positions, a max-heap by their keys

  static bool Above(const Item& a, const Item& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  }
  bool Empty() const { return items.empty(); }
  int64_t Top() const { return items[0].second; }
  T TopKey() const { return items[0].first; }

  // Add every candidate first, then Heapify once (O(N)).
  void Add(T key, int64_t j) { items.emplace_back(key, j); }
  void Heapify() {
    for (size_t i = items.size() / 2; i-- > 0;) SiftDown(i);
  }
  void Push(T key, int64_t j) {
    items.emplace_back(key, j);
    std::push_heap(items.begin(), items.end(), [](const Item& a, const Item& b) { return Above(b, a); });
  }
  // The top's key only ever decreases (or the top leaves): one sift-down per change.
  void LowerTop(T key) {
    items[0].first = key;
    SiftDown(0);
  }
  void Pop() {
    items[0] = items.back();
    items.pop_back();
    if (!items.empty()) SiftDown(0);
  }
  void SiftDown(size_t i) {
    const size_t n = items.size();
    const Item item = items[i];
    while (true) {
      size_t c = 2 * i + 1;
      if (c >= n) break;
      if (c + 1 < n && Above(items[c + 1], items[c])) ++c;
      if (!Above(items[c], item)) break;
      items[i] = items[c];
      i = c;
    }
    items[i] = item;
  }

  // The sum of the K largest keys (negative ones as 0), largest first, from a walk down the
  // top of the heap: O(K log K) instead of a pass over every candidate.
  T TopKSum(int64_t K) {
    T total = 0;
    if (items.empty()) return total;
    auto lower = [&](size_t a, size_t b) { return Above(items[b], items[a]); };
    frontier.assign(1, 0);
    for (int64_t taken = 0; taken < K && !frontier.empty(); ++taken) {
      std::pop_heap(frontier.begin(), frontier.end(), lower);
      const size_t p = frontier.back();
      frontier.pop_back();
      total += items[p].first > T(0) ? items[p].first : T(0);
      for (size_t c = 2 * p + 1; c <= 2 * p + 2 && c < items.size(); ++c) {
        frontier.push_back(c);
        std::push_heap(frontier.begin(), frontier.end(), lower);
      }
    }
    return total;
  }
};

}  // namespace jaxsel

#endif  // JAXSEL_CSRC_LAZY_H_
