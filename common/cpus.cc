#include "common/cpus.h"

#include <sched.h>

#include <algorithm>
#include <thread>

#include "common/logging.h"

namespace coil {

int AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int ChooseThreads(int requested, int ranks_sharing) {
  const int allowed = AllowedCpus();
  if (requested > 0) {
    if (requested > allowed) {
      COIL_LOG(WARNING) << "--threads " << requested << " but this process may run on "
                        << allowed << " CPU(s): the threads will take turns; under mpirun "
                        << "add --bind-to none (or give fewer threads)";
    }
    return requested;
  }
  // Bound to a subset already (mpirun --bind-to core): use it whole. Otherwise share.
  const int hardware = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (allowed < hardware) return allowed;
  return std::max(1, allowed / std::max(1, ranks_sharing));
}

}  // namespace coil
