#include "workers/comm/thread_communicator.h"

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"

namespace coil::comm {
namespace {

// What the ranks share: each rank's buffer for the collective under way, and a reusable
// barrier. Writes before Arrive() happen before reads after it on every other rank (the
// mutex orders them).
class Group {
 public:
  explicit Group(int size) : size_(size), buffers_(static_cast<size_t>(size)) {}

  int size() const { return size_; }
  void Publish(int rank, const void* buffer) { buffers_[static_cast<size_t>(rank)] = buffer; }
  const void* Buffer(int rank) const { return buffers_[static_cast<size_t>(rank)]; }

  // Returns once all ranks have arrived.
  void Arrive() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != generation; });
  }

 private:
  const int size_;
  std::vector<const void*> buffers_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(int rank, std::shared_ptr<Group> group)
      : Communicator(rank, group->size()), group_(std::move(group)) {}

  absl::string_view name() const override { return "threads"; }
  MemorySpace memory_space() const override { return MemorySpace::kHost; }

 private:
  // Every rank sums all buffers in rank order into its own scratch, then (once every rank
  // has read every buffer) writes the sum back to its own buffer.
  absl::Status DoAllReduceSum(float* data, size_t count) override {
    group_->Publish(rank(), data);
    group_->Arrive();
    sum_.resize(count);
    const auto* first = static_cast<const float*>(group_->Buffer(0));
    for (size_t i = 0; i < count; ++i) sum_[i] = first[i];
    for (int r = 1; r < size(); ++r) {
      const auto* other = static_cast<const float*>(group_->Buffer(r));
      for (size_t i = 0; i < count; ++i) sum_[i] += other[i];
    }
    group_->Arrive();
    std::memcpy(data, sum_.data(), count * sizeof(float));
    return absl::OkStatus();
  }

  absl::Status DoAllGatherBytes(const void* send, size_t bytes, void* recv) override {
    group_->Publish(rank(), send);
    group_->Arrive();
    for (int r = 0; r < size(); ++r) {
      char* to = static_cast<char*>(recv) + static_cast<size_t>(r) * bytes;
      const void* from = group_->Buffer(r);
      if (from != to) std::memcpy(to, from, bytes);  // in place for this rank's own part
    }
    group_->Arrive();  // no rank changes its send buffer before every rank has copied it
    return absl::OkStatus();
  }

  absl::Status DoBroadcast(void* data, size_t bytes, int root) override {
    group_->Publish(rank(), data);
    group_->Arrive();
    if (rank() != root) std::memcpy(data, group_->Buffer(root), bytes);
    group_->Arrive();
    return absl::OkStatus();
  }

  absl::Status DoBarrier() override {
    group_->Arrive();
    return absl::OkStatus();
  }

  std::shared_ptr<Group> group_;
  std::vector<float> sum_;
};

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> MakeThreadGroup(int size) {
  if (size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a thread group of ", size, " ranks; ask for at least 1"));
  }
  auto group = std::make_shared<Group>(size);
  std::vector<std::unique_ptr<Communicator>> ranks;
  for (int r = 0; r < size; ++r) ranks.push_back(std::make_unique<ThreadCommunicator>(r, group));
  return ranks;
}

}  // namespace coil::comm
