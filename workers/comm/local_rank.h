// Which GPU a rank uses: its rank among the ranks on its node, read from the launcher's
// environment. Needs no MPI, so single-process builds (no MPI at all) pick a GPU the same
// way as ranks started by mpirun.
#ifndef COIL_WORKERS_COMM_LOCAL_RANK_H_
#define COIL_WORKERS_COMM_LOCAL_RANK_H_

#include "absl/status/statusor.h"

namespace coil::comm {

// The rank of this process among the ranks on its node (OMPI_COMM_WORLD_LOCAL_RANK, set
// by Open MPI's mpirun); 0 for a process not started by mpirun. Picks the GPU of a rank.
absl::StatusOr<int> LocalRankFromEnvironment();

}  // namespace coil::comm

#endif  // COIL_WORKERS_COMM_LOCAL_RANK_H_
