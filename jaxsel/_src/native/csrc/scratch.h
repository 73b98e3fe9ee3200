// Large scratch kept between calls: a bounded cache of buffers keyed by their size (the
// problem's shape), shared by every thread of the process.
//
// A lazy float32 problem of N = 10,000 needs 100 MB of byte bounds for one call. Memory that a
// process has just allocated is faulted in page by page, each page zeroed by the kernel, and on
// a virtual machine that costs as much as the whole solve; a buffer used before does not. So a
// call takes an idle buffer of its size (or allocates one), and hands it back when it returns:
// the next call of the same shape reuses it. At most `limit` bytes are kept idle (the oldest
// are freed first); `Clear()` frees them all (jaxsel's `native.clear_scratch()`). A buffer is
// one call's while it is out, so concurrent calls of one shape get different buffers. The same
// cache lends Python the aligned copy of a caller's host matrix that XLA shares (jaxsel's
// `native.host_buffer`), given back when the last array viewing it is gone.
#ifndef JAXSEL_CSRC_SCRATCH_H_
#define JAXSEL_CSRC_SCRATCH_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <new>
#include <utility>

namespace jaxsel {

class ScratchCache {
 public:
  static constexpr std::size_t kAlign = 64;
  static constexpr std::size_t kDefaultLimit = std::size_t(1) << 30;  // 1 GiB idle at most

  // The process's one cache.
  static ScratchCache& Get() {
    static ScratchCache* cache = new ScratchCache();  // never destroyed: no exit-order issues
    return *cache;
  }

  // A buffer of `bytes` (64-byte aligned, contents undefined): the most recently returned idle
  // one of that size, or a new one; null if none can be allocated.
  uint8_t* Take(std::size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = idle_.begin(); it != idle_.end(); ++it)
        if (it->first == bytes) {
          uint8_t* p = it->second;
          idle_bytes_ -= bytes;
          idle_.erase(it);
          return p;
        }
    }
    return static_cast<uint8_t*>(::operator new(bytes, std::align_val_t(kAlign), std::nothrow));
  }

  // Makes a buffer from Take idle again, freeing the oldest idle ones beyond the limit.
  void Return(uint8_t* p, std::size_t bytes) {
    if (p == nullptr) return;
    std::list<std::pair<std::size_t, uint8_t*>> drop;
    {
      std::lock_guard<std::mutex> lock(mu_);
      idle_.emplace_front(bytes, p);
      idle_bytes_ += bytes;
      while (idle_bytes_ > limit_) {
        drop.splice(drop.end(), idle_, std::prev(idle_.end()));
        idle_bytes_ -= drop.back().first;
      }
    }
    for (auto& d : drop) Free(d.second);  // outside the lock
  }

  // Frees every idle buffer (those out in a call are freed when it returns them, if over the
  // limit) and sets the limit; returns the bytes freed.
  std::size_t Configure(bool clear, std::size_t limit) {
    std::list<std::pair<std::size_t, uint8_t*>> drop;
    std::size_t freed = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      limit_ = limit;
      while (!idle_.empty() && (clear || idle_bytes_ > limit_)) {
        drop.splice(drop.end(), idle_, std::prev(idle_.end()));
        idle_bytes_ -= drop.back().first;
        freed += drop.back().first;
      }
    }
    for (auto& d : drop) Free(d.second);
    return freed;
  }

  std::size_t IdleBytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return idle_bytes_;
  }
  std::size_t Limit() {
    std::lock_guard<std::mutex> lock(mu_);
    return limit_;
  }

 private:
  ScratchCache() = default;
  static void Free(uint8_t* p) { ::operator delete(p, std::align_val_t(kAlign)); }

  std::mutex mu_;
  std::list<std::pair<std::size_t, uint8_t*>> idle_;  // (bytes, buffer), most recent first
  std::size_t idle_bytes_ = 0;
  std::size_t limit_ = kDefaultLimit;
};

// One call's buffer from the cache, handed back when it goes out of scope.
class Scratch {
 public:
  Scratch() = default;
  // `bytes` = 0: no buffer (data() is null).
  explicit Scratch(std::size_t bytes) : bytes_(bytes), p_(bytes ? ScratchCache::Get().Take(bytes) : nullptr) {}
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { ScratchCache::Get().Return(p_, bytes_); }
  uint8_t* data() const { return p_; }

 private:
  std::size_t bytes_ = 0;
  uint8_t* p_ = nullptr;
};

}  // namespace jaxsel

#endif  // JAXSEL_CSRC_SCRATCH_H_
