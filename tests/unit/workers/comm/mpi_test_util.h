// Helpers for tests run under mpirun: the world rank and size, and a check, made with
// plain MPI (not the code under test), that every rank holds the same bytes.
#ifndef COIL_TESTS_UNIT_WORKERS_COMM_MPI_TEST_UTIL_H_
#define COIL_TESTS_UNIT_WORKERS_COMM_MPI_TEST_UTIL_H_

#include <mpi.h>

#include <cstring>
#include <vector>

namespace coil::comm {

inline int WorldRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

inline int WorldSize() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// Collective. True on every rank when all ranks' `bytes` bytes at `data` are identical.
inline bool SameBytesOnEveryRank(const void* data, int bytes) {
  std::vector<char> all(static_cast<size_t>(WorldSize()) * bytes);
  MPI_Allgather(data, bytes, MPI_BYTE, all.data(), bytes, MPI_BYTE, MPI_COMM_WORLD);
  for (int r = 1; r < WorldSize(); ++r) {
    if (std::memcmp(all.data(), all.data() + static_cast<size_t>(r) * bytes, bytes) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace coil::comm

#endif  // COIL_TESTS_UNIT_WORKERS_COMM_MPI_TEST_UTIL_H_
