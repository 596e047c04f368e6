#include "workers/comm/step_status.h"

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace coil::comm {
namespace {

// One rank's record: int32 status code, uint32 cause length, the cause bytes.
constexpr size_t kHeaderBytes = 2 * sizeof(uint32_t);
constexpr size_t kRecordBytes = kHeaderBytes + kMaxCauseBytes;

void EncodeRecord(const absl::Status& status, char* record) {
  std::string cause(status.message());
  if (cause.size() > kMaxCauseBytes) {
    cause.resize(kMaxCauseBytes - 3);
    cause += "...";
  }
  const int32_t code = static_cast<int32_t>(status.code());
  const uint32_t length = static_cast<uint32_t>(cause.size());
  std::memset(record, 0, kRecordBytes);
  std::memcpy(record, &code, sizeof(code));
  std::memcpy(record + sizeof(code), &length, sizeof(length));
  std::memcpy(record + kHeaderBytes, cause.data(), cause.size());
}

absl::Status DecodeRecord(const char* record, int rank) {
  int32_t code = 0;
  uint32_t length = 0;
  std::memcpy(&code, record, sizeof(code));
  std::memcpy(&length, record + sizeof(code), sizeof(length));
  if (length > kMaxCauseBytes || code < 0 ||
      code > static_cast<int32_t>(absl::StatusCode::kUnauthenticated)) {
    return absl::InternalError(absl::StrCat("rank ", rank, " sent a corrupt step status record"));
  }
  return absl::Status(static_cast<absl::StatusCode>(code),
                      absl::string_view(record + kHeaderBytes, length));
}

}  // namespace

absl::StatusOr<std::vector<RankFailure>> AllReduceStepStatus(Communicator& comm,
                                                             const absl::Status& local) {
  if (comm.memory_space() != MemorySpace::kHost) {
    return absl::InvalidArgumentError(
        absl::StrCat("step status needs a host-memory communicator, not ", comm.name(),
                     "; exchange it over the MPI communicator"));
  }
  // A count of failed ranks, exact in fp32 up to 2^24 ranks.
  float failed = local.ok() ? 0.0f : 1.0f;
  COIL_RETURN_IF_ERROR_CONTEXT(comm.AllReduceSum(&failed, 1), "step status");
  std::vector<RankFailure> failures;
  if (failed == 0.0f) return failures;

  std::vector<char> records(static_cast<size_t>(comm.size()) * kRecordBytes);
  char* mine = records.data() + static_cast<size_t>(comm.rank()) * kRecordBytes;
  EncodeRecord(local, mine);
  COIL_RETURN_IF_ERROR_CONTEXT(comm.AllGatherBytes(mine, kRecordBytes, records.data()),
                               "step status");
  for (int rank = 0; rank < comm.size(); ++rank) {
    absl::Status status = DecodeRecord(records.data() + rank * kRecordBytes, rank);
    if (!status.ok()) failures.push_back(RankFailure{rank, std::move(status)});
  }
  return failures;
}

absl::Status CombineRankFailures(const std::vector<RankFailure>& failures) {
  if (failures.empty()) return absl::OkStatus();
  std::vector<std::string> parts;
  parts.reserve(failures.size());
  for (const RankFailure& failure : failures) {
    parts.push_back(absl::StrCat("rank ", failure.rank, " failed: ", failure.status.message()));
  }
  return absl::Status(failures.front().status.code(), absl::StrJoin(parts, "; "));
}

}  // namespace coil::comm
