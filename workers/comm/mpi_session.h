// MpiSession: MPI's lifetime as an object. Creating it initializes MPI (requesting
// MPI_THREAD_MULTIPLE); destroying it finalizes MPI. A process initializes MPI once, so a
// program keeps one session for its whole life and destroys every MPI communicator first.
#ifndef COIL_WORKERS_COMM_MPI_SESSION_H_
#define COIL_WORKERS_COMM_MPI_SESSION_H_

#include <mpi.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "workers/comm/local_rank.h"  // LocalRankFromEnvironment, for existing callers

namespace coil::comm {

class MpiSession {
 public:
  // Calls MPI_Init_thread. coil needs at least MPI_THREAD_SERIALIZED (rank 0's engine loop
  // is not the main thread); MULTIPLE is requested so that a second thread may use MPI.
  // If MPI is already initialized, the session adopts it and leaves finalizing to whoever
  // initialized it. argc/argv may be null.
  static absl::StatusOr<std::unique_ptr<MpiSession>> Init(int* argc, char*** argv);

  // Public for std::make_unique only: a Key is made by Init alone.
  class Key {
    friend class MpiSession;
    Key() = default;
  };
  MpiSession(Key, bool owns_mpi, int thread_level)
      : owns_mpi_(owns_mpi), thread_level_(thread_level) {}
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // MPI_THREAD_SINGLE ... MPI_THREAD_MULTIPLE, as MPI provided it.
  int thread_level() const { return thread_level_; }
  bool thread_multiple() const;

 private:
  bool owns_mpi_;
  int thread_level_;
  int world_rank_ = 0;
  int world_size_ = 1;
};

// An owned duplicate of MPI_COMM_WORLD whose error handler is MPI_ERRORS_RETURN: MPI
// errors come back as codes (then Status) instead of aborting the job, and its
// collectives never match those of another component using MPI. Freed on destruction
// (unless MPI was already finalized).
class DuplicatedComm {
 public:
  static absl::StatusOr<DuplicatedComm> OfWorld();

  DuplicatedComm(DuplicatedComm&& other) noexcept : comm_(other.comm_) {
    other.comm_ = MPI_COMM_NULL;
  }
  DuplicatedComm& operator=(DuplicatedComm&& other) noexcept;
  DuplicatedComm(const DuplicatedComm&) = delete;
  DuplicatedComm& operator=(const DuplicatedComm&) = delete;
  ~DuplicatedComm() { Free(); }

  MPI_Comm get() const { return comm_; }
  int rank() const;
  int size() const;

 private:
  explicit DuplicatedComm(MPI_Comm comm) : comm_(comm) {}
  void Free();

  MPI_Comm comm_;
};

// An MPI return code as a Status: OK for MPI_SUCCESS, otherwise INTERNAL with the call
// and MPI's own error text ("MPI_Ibcast failed: MPI_ERR_TRUNCATE: message truncated").
absl::Status MpiStatus(int code, absl::string_view what);

}  // namespace coil::comm

#endif  // COIL_WORKERS_COMM_MPI_SESSION_H_
