#include "workers/comm/nccl_communicator.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "workers/comm/rank_order_sum.h"

namespace coil::comm {

void NcclCommunicator::NcclCommDeleter::operator()(ncclComm_t comm) const { ncclCommDestroy(comm); }

void NcclCommunicator::DeviceDeleter::operator()(float* data) const { cudaFree(data); }

NcclCommunicator::~NcclCommunicator() {
  // ncclCommAbort already freed an aborted communicator's resources.
  if (aborted_.load()) (void)comm_.release();
}

void NcclCommunicator::Abort() {
  if (aborted_.exchange(true)) return;
  // NCCL documents ncclCommAbort as callable from another thread to unblock a hung
  // collective; the kernels of this communicator then exit.
  ncclCommAbort(comm_.get());
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(Communicator& bootstrap,
                                                                           int device,
                                                                           cudaStream_t stream) {
  if (bootstrap.memory_space() != MemorySpace::kHost) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the NCCL unique id needs a host-memory bootstrap communicator, not ", bootstrap.name()));
  }
  // Every rank checks its GPU, then all agree before any waits in ncclCommInitRank: a
  // rank without a GPU must not leave the others blocked.
  int device_count = 0;
  absl::Status device_status =
      cuda::CudaStatus(cudaGetDeviceCount(&device_count), "cudaGetDeviceCount");
  if (device_status.ok() && (device < 0 || device >= device_count)) {
    device_status = absl::FailedPreconditionError(
        absl::StrCat("rank ", bootstrap.rank(), " needs GPU ", device, " but ", device_count,
                     " GPUs are visible; start at most ", device_count,
                     " ranks per node or make more GPUs visible (CUDA_VISIBLE_DEVICES)"));
  }
  if (device_status.ok()) {
    device_status = cuda::CudaStatus(cudaSetDevice(device), "cudaSetDevice");
  }
  float failed = device_status.ok() ? 0.0f : 1.0f;
  COIL_RETURN_IF_ERROR(bootstrap.AllReduceSum(&failed, 1));
  if (!device_status.ok()) return device_status;
  if (failed != 0.0f) {
    return absl::UnavailableError(
        absl::StrCat("another rank has no usable GPU (", static_cast<int>(failed),
                     " ranks failed); the NCCL communicator needs one GPU per rank"));
  }

  ncclUniqueId id;
  if (bootstrap.rank() == 0) COIL_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
  COIL_RETURN_IF_ERROR(bootstrap.Broadcast(&id, sizeof(id), /*root=*/0));
  ncclComm_t raw = nullptr;
  COIL_NCCL_RETURN_IF_ERROR(ncclCommInitRank(&raw, bootstrap.size(), id, bootstrap.rank()));
  NcclCommPtr comm(raw);
  auto communicator = std::make_unique<NcclCommunicator>(std::move(comm), bootstrap.rank(),
                                                         bootstrap.size(), device, stream);
  COIL_RETURN_IF_ERROR(communicator->ReserveAllReduce(1));
  return communicator;
}

absl::Status NcclCommunicator::ReserveAllReduce(size_t count) {
  // Barrier uses one float; the all-reduce with more than 2 ranks gathers size() copies.
  const size_t needed = size() > 2 ? static_cast<size_t>(size()) * count : 1;
  if (needed <= scratch_count_) return absl::OkStatus();
  COIL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  // The old buffer may still be read by work on the stream; cudaFree waits for the device.
  scratch_.reset();
  scratch_count_ = 0;
  float* raw = nullptr;
  COIL_CUDA_RETURN_IF_ERROR(cudaMalloc(&raw, needed * sizeof(float)));
  scratch_.reset(raw);
  scratch_count_ = needed;
  return absl::OkStatus();
}

absl::Status NcclCommunicator::DoAllReduceSum(float* data, size_t count) {
  if (size() <= 2) {
    // One addition per element, and x0 + x1 == x1 + x0: the rank-order sum everywhere.
    COIL_NCCL_RETURN_IF_ERROR(
        ncclAllReduce(data, data, count, ncclFloat, ncclSum, comm_.get(), stream_));
    return absl::OkStatus();
  }
  COIL_RETURN_IF_ERROR(ReserveAllReduce(count));
  COIL_NCCL_RETURN_IF_ERROR(
      ncclAllGather(data, scratch_.get(), count, ncclFloat, comm_.get(), stream_));
  return LaunchRankOrderSum(scratch_.get(), size(), count, data, stream_);
}

absl::Status NcclCommunicator::DoAllGatherBytes(const void* send, size_t bytes, void* recv) {
  // NCCL treats send == recv + rank × bytes as in place, as the base class allows.
  COIL_NCCL_RETURN_IF_ERROR(ncclAllGather(send, recv, bytes, ncclUint8, comm_.get(), stream_));
  return absl::OkStatus();
}

absl::Status NcclCommunicator::DoBroadcast(void* data, size_t bytes, int root) {
  COIL_NCCL_RETURN_IF_ERROR(
      ncclBroadcast(data, data, bytes, ncclUint8, root, comm_.get(), stream_));
  return absl::OkStatus();
}

absl::Status NcclCommunicator::DoBarrier() {
  // NCCL has no barrier: a one-float all-reduce completes only when every rank joined it.
  COIL_NCCL_RETURN_IF_ERROR(
      ncclAllReduce(scratch_.get(), scratch_.get(), 1, ncclFloat, ncclSum, comm_.get(), stream_));
  COIL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

}  // namespace coil::comm
