// NcclCommunicator: the collectives on device memory, one GPU per rank, enqueued on a CUDA
// stream. The NCCL unique id travels over a host (MPI) communicator. AllReduceSum keeps the
// rank-order, bit-identical invariant of Communicator: ncclAllReduce with 2 ranks (one
// commutative addition per element), an all-gather and a rank-order sum kernel above.
#ifndef COIL_WORKERS_COMM_NCCL_COMMUNICATOR_H_
#define COIL_WORKERS_COMM_NCCL_COMMUNICATOR_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <memory>
#include <type_traits>
#include <utility>

#include "absl/status/statusor.h"
#include "workers/comm/communicator.h"

namespace coil::comm {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap`'s ranks (a host-memory communicator, MPI in practice):
  // makes `device` current, rank 0 creates the unique id and broadcasts it over
  // `bootstrap`, then every rank joins. `bootstrap` is not needed afterwards.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(Communicator& bootstrap,
                                                                  int device, cudaStream_t stream);

  struct NcclCommDeleter {
    void operator()(ncclComm_t comm) const;
  };
  struct DeviceDeleter {
    void operator()(float* data) const;
  };
  using NcclCommPtr = std::unique_ptr<std::remove_pointer_t<ncclComm_t>, NcclCommDeleter>;
  using DevicePtr = std::unique_ptr<float, DeviceDeleter>;

  // Public for std::make_unique; use Create.
  NcclCommunicator(NcclCommPtr comm, int rank, int size, int device, cudaStream_t stream)
      : Communicator(rank, size), comm_(std::move(comm)), device_(device), stream_(stream) {}

  ~NcclCommunicator() override;

  absl::string_view name() const override { return "nccl"; }
  MemorySpace memory_space() const override { return MemorySpace::kDevice; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

  // Allocates the all-reduce scratch for up to `count` floats now, so that no allocation
  // happens later (e.g. while a CUDA graph is being captured).
  absl::Status ReserveAllReduce(size_t count);

  void Abort() override;

 private:
  absl::Status DoAllReduceSum(float* data, size_t count) override;
  absl::Status DoAllGatherBytes(const void* send, size_t bytes, void* recv) override;
  absl::Status DoBroadcast(void* data, size_t bytes, int root) override;
  absl::Status DoBarrier() override;

  NcclCommPtr comm_;
  std::atomic<bool> aborted_{false};  // then comm_ is aborted, not to be destroyed
  int device_;
  cudaStream_t stream_;
  DevicePtr scratch_;  // [size() × scratch_count_] gathered copies; [1] for Barrier
  size_t scratch_count_ = 0;
};

}  // namespace coil::comm

#endif  // COIL_WORKERS_COMM_NCCL_COMMUNICATOR_H_
