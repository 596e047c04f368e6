// MpiCommunicator: collectives over host memory with Open MPI, on its own duplicate of
// MPI_COMM_WORLD. AllReduceSum is deterministic: each element is summed left to right in
// rank order, exactly once, and the resulting bytes are what every rank receives, so all
// ranks hold the same bits and an element's value does not depend on the element count.
#ifndef COIL_WORKERS_COMM_MPI_COMMUNICATOR_H_
#define COIL_WORKERS_COMM_MPI_COMMUNICATOR_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "workers/comm/communicator.h"
#include "workers/comm/mpi_session.h"

namespace coil::comm {

// How AllReduceSum is carried out. Every choice gives ((x0 + x1) + x2) + ... per element.
enum class AllReduceAlgorithm {
  // kNative for 2 ranks; kGatherSum up to Options::gather_sum_max_count elements, else
  // kScatterSum.
  kAuto,
  // MPI_Allreduce. MPI only recommends, and does not promise, that a reduction give the
  // same result on every rank (MPI 3.1 §5.9.1, advice to implementors), and Open MPI's
  // tuned collectives pick the algorithm (recursive doubling, ring, ...) by message size,
  // so with more than 2 ranks the summation order of an element depends on the count.
  // With 2 ranks every element is one addition, x0 + x1 == x1 + x0 in IEEE arithmetic,
  // so the result is the rank-order sum on both ranks: this choice is allowed only there.
  kNative,
  // MPI_Allgather of every rank's buffer, then each rank sums the size() copies in rank
  // order. One collective (lowest latency); moves size() × count floats to every rank.
  kGatherSum,
  // Each rank owns a contiguous near-equal segment: MPI_Alltoallv brings it every rank's
  // copy of that segment, it sums them in rank order, and MPI_Allgatherv hands the sums
  // to everyone. Two collectives; about 2 × count floats per rank, as a ring all-reduce.
  kScatterSum,
};

class MpiCommunicator final : public Communicator {
 public:
  struct Options {
    AllReduceAlgorithm all_reduce = AllReduceAlgorithm::kAuto;
    // kAuto with more than 2 ranks: kGatherSum up to this many floats. Measured in
    // docs/PERFORMANCE.md (## Communication): the crossover lay between 6144 and 24576.
    size_t gather_sum_max_count = 16384;
  };

  // Collective over MPI_COMM_WORLD; needs an MpiSession alive for the communicator's life.
  // Fails with INVALID_ARGUMENT for kNative with more than 2 ranks (not deterministic).
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> Create(const Options& options);

  // Public for std::make_unique; use Create.
  MpiCommunicator(DuplicatedComm comm, const Options& options);

  absl::string_view name() const override { return "mpi"; }
  MemorySpace memory_space() const override { return MemorySpace::kHost; }
  MPI_Comm comm() const { return comm_.get(); }

 private:
  absl::Status DoAllReduceSum(float* data, size_t count) override;
  absl::Status DoAllGatherBytes(const void* send, size_t bytes, void* recv) override;
  absl::Status DoBroadcast(void* data, size_t bytes, int root) override;
  absl::Status DoBarrier() override;

  absl::Status GatherSum(float* data, size_t count);
  absl::Status ScatterSum(float* data, size_t count);

  DuplicatedComm comm_;
  Options options_;
  std::vector<float> scratch_;  // [size() × count] gathered copies, reused across calls
};

}  // namespace coil::comm

#endif  // COIL_WORKERS_COMM_MPI_COMMUNICATOR_H_
