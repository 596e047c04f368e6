#include "workers/comm/communicator.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace coil::comm {
namespace {

absl::Status CheckBuffer(const void* data, size_t count, absl::string_view what) {
  if (data == nullptr && count != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": buffer is null but count is ", count, "; pass a buffer"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Communicator::AllReduceSum(float* data, size_t count) {
  COIL_RETURN_IF_ERROR(CheckBuffer(data, count, "all-reduce"));
  if (count == 0) return absl::OkStatus();
  ScopedCollective collective(activity_);
  return DoAllReduceSum(data, count);
}

absl::Status Communicator::AllGather(const float* send, size_t count, float* recv) {
  if (count > std::numeric_limits<size_t>::max() / sizeof(float)) {
    return absl::InvalidArgumentError(
        absl::StrCat("all-gather of ", count, " floats per rank overflows a byte count"));
  }
  return AllGatherBytes(send, count * sizeof(float), recv);
}

absl::Status Communicator::AllGatherBytes(const void* send, size_t bytes, void* recv) {
  COIL_RETURN_IF_ERROR(CheckBuffer(send, bytes, "all-gather send"));
  COIL_RETURN_IF_ERROR(CheckBuffer(recv, bytes, "all-gather recv"));
  if (bytes == 0) return absl::OkStatus();
  if (bytes > std::numeric_limits<size_t>::max() / static_cast<size_t>(size_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("all-gather of ", bytes, " bytes per rank over ", size_, " ranks overflows"));
  }
  // Compare addresses as integers: the buffers are unrelated objects in general.
  const auto send_begin = reinterpret_cast<uintptr_t>(send);
  const auto recv_begin = reinterpret_cast<uintptr_t>(recv);
  const uintptr_t in_place = recv_begin + static_cast<uintptr_t>(rank_) * bytes;
  const uintptr_t recv_end = recv_begin + static_cast<uintptr_t>(size_) * bytes;
  if (send_begin != in_place && send_begin < recv_end && recv_begin < send_begin + bytes) {
    return absl::InvalidArgumentError(
        "all-gather send buffer overlaps the receive buffer; pass recv + rank * count "
        "(in place) or a separate buffer");
  }
  ScopedCollective collective(activity_);
  return DoAllGatherBytes(send, bytes, recv);
}

absl::Status Communicator::Broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " is out of range for ",
                                                   size_, " ranks; use a rank in [0, ", size_,
                                                   ")"));
  }
  COIL_RETURN_IF_ERROR(CheckBuffer(data, bytes, "broadcast"));
  if (bytes == 0) return absl::OkStatus();
  ScopedCollective collective(activity_);
  return DoBroadcast(data, bytes, root);
}

absl::Status Communicator::Barrier() {
  ScopedCollective collective(activity_);
  return DoBarrier();
}

absl::StatusOr<CommunicatorKind> ParseCommunicatorKind(absl::string_view text) {
  if (text == "single") return CommunicatorKind::kSingleRank;
  if (text == "mpi") return CommunicatorKind::kMpi;
  if (text == "nccl") return CommunicatorKind::kNccl;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown communicator \"", text, "\"; use single, mpi or nccl"));
}

absl::string_view CommunicatorKindName(CommunicatorKind kind) {
  switch (kind) {
    case CommunicatorKind::kSingleRank:
      return "single";
    case CommunicatorKind::kMpi:
      return "mpi";
    case CommunicatorKind::kNccl:
      return "nccl";
  }
  return "unknown";
}

}  // namespace coil::comm
