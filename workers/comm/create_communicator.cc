// CreateCommunicator (declared in communicator.h) lives apart from the interface: it
// knows the MPI communicator, so it is built with MPI only (coil_comm), while the interface,
// the single-rank and the NCCL communicators build without MPI (coil_comm_core).
#include <memory>
#include <utility>

#include "common/status_macros.h"
#include "workers/comm/communicator.h"
#include "workers/comm/local_rank.h"
#include "workers/comm/mpi_communicator.h"
#include "workers/comm/single_rank_communicator.h"
#if COIL_WITH_CUDA
#include "workers/comm/nccl_communicator.h"
#endif

namespace coil::comm {

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(
    const CommunicatorOptions& options) {
  switch (options.kind) {
    case CommunicatorKind::kSingleRank:
      return std::unique_ptr<Communicator>(std::make_unique<SingleRankCommunicator>());
    case CommunicatorKind::kMpi: {
      COIL_ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> mpi,
                            MpiCommunicator::Create(MpiCommunicator::Options()));
      return std::unique_ptr<Communicator>(std::move(mpi));
    }
    case CommunicatorKind::kNccl: {
#if COIL_WITH_CUDA
      // MPI carries only the NCCL unique id; the bootstrap communicator is freed after.
      COIL_ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> bootstrap,
                            MpiCommunicator::Create(MpiCommunicator::Options()));
      int device = options.device;
      if (device < 0) {
        COIL_ASSIGN_OR_RETURN(device, LocalRankFromEnvironment());
      }
      COIL_ASSIGN_OR_RETURN(
          std::unique_ptr<NcclCommunicator> nccl,
          NcclCommunicator::Create(*bootstrap, device,
                                   static_cast<cudaStream_t>(options.cuda_stream)));
      return std::unique_ptr<Communicator>(std::move(nccl));
#else
      return absl::UnimplementedError(
          "the nccl communicator needs a build with CUDA; configure with -DCOIL_CUDA=ON "
          "or use --comm=mpi");
#endif
    }
  }
  return absl::InvalidArgumentError("unknown communicator kind");
}

}  // namespace coil::comm
