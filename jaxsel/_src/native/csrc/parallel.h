// Shared by jaxsel's native kernels: a parallel loop on XLA's intra-op thread pool.
#ifndef JAXSEL_CSRC_PARALLEL_H_
#define JAXSEL_CSRC_PARALLEL_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>

#include "xla/ffi/api/ffi.h"

namespace jaxsel {

namespace ffi = xla::ffi;

struct Job {
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
};

// fn(lo, hi) over [0, total) in chunks of at least `grain` items, on the calling thread and
// XLA's intra-op pool. Chunks are claimed from a shared counter, so the caller alone can
// finish everything (no deadlock when the pool is busy); tasks that start late find no
// chunk left and return. Returns once every chunk is done.
template <typename F>
void ParallelFor(ffi::ThreadPool& pool, int64_t total, int64_t grain, const F& fn) {
  const int64_t threads = std::max<int64_t>(1, pool.num_threads());
  int64_t chunks = std::min<int64_t>((total + grain - 1) / std::max<int64_t>(grain, 1), 4 * (threads + 1));
  if (threads <= 1 || chunks <= 1) {
    if (total > 0) fn(0, total);
    return;
  }
  auto job = std::make_shared<Job>();
  const F* f = &fn;  // alive until every chunk is done; late tasks never call it
  auto work = [job, total, chunks, f]() {
    int64_t c;
    while ((c = job->next.fetch_add(1)) < chunks) {
      (*f)(total * c / chunks, total * (c + 1) / chunks);
      job->done.fetch_add(1, std::memory_order_release);
    }
  };
  const int64_t helpers = std::min<int64_t>(threads, chunks - 1);
  for (int64_t h = 0; h < helpers; ++h) pool.Schedule(decltype(work)(work));
  work();
  while (job->done.load(std::memory_order_acquire) < chunks) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
}

}  // namespace jaxsel

#endif  // JAXSEL_CSRC_PARALLEL_H_
