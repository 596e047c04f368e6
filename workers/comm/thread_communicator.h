// The ranks of a job as threads of one process: MakeThreadGroup(N) gives N communicators,
// each used by its own thread, over host memory. It runs a tensor-parallel model in one
// process: in tests without mpirun, and with several shards on one GPU (NCCL refuses two
// ranks on the same GPU; a GPU backend stages these collectives through host memory).
// Sums go in rank order, computed alike by every rank, so every rank gets the same bits.
// Ranks wait for each other on a condition variable, never spinning. As with every
// communicator, all ranks must call the same collectives in the same order: a rank that
// stops calling them leaves the others waiting.
#ifndef COIL_WORKERS_COMM_THREAD_COMMUNICATOR_H_
#define COIL_WORKERS_COMM_THREAD_COMMUNICATOR_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "workers/comm/communicator.h"

namespace coil::comm {

// size >= 1 communicators; rank r is element r. INVALID_ARGUMENT for size < 1.
absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> MakeThreadGroup(int size);

}  // namespace coil::comm

#endif  // COIL_WORKERS_COMM_THREAD_COMMUNICATOR_H_
