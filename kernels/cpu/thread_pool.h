// ThreadPool: the CPU backend's workers. ParallelFor splits [0, n) into one contiguous
// block per thread (the calling thread takes block 0) and returns when all are done.
// Which thread computes an index never changes what it computes: kernels give each output
// element one fixed reduction order, so results do not depend on the thread count.
// Workers spin briefly, then sleep on an atomic, so an idle backend uses no CPU.
#ifndef COIL_KERNELS_CPU_THREAD_POOL_H_
#define COIL_KERNELS_CPU_THREAD_POOL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace coil {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return threads_; }

  // Calls fn(begin, end) on disjoint blocks covering [0, n); blocks are multiples of
  // `grain` (except the last) so vector kernels keep aligned edges.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop(int index);
  void RunBlock(int index);

  const int threads_;
  std::vector<std::thread> workers_;
  // The current job; written by the caller before `generation_` is bumped.
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_grain_ = 1;
  int job_blocks_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace coil

#endif  // COIL_KERNELS_CPU_THREAD_POOL_H_
