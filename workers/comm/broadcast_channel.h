// BroadcastChannel: ordered byte messages (step plans) from a root rank to every rank,
// over its own duplicate of MPI_COMM_WORLD. A message is its length (8 bytes) then its
// bytes, each an MPI_Ibcast completed by polling MPI_Test with a PollingBackoff, so a rank
// waiting for the next plan sleeps instead of spinning a core as MPI_Bcast would.
#ifndef COIL_WORKERS_COMM_BROADCAST_CHANNEL_H_
#define COIL_WORKERS_COMM_BROADCAST_CHANNEL_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "workers/comm/mpi_session.h"
#include "workers/comm/polling_backoff.h"

namespace coil::comm {

class BroadcastChannel {
 public:
  // Collective over MPI_COMM_WORLD; needs an MpiSession alive for the channel's life.
  static absl::StatusOr<std::unique_ptr<BroadcastChannel>> Create(int root,
                                                                  const BackoffOptions& backoff);

  // Public for std::make_unique; use Create.
  BroadcastChannel(DuplicatedComm comm, int root, const BackoffOptions& backoff)
      : comm_(std::move(comm)), root_(root), backoff_(backoff) {}

  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  int root() const { return root_; }

  // Root only: sends `message` (possibly empty) to every other rank. Returns when the
  // root's part of the broadcast is complete (its buffer may be reused).
  absl::Status Send(absl::string_view message);

  // Every rank but the root: waits for the next message and returns it.
  absl::StatusOr<std::string> Receive();

  // Polls and sleeps of the last Send or Receive (length and payload together).
  const WaitStats& last_wait() const { return last_wait_; }

 private:
  // Starts an MPI_Ibcast of `bytes` bytes at `data` and polls it to completion.
  absl::Status BroadcastAndWait(void* data, size_t bytes);

  DuplicatedComm comm_;
  int root_;
  BackoffOptions backoff_;
  WaitStats last_wait_;
};

}  // namespace coil::comm

#endif  // COIL_WORKERS_COMM_BROADCAST_CHANNEL_H_
