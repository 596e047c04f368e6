// The thread count follows the CPUs the process may use: checked by narrowing this
// process's affinity to one CPU (what mpirun's default binding does) and restoring it.
#include "common/cpus.h"

#include <sched.h>

#include "gtest/gtest.h"

namespace coil {
namespace {

TEST(CpusTest, ExplicitThreadsAreKept) {
  EXPECT_EQ(ChooseThreads(3, 1), 3);
  EXPECT_EQ(ChooseThreads(1, 4), 1);
}

TEST(CpusTest, DefaultFollowsTheAffinityMask) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  const int all = AllowedCpus();
  EXPECT_EQ(all, CPU_COUNT(&saved));
  EXPECT_GE(ChooseThreads(0, 1), 1);
  EXPECT_LE(ChooseThreads(0, 1), all);

  cpu_set_t one;
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &saved)) {
      CPU_SET(cpu, &one);
      break;
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  EXPECT_EQ(AllowedCpus(), 1);
  EXPECT_EQ(ChooseThreads(0, 1), 1);  // bound to one core: one thread, not hardware count
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
}

}  // namespace
}  // namespace coil
