// Tensor parallelism in one process on the CPU: shards on thread ranks (a thread group
// communicator, no mpirun) give the TP1 model's tokens (greedy, plain temperature, top_p)
// and its logits within 1e-5 relative, with groups held whole, shared by two ranks, and
// split inside a rank's heads. tp_mpi_test checks the same across processes; the GPU
// version of this test is in model_gpu_test.
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "tests/unit/workers/runner/runner_fixture.h"
#include "tests/unit/workers/runner/thread_ranks.h"
#include "workers/comm/thread_communicator.h"
#include "workers/model/model_files.h"
#include "workers/model/shard_layout.h"
#include "workers/model/weights.h"

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

// ShardWeightBytes, what start-up compares with the memory before it reads a weight
// (RankRuntime::LoadModel), is exactly what each rank's Model::Load then holds: Mamba2 and
// hybrid shapes, tied and untied embeddings, f32 and bf16 matrices, TP 1, 2 and 4.
TEST(ShardWeightBytesTest, IsWhatEachRankLoads) {
  struct WeightCase {
    std::string shape;
    checkpoint::DType stored;
    model::WeightType held;
    std::vector<std::pair<std::string, std::string>> sets;
  };
  const std::vector<WeightCase> cases = {
      {"tiny", checkpoint::DType::kF32, model::WeightType::kAuto, {}},
      {"tiny", checkpoint::DType::kF32, model::WeightType::kBF16, {{"tie_embeddings", "false"}}},
      {"tiny", checkpoint::DType::kBF16, model::WeightType::kAuto, {{"ngroups", "1"}}},
      {"nemotron-tiny", checkpoint::DType::kBF16, model::WeightType::kAuto, {}},
      {"nemotron-tiny", checkpoint::DType::kF32, model::WeightType::kF32, {}},
  };
  int index = 0;
  int compared = 0;  // ranks checked, over every case and TP size
  for (const WeightCase& c : cases) {
    const auto dir = testing_reference::WriteShape(absl::StrCat("weight_bytes_", index++), c.shape,
                                                   c.stored, c.sets);
    ASSERT_TRUE(dir.ok()) << dir.status();
    auto files = model::OpenModelFiles(*dir);
    ASSERT_TRUE(files.ok()) << files.status();
    for (int tp : {1, 2, 4}) {
      if (!model::MakeShardLayout(files->config, tp, 0).ok()) continue;  // tp does not divide
      auto group = comm::MakeThreadGroup(tp);
      ASSERT_TRUE(group.ok()) << group.status();
      std::vector<int64_t> loaded(tp, -1), predicted(tp, -2);
      std::vector<std::thread> threads;
      for (int rank = 0; rank < tp; ++rank) {
        threads.emplace_back([&, rank] {
          auto backend = CreateBackend(BackendKind::kCpu, {.threads = 1});
          ASSERT_TRUE(backend.ok()) << backend.status();
          model::LoadOptions load;
          load.weight_type = c.held;
          auto model = model::Model::Load(*files, **backend, *(*group)[rank], load);
          ASSERT_TRUE(model.ok()) << model.status();
          loaded[rank] = static_cast<int64_t>((*model)->weight_bytes());
          predicted[rank] =
              model::ShardWeightBytes(files->config, (*model)->layout(), (*model)->weight_dtype());
        });
      }
      for (std::thread& thread : threads) thread.join();
      for (int rank = 0; rank < tp; ++rank) {
        EXPECT_EQ(predicted[rank], loaded[rank])
            << c.shape << " rank " << rank << " of " << tp << " (case " << index - 1 << ")";
        EXPECT_GT(loaded[rank], 0);
        ++compared;
      }
    }
  }
  // Every case divides TP 1 and 2 at least (tiny: TP 4 too): no case was skipped whole.
  EXPECT_GE(compared, 5 * (1 + 2)) << compared << " ranks compared";
  std::printf("ShardWeightBytes checked on %d ranks\n", compared);
}

}  // namespace
}  // namespace coil
