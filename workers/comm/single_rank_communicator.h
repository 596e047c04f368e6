// The communicator of a job with one rank (TP1): every collective is the identity, so a
// model written against Communicator runs unchanged without MPI. Host memory only.
#ifndef COIL_WORKERS_COMM_SINGLE_RANK_COMMUNICATOR_H_
#define COIL_WORKERS_COMM_SINGLE_RANK_COMMUNICATOR_H_

#include "workers/comm/communicator.h"

namespace coil::comm {

class SingleRankCommunicator final : public Communicator {
 public:
  SingleRankCommunicator() : Communicator(/*rank=*/0, /*size=*/1) {}

  absl::string_view name() const override { return "single"; }
  MemorySpace memory_space() const override { return MemorySpace::kHost; }

 private:
  absl::Status DoAllReduceSum(float* data, size_t count) override;
  absl::Status DoAllGatherBytes(const void* send, size_t bytes, void* recv) override;
  absl::Status DoBroadcast(void* data, size_t bytes, int root) override;
  absl::Status DoBarrier() override;
};

}  // namespace coil::comm

#endif  // COIL_WORKERS_COMM_SINGLE_RANK_COMMUNICATOR_H_
