#include "kernels/cpu/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace coil {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// About 50 us of spinning before sleeping: decode steps issue thousands of short parallel
// regions per second, and a futex wake-up costs more than many of them.
constexpr int kSpinIterations = 20000;

}  // namespace

ThreadPool::ThreadPool(int threads) : threads_(std::max(1, threads)) {
  for (int i = 1; i < threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::RunBlock(int index) {
  const int64_t blocks_of_grain = (job_n_ + job_grain_ - 1) / job_grain_;
  const int64_t per = blocks_of_grain / job_blocks_, extra = blocks_of_grain % job_blocks_;
  const int64_t first = index * per + std::min<int64_t>(index, extra);
  const int64_t count = per + (index < extra ? 1 : 0);
  const int64_t begin = std::min(job_n_, first * job_grain_);
  const int64_t end = std::min(job_n_, (first + count) * job_grain_);
  if (begin < end) (*job_)(begin, end);
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  while (true) {
    uint64_t now = generation_.load(std::memory_order_acquire);
    for (int spin = 0; now == seen && spin < kSpinIterations; ++spin) {
      CpuRelax();
      now = generation_.load(std::memory_order_acquire);
    }
    while (now == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      now = generation_.load(std::memory_order_acquire);
    }
    seen = now;
    if (stop_.load(std::memory_order_acquire)) return;
    if (index < job_blocks_) RunBlock(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t blocks = (n + grain - 1) / grain;
  if (threads_ == 1 || blocks == 1) {
    fn(0, n);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  job_grain_ = grain;
  job_blocks_ = static_cast<int>(std::min<int64_t>(blocks, threads_));
  pending_.store(threads_ - 1, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  RunBlock(0);
  int left = pending_.load(std::memory_order_acquire);
  for (int spin = 0; left != 0 && spin < kSpinIterations; ++spin) {
    CpuRelax();
    left = pending_.load(std::memory_order_acquire);
  }
  while (left != 0) {
    pending_.wait(left, std::memory_order_acquire);
    left = pending_.load(std::memory_order_acquire);
  }
}

}  // namespace coil
