// Communicator: the collectives the tensor-parallel forward pass needs (all-reduce sum,
// all-gather, broadcast, barrier) over the ranks of one job, behind one interface with a
// single-rank, an MPI (host memory) and an NCCL (device memory) implementation.
// Invariant: AllReduceSum leaves bit-identical buffers on every rank, each element summed
// left to right in rank order ((x0 + x1) + x2) + ..., whatever the element count.
#ifndef COIL_WORKERS_COMM_COMMUNICATOR_H_
#define COIL_WORKERS_COMM_COMMUNICATOR_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "workers/comm/step_activity.h"

namespace coil::comm {

// Where the buffers handed to a communicator live.
enum class MemorySpace { kHost, kDevice };

// Every method is collective: all ranks call it, in the same order, with the same counts
// (and the same root). A communicator is used by one thread at a time. Pointers are in
// memory_space(): host memory for the single-rank and MPI communicators, device memory
// for NCCL (whose calls are enqueued on its stream and return before they complete).
class Communicator {
 public:
  virtual ~Communicator() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual absl::string_view name() const = 0;
  virtual MemorySpace memory_space() const = 0;

  // In place: data[i] becomes the sum over ranks of data[i], added in rank order, the
  // same bits on every rank.
  absl::Status AllReduceSum(float* data, size_t count);

  // recv[r * count + i] = rank r's send[i]. `send` may be `recv + rank() * count` (in
  // place); otherwise the two buffers must not overlap.
  absl::Status AllGather(const float* send, size_t count, float* recv);
  absl::Status AllGatherBytes(const void* send, size_t bytes, void* recv);

  // Copies `bytes` bytes from `root`'s data to every other rank's data.
  absl::Status Broadcast(void* data, size_t bytes, int root);

  // Returns once every rank has entered it (NCCL: and its stream's earlier work is done).
  absl::Status Barrier();

  // Every collective call above is marked on `activity` (null: none), so the rank monitor
  // can tell a rank waiting for its peers from one computing. For NCCL a call only enqueues
  // work: its wait shows up later as computing (a stream synchronization).
  void set_activity(StepActivity* activity) { activity_ = activity; }

  // Any thread, once the job has failed: makes a collective under way, and every later one,
  // return instead of waiting for a rank that will never join; the communicator is unusable
  // afterwards. Only NCCL can do it (ncclCommAbort); an MPI collective cannot be
  // interrupted, and a process stuck in one is ended instead.
  virtual void Abort() {}

 protected:
  Communicator(int rank, int size) : rank_(rank), size_(size) {}

 private:
  // The checked entry points above call these only with valid arguments: non-null
  // buffers when the count is not zero, a root in [0, size), non-overlapping all-gather
  // buffers (or exactly in place).
  virtual absl::Status DoAllReduceSum(float* data, size_t count) = 0;
  virtual absl::Status DoAllGatherBytes(const void* send, size_t bytes, void* recv) = 0;
  virtual absl::Status DoBroadcast(void* data, size_t bytes, int root) = 0;
  virtual absl::Status DoBarrier() = 0;

  int rank_;
  int size_;
  StepActivity* activity_ = nullptr;
};

enum class CommunicatorKind { kSingleRank, kMpi, kNccl };

// "single", "mpi" or "nccl" (what a --comm flag takes).
absl::StatusOr<CommunicatorKind> ParseCommunicatorKind(absl::string_view text);
absl::string_view CommunicatorKindName(CommunicatorKind kind);

struct CommunicatorOptions {
  CommunicatorKind kind = CommunicatorKind::kSingleRank;
  // kNccl only: the GPU to use (-1: the node-local rank, OMPI_COMM_WORLD_LOCAL_RANK) and
  // the cudaStream_t collectives are enqueued on (nullptr: the legacy default stream).
  // A void* so that this header needs no CUDA.
  int device = -1;
  void* cuda_stream = nullptr;
};

// kMpi and kNccl need MPI initialized (an MpiSession alive for the communicator's whole
// life); kNccl needs a build with CUDA. Defined in coil_comm, the MPI part of workers/comm
// (builds without MPI make a SingleRankCommunicator or NcclCommunicator directly).
absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(
    const CommunicatorOptions& options);

}  // namespace coil::comm

#endif  // COIL_WORKERS_COMM_COMMUNICATOR_H_
