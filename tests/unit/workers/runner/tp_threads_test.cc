// Tensor parallelism in one process on the CPU: shards on thread ranks (a thread group
// communicator, no mpirun) give the TP1 model's tokens (greedy, plain temperature, top_p)
// and its logits within 1e-5 relative, with groups held whole, shared by two ranks, and
// split inside a rank's heads. tp_mpi_test checks the same across processes; the GPU
// version of this test is in model_gpu_test.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "tests/unit/workers/runner/runner_fixture.h"
#include "tests/unit/workers/runner/thread_ranks.h"

namespace coil {
namespace {

using testing_reference::ExpectShardsMatchTp1;
using testing_reference::RunOnThreadRanks;

struct Case {
  int tp, ngroups;
};

class ThreadRanksTest : public ::testing::TestWithParam<Case> {};

TEST_P(ThreadRanksTest, ShardsGiveTheTp1TokensAndLogits) {
  const Case& c = GetParam();
  std::vector<std::pair<std::string, std::string>> sets = {{"ngroups", absl::StrCat(c.ngroups)}};
  // 3 groups: d_model 96 gives 12 heads, 4 per group; at TP4 each rank's 3 heads start
  // inside a group or reach into the next.
  if (c.ngroups == 3) sets.push_back({"d_model", "96"});
  const auto dir = testing_reference::WriteShape(absl::StrCat("tp_threads_", c.tp, "_", c.ngroups),
                                                 "tiny", checkpoint::DType::kF32, sets);
  ASSERT_TRUE(dir.ok()) << dir.status();
  const auto cpu = [](int) { return CreateBackend(BackendKind::kCpu, {.threads = 1}); };
  const std::vector<int32_t> prompt = testing_reference::TokensBelow(250, 23, 17);
  const auto tp1 = RunOnThreadRanks(*dir, 1, cpu, prompt, 24);
  const auto sharded = RunOnThreadRanks(*dir, c.tp, cpu, prompt, 24);
  ExpectShardsMatchTp1(tp1, sharded, tp1[0].prompt_logits.size() / prompt.size(), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Cases, ThreadRanksTest,
                         ::testing::Values(Case{2, 1}, Case{2, 2}, Case{4, 2}, Case{4, 3}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return absl::StrCat("tp", info.param.tp, "_groups", info.param.ngroups);
                         });

}  // namespace
}  // namespace coil
