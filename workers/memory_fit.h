// Whether what a rank will hold after start-up (its weights, its state rows and KV pages)
// fits the memory it can get, checked before any weight is read, so that a checkpoint too
// large for the machine is refused at start with the sizes instead of the process being
// killed part-way through loading (the kernel's or the container's OOM killer gives no
// message). On the host, the memory a process can get is the smallest of /proc/meminfo's
// MemAvailable, what its cgroup still allows (v2: memory.max less memory.current, along the
// whole path up from its cgroup; v1: memory.limit_in_bytes less memory.usage_in_bytes; the
// reclaimable page cache, inactive_file, counted as free in either) and the operator's cap
// (--max-host-memory). On a GPU it is cudaMemGetInfo's free bytes.
#ifndef COIL_WORKERS_MEMORY_FIT_H_
#define COIL_WORKERS_MEMORY_FIT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace coil {

// What one rank will allocate.
struct MemoryNeed {
  int64_t weight_bytes = 0;  // this rank's weights, in the type the model holds them
  std::string weight_dtype;  // "f32", "bf16"
  int64_t pool_bytes = 0;    // the state rows and KV pages (their scratch entries included)
  // The flag that sizes the pools, for the advice ("--memory-budget"); empty: the pools are
  // not the operator's to change.
  std::string pool_flags;
  int rank = 0;
  int ranks = 1;
  // Ranks drawing on the same memory (the ranks of one host on the CPU; 1 on a GPU each).
  int ranks_sharing = 1;
  int64_t total() const { return weight_bytes + pool_bytes; }
};

// What the memory a rank draws on has free, and where the number comes from.
struct MemoryAvailable {
  int64_t bytes = 0;
  std::string where;       // "host memory", "GPU 0"
  bool device = false;     // a GPU's memory (one rank each) rather than the host's (shared)
  std::string limited_by;  // the reading that gave `bytes`: "MemAvailable", "--max-host-memory"
  std::string source;      // every reading: "the least of MemAvailable 20.1 GiB, cgroup ..."
};

// OK when ranks_sharing x need.total() <= available.bytes. Else RESOURCE_EXHAUSTED naming
// this rank's weight bytes, its pool bytes, the total, the available bytes and the reading
// that limits them, and what to do: more ranks on more machines or GPUs, 16-bit weights
// (--weights bf16) when the weights are f32, smaller pools (pool_flags). The message is
// short enough to pass whole through the start-up's agreement (240 bytes a cause:
// workers/comm/step_status.h) for sizes up to hundreds of GB; MemoryReport has the rest.
// RESOURCE_EXHAUSTED rather than FAILED_PRECONDITION: the files and flags are valid; the
// memory is what is short, and the same start-up succeeds on a larger machine (it is also
// what a failed allocation and the GPU pool check report).
absl::Status CheckMemoryFits(const MemoryNeed& need, const MemoryAvailable& available);

// One line for the log, whether it fits or not: the need in exact and scaled bytes, and
// every reading of the available memory.
std::string MemoryReport(const MemoryNeed& need, const MemoryAvailable& available);

// "1234567 bytes (1.2 MiB)".
std::string DescribeBytes(int64_t bytes);

// The pieces of the host's reading, public for tests.
// MemAvailable of a /proc/meminfo text, in bytes; nullopt when absent.
std::optional<int64_t> ParseMemAvailable(absl::string_view meminfo);
// A cgroup's limit less its usage, the reclaimable page cache (`stat_text`'s
// inactive_file) counted as free: nullopt when the limit is "max" (v2), at or above
// 2^62 (v1's "no limit"), or unreadable. Never below 0.
std::optional<int64_t> CgroupHeadroom(absl::string_view limit_text, absl::string_view usage_text,
                                      absl::string_view stat_text);

// Where the host's numbers are read (the defaults are the real files; tests point them at
// a scratch tree).
struct HostMemoryFiles {
  std::string meminfo = "/proc/meminfo";
  std::string self_cgroup = "/proc/self/cgroup";
  std::string cgroup_root = "/sys/fs/cgroup";
};

// The memory this process can get on the host: the smallest of MemAvailable, its cgroup's
// headroom (v2, else v1's memory controller) and `cap_bytes` (0: no cap). INTERNAL when
// /proc/meminfo has no MemAvailable and no cgroup or cap gives a number.
absl::StatusOr<MemoryAvailable> HostMemoryAvailable(int64_t cap_bytes,
                                                    const HostMemoryFiles& files = {});

// OMPI_COMM_WORLD_LOCAL_SIZE (the ranks mpirun started on this host), 1 when unset or
// not a positive number.
int LocalRanksFromEnvironment();

}  // namespace coil

#endif  // COIL_WORKERS_MEMORY_FIT_H_
