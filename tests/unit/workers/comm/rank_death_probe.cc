// A job in which rank 1 dies mid-job, for rank_death_test: every rank receives a first
// plan, then rank 1 dies ("abort": SIGABRT; "exit": exit status 3 without finalizing
// MPI) while rank 0 waits in a barrier and the other ranks wait for the next plan.
// mpirun must then end every rank; nothing here ever ends them otherwise.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "workers/comm/broadcast_channel.h"
#include "workers/comm/mpi_communicator.h"
#include "workers/comm/mpi_session.h"

int main(int argc, char** argv) {
  using coil::comm::BroadcastChannel;
  using coil::comm::MpiCommunicator;
  const bool abort_mode = argc > 1 && std::strcmp(argv[1], "abort") == 0;
  auto session = coil::comm::MpiSession::Init(&argc, &argv);
  if (!session.ok()) return 2;
  auto channel = BroadcastChannel::Create(0, coil::comm::BackoffOptions());
  auto comm = MpiCommunicator::Create({});
  if (!channel.ok() || !comm.ok()) return 2;
  const int rank = (*session)->world_rank();
  if (rank == 0) {
    if (!(*channel)->Send("step 1").ok()) return 2;
    (void)(*comm)->Barrier();  // rank 1 never arrives
  } else {
    if (!(*channel)->Receive().ok()) return 2;
    if (rank == 1) {
      std::fprintf(stderr, "rank 1 dies mid-job (%s)\n", abort_mode ? "abort" : "exit");
      std::fflush(stderr);
      if (abort_mode) std::abort();
      std::_Exit(3);
    }
    (void)(*channel)->Receive();  // the next plan never comes
  }
  std::fprintf(stderr, "rank %d was not ended by mpirun\n", rank);
  return 0;
}
