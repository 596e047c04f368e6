#include "workers/comm/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace coil::comm {
namespace {

// MPI counts are ints. Long buffers go in pieces of at most this many elements; an
// element's summation order does not depend on which piece it is in.
constexpr size_t kMaxFloatsPerCall = size_t{1} << 26;  // 256 MiB
constexpr size_t kMaxBytesPerCall = size_t{1} << 30;

// Sums `copies` arrays of `count` floats laid out one after another, in array order,
// into out: out[i] = ((in[0][i] + in[1][i]) + in[2][i]) + ... The loop over copies is
// outside so the inner loop vectorizes; each element still sees the same order.
void SumInRankOrder(const float* in, int copies, size_t count, float* out) {
  std::copy(in, in + count, out);
  for (int r = 1; r < copies; ++r) {
    const float* copy = in + static_cast<size_t>(r) * count;
    for (size_t i = 0; i < count; ++i) out[i] += copy[i];
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Create(const Options& options) {
  COIL_ASSIGN_OR_RETURN(DuplicatedComm comm, DuplicatedComm::OfWorld());
  if (options.all_reduce == AllReduceAlgorithm::kNative && comm.size() > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("the native MPI all-reduce is not deterministic with ", comm.size(),
                     " ranks (only with 2 or fewer); use kAuto, kGatherSum or kScatterSum"));
  }
  return std::make_unique<MpiCommunicator>(std::move(comm), options);
}

MpiCommunicator::MpiCommunicator(DuplicatedComm comm, const Options& options)
    : Communicator(comm.rank(), comm.size()), comm_(std::move(comm)), options_(options) {}

absl::Status MpiCommunicator::DoAllReduceSum(float* data, size_t count) {
  if (size() == 1) return absl::OkStatus();
  AllReduceAlgorithm algorithm = options_.all_reduce;
  if (algorithm == AllReduceAlgorithm::kAuto) {
    if (size() <= 2) {
      algorithm = AllReduceAlgorithm::kNative;
    } else if (count <= options_.gather_sum_max_count) {
      algorithm = AllReduceAlgorithm::kGatherSum;
    } else {
      algorithm = AllReduceAlgorithm::kScatterSum;
    }
  }
  for (size_t offset = 0; offset < count; offset += kMaxFloatsPerCall) {
    const size_t piece = std::min(kMaxFloatsPerCall, count - offset);
    switch (algorithm) {
      case AllReduceAlgorithm::kNative:
        COIL_RETURN_IF_ERROR(
            MpiStatus(MPI_Allreduce(MPI_IN_PLACE, data + offset, static_cast<int>(piece), MPI_FLOAT,
                                    MPI_SUM, comm_.get()),
                      "MPI_Allreduce"));
        break;
      case AllReduceAlgorithm::kGatherSum:
        COIL_RETURN_IF_ERROR(GatherSum(data + offset, piece));
        break;
      case AllReduceAlgorithm::kAuto:
      case AllReduceAlgorithm::kScatterSum:
        COIL_RETURN_IF_ERROR(ScatterSum(data + offset, piece));
        break;
    }
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::GatherSum(float* data, size_t count) {
  scratch_.resize(static_cast<size_t>(size()) * count);
  const int n = static_cast<int>(count);
  COIL_RETURN_IF_ERROR(
      MpiStatus(MPI_Allgather(data, n, MPI_FLOAT, scratch_.data(), n, MPI_FLOAT, comm_.get()),
                "MPI_Allgather"));
  SumInRankOrder(scratch_.data(), size(), count, data);
  return absl::OkStatus();
}

absl::Status MpiCommunicator::ScatterSum(float* data, size_t count) {
  // Segment s = [offsets[s], offsets[s] + counts[s]): the first count % size() segments
  // have one element more. A segment may be empty when count < size().
  const int ranks = size();
  std::vector<int> counts(ranks);
  std::vector<int> offsets(ranks);
  const size_t base = count / ranks;
  const size_t extra = count % ranks;
  size_t offset = 0;
  for (int s = 0; s < ranks; ++s) {
    counts[s] = static_cast<int>(base + (static_cast<size_t>(s) < extra ? 1 : 0));
    offsets[s] = static_cast<int>(offset);
    offset += counts[s];
  }
  const int mine = counts[rank()];
  // Every rank sends segment s to rank s and receives rank q's copy of its own segment
  // at scratch_[q × mine].
  std::vector<int> recv_counts(ranks, mine);
  std::vector<int> recv_offsets(ranks);
  for (int q = 0; q < ranks; ++q) recv_offsets[q] = q * mine;
  scratch_.resize(static_cast<size_t>(ranks) * mine + 1);
  COIL_RETURN_IF_ERROR(
      MpiStatus(MPI_Alltoallv(data, counts.data(), offsets.data(), MPI_FLOAT, scratch_.data(),
                              recv_counts.data(), recv_offsets.data(), MPI_FLOAT, comm_.get()),
                "MPI_Alltoallv"));
  SumInRankOrder(scratch_.data(), ranks, mine, data + offsets[rank()]);
  COIL_RETURN_IF_ERROR(
      MpiStatus(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts.data(),
                               offsets.data(), MPI_FLOAT, comm_.get()),
                "MPI_Allgatherv"));
  return absl::OkStatus();
}

absl::Status MpiCommunicator::DoAllGatherBytes(const void* send, size_t bytes, void* recv) {
  if (bytes > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat("all-gather of ", bytes,
                                                   " bytes per rank exceeds MPI's count limit of ",
                                                   INT_MAX, "; gather in smaller pieces"));
  }
  const int n = static_cast<int>(bytes);
  auto* recv_bytes = static_cast<char*>(recv);
  const bool in_place = send == recv_bytes + static_cast<size_t>(rank()) * bytes;
  return MpiStatus(
      MPI_Allgather(in_place ? MPI_IN_PLACE : send, n, MPI_BYTE, recv, n, MPI_BYTE, comm_.get()),
      "MPI_Allgather");
}

absl::Status MpiCommunicator::DoBroadcast(void* data, size_t bytes, int root) {
  auto* cursor = static_cast<char*>(data);
  for (size_t offset = 0; offset < bytes; offset += kMaxBytesPerCall) {
    const int piece = static_cast<int>(std::min(kMaxBytesPerCall, bytes - offset));
    COIL_RETURN_IF_ERROR(
        MpiStatus(MPI_Bcast(cursor + offset, piece, MPI_BYTE, root, comm_.get()), "MPI_Bcast"));
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::DoBarrier() {
  return MpiStatus(MPI_Barrier(comm_.get()), "MPI_Barrier");
}

}  // namespace coil::comm
