#include "workers/comm/local_rank.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace coil::comm {

absl::StatusOr<int> LocalRankFromEnvironment() {
  const char* value = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (value == nullptr) return 0;
  int local_rank = 0;
  if (!absl::SimpleAtoi(value, &local_rank) || local_rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("OMPI_COMM_WORLD_LOCAL_RANK is \"", value,
                     "\", not a rank; start the program with mpirun or unset the variable"));
  }
  return local_rank;
}

}  // namespace coil::comm
