#include "workers/comm/mpi_session.h"

#include <mpi.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace coil::comm {
namespace {

absl::string_view ThreadLevelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "unknown thread level";
}

}  // namespace

absl::Status MpiStatus(int code, absl::string_view what) {
  if (code == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  return absl::InternalError(
      absl::StrCat(what, " failed: MPI error ", code, " (", absl::string_view(text, length), ")"));
}

absl::StatusOr<std::unique_ptr<MpiSession>> MpiSession::Init(int* argc, char*** argv) {
  int finalized = 0;
  COIL_RETURN_IF_ERROR(MpiStatus(MPI_Finalized(&finalized), "MPI_Finalized"));
  if (finalized) {
    return absl::FailedPreconditionError(
        "MPI was already finalized and cannot start again; keep one MpiSession for the "
        "program's whole life");
  }
  int initialized = 0;
  COIL_RETURN_IF_ERROR(MpiStatus(MPI_Initialized(&initialized), "MPI_Initialized"));
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    COIL_RETURN_IF_ERROR(MpiStatus(MPI_Query_thread(&provided), "MPI_Query_thread"));
  } else {
    COIL_RETURN_IF_ERROR(
        MpiStatus(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread"));
  }
  // From here on the session owns MPI (if it initialized it), so a failure below still
  // finalizes through the destructor.
  auto session = std::make_unique<MpiSession>(Key(), !initialized, provided);
  if (provided < MPI_THREAD_SERIALIZED) {
    return absl::FailedPreconditionError(
        absl::StrCat("MPI provides ", ThreadLevelName(provided),
                     "; coil needs at least MPI_THREAD_SERIALIZED; use an MPI built with "
                     "thread support (Open MPI: --enable-mpi-thread-multiple)"));
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    COIL_LOG(WARNING) << "MPI provides " << ThreadLevelName(provided)
                      << ", not MPI_THREAD_MULTIPLE: only one thread at a time may call MPI";
  }
  COIL_RETURN_IF_ERROR(
      MpiStatus(MPI_Comm_rank(MPI_COMM_WORLD, &session->world_rank_), "MPI_Comm_rank"));
  COIL_RETURN_IF_ERROR(
      MpiStatus(MPI_Comm_size(MPI_COMM_WORLD, &session->world_size_), "MPI_Comm_size"));
  return session;
}

MpiSession::~MpiSession() {
  if (!owns_mpi_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

bool MpiSession::thread_multiple() const { return thread_level_ >= MPI_THREAD_MULTIPLE; }

absl::StatusOr<DuplicatedComm> DuplicatedComm::OfWorld() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    return absl::FailedPreconditionError(
        "MPI is not initialized; create an MpiSession before any MPI communicator");
  }
  MPI_Comm comm = MPI_COMM_NULL;
  COIL_RETURN_IF_ERROR(MpiStatus(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup"));
  DuplicatedComm owned(comm);
  COIL_RETURN_IF_ERROR(
      MpiStatus(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler"));
  return owned;
}

DuplicatedComm& DuplicatedComm::operator=(DuplicatedComm&& other) noexcept {
  if (this != &other) {
    Free();
    comm_ = other.comm_;
    other.comm_ = MPI_COMM_NULL;
  }
  return *this;
}

void DuplicatedComm::Free() {
  if (comm_ == MPI_COMM_NULL) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm_);
  comm_ = MPI_COMM_NULL;
}

int DuplicatedComm::rank() const {
  int rank = 0;
  MPI_Comm_rank(comm_, &rank);
  return rank;
}

int DuplicatedComm::size() const {
  int size = 1;
  MPI_Comm_size(comm_, &size);
  return size;
}

}  // namespace coil::comm
