#include "workers/comm/broadcast_channel.h"

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace coil::comm {
namespace {

constexpr size_t kMaxBytesPerCall = size_t{1} << 30;  // MPI counts are ints

}  // namespace

absl::StatusOr<std::unique_ptr<BroadcastChannel>> BroadcastChannel::Create(
    int root, const BackoffOptions& backoff) {
  COIL_ASSIGN_OR_RETURN(DuplicatedComm comm, DuplicatedComm::OfWorld());
  if (root < 0 || root >= comm.size()) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast channel root ", root,
                                                   " is out of range for ", comm.size(),
                                                   " ranks; use a rank in [0, ", comm.size(), ")"));
  }
  return std::make_unique<BroadcastChannel>(std::move(comm), root, backoff);
}

absl::Status BroadcastChannel::BroadcastAndWait(void* data, size_t bytes) {
  auto* cursor = static_cast<char*>(data);
  for (size_t offset = 0; offset < bytes; offset += kMaxBytesPerCall) {
    const int piece = static_cast<int>(std::min(kMaxBytesPerCall, bytes - offset));
    MPI_Request request = MPI_REQUEST_NULL;
    COIL_RETURN_IF_ERROR(MpiStatus(
        MPI_Ibcast(cursor + offset, piece, MPI_BYTE, root_, comm_.get(), &request), "MPI_Ibcast"));
    // Open MPI progresses a non-blocking collective only inside MPI calls: each
    // MPI_Test both advances and checks it.
    PollingBackoff backoff(backoff_);
    while (true) {
      int done = 0;
      COIL_RETURN_IF_ERROR(MpiStatus(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test"));
      if (done) break;
      backoff.Pause();
    }
    last_wait_.polls += backoff.stats().polls;
    last_wait_.sleeps += backoff.stats().sleeps;
  }
  return absl::OkStatus();
}

absl::Status BroadcastChannel::Send(absl::string_view message) {
  if (rank() != root_) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", rank(), " called Send on a broadcast channel whose root is rank ",
                     root_, "; only the root sends, the other ranks Receive"));
  }
  last_wait_ = WaitStats();
  uint64_t length = message.size();
  COIL_RETURN_IF_ERROR(BroadcastAndWait(&length, sizeof(length)));
  // MPI_Ibcast takes a non-const buffer even at the root, which only reads it.
  return BroadcastAndWait(const_cast<char*>(message.data()), message.size());
}

absl::StatusOr<std::string> BroadcastChannel::Receive() {
  if (rank() == root_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank(), " is the root of this broadcast channel and cannot Receive; it Sends"));
  }
  last_wait_ = WaitStats();
  uint64_t length = 0;
  COIL_RETURN_IF_ERROR(BroadcastAndWait(&length, sizeof(length)));
  std::string message(length, '\0');
  COIL_RETURN_IF_ERROR(BroadcastAndWait(message.data(), message.size()));
  return message;
}

}  // namespace coil::comm
