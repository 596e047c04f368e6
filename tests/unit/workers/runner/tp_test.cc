// Tensor parallelism: run under mpirun with 1, 2 and 4 ranks. Every rank also builds the
// whole model on its own (a single-rank communicator) and checks that the sharded model
// gives the same logits within 1e-5 relative (1e-3 with a bf16 SSM state), the same 64
// greedy tokens and the same 64 sampled tokens for a fixed seed, with an f32 and with a
// bf16 state; and that each rank holds about 1/N of the weights.
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/backend_factory.h"
#include "tests/unit/kernels/forwarding_backend.h"
#include "tests/unit/workers/runner/runner_fixture.h"
#include "tests/unit/workers/runner/test_models.h"
#include "workers/comm/communicator.h"
#include "workers/comm/single_rank_communicator.h"
#include "workers/model/model_files.h"
#include "workers/model/model.h"
#include "workers/model/model_config.h"
#include "workers/model/model_writer.h"
#include "workers/model_runner.h"

namespace coil {
namespace {

namespace fs = std::filesystem;

// Rank 0 writes the tiny model with `sets`; every rank gets the directory.
std::string SharedTinyModel(comm::Communicator& comm, const std::string& name,
                            const std::vector<std::pair<std::string, std::string>>& sets) {
  char path[256] = {};
  if (comm.rank() == 0) {
    auto config = model::NamedModelShape("tiny");
    for (const auto& [key, value] : sets) EXPECT_TRUE(model::SetModelConfigField(*config, key, value).ok());
    const fs::path dir = fs::temp_directory_path() /
                         absl::StrCat("coil_tp_test_", ::getpid(), "_", name);
    fs::create_directories(dir);
    std::vector<model::TensorData> tensors =
        model::RandomModelTensors(*config, checkpoint::DType::kF32, checkpoint::DType::kF32, 3);
    testing_reference::Amplify(tensors);
    EXPECT_TRUE(model::WriteModelDirectory(*config, tensors, model::WriteOptions{}, dir.string()).ok());
    std::snprintf(path, sizeof(path), "%s", dir.c_str());
  }
  EXPECT_TRUE(comm.Broadcast(path, sizeof(path), 0).ok());
  return path;
}

struct Instance {
  model::ModelFiles files;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<ModelRunner> runner;
};

std::unique_ptr<Instance> Build(const std::string& dir, comm::Communicator& comm,
                                DType state_dtype = DType::kF32) {
  auto instance = std::make_unique<Instance>();
  instance->files = std::move(model::OpenModelFiles(dir)).value();
  BackendOptions options;
  options.threads = 1;
  instance->backend = std::move(CreateBackend(BackendKind::kCpu, options)).value();
  auto m = model::Model::Load(instance->files, *instance->backend, comm, {});
  EXPECT_TRUE(m.ok()) << m.status();
  instance->model = std::move(m).value();
  RunnerOptions run;
  run.state_dtype = state_dtype;
  instance->runner =
      std::move(ModelRunner::Create(*instance->model, *instance->backend, comm, 2, run)).value();
  return instance;
}

std::unique_ptr<comm::Communicator> World() {
  comm::CommunicatorOptions options;
  options.kind = comm::CommunicatorKind::kMpi;
  return std::move(comm::CreateCommunicator(options)).value();
}

using testing_reference::Generate;
using testing_reference::OneSequence;

// (ngroups, the SSM state's type)
class TensorParallelTest : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(TensorParallelTest, ShardedModelMatchesTheWholeModel) {
  const int ngroups = std::get<0>(GetParam());
  const DType state_dtype = std::get<1>(GetParam());
  auto world = World();
  std::vector<std::pair<std::string, std::string>> sets = {{"ngroups", absl::StrCat(ngroups)}};
  // 3 groups: d_model 96 gives 12 heads, 4 per group; at TP2 a rank holds one whole group
  // and half of the next, at TP4 three heads spanning two groups.
  if (ngroups == 3) sets.push_back({"d_model", "96"});
  const std::string dir = SharedTinyModel(*world, absl::StrCat("g", ngroups), sets);
  comm::SingleRankCommunicator single;
  auto whole = Build(dir, single, state_dtype);
  auto sharded = Build(dir, *world, state_dtype);

  std::mt19937 rng(17);
  std::vector<int32_t> prompt(23);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % 250);

  // Logits of every prompt position.
  const StepPlan plan = OneSequence(1, prompt, 0, 23, {}, 0);
  auto expected = whole->runner->ExecuteAllLogits(plan);
  auto got = sharded->runner->ExecuteAllLogits(plan);
  ASSERT_TRUE(expected.ok() && got.ok());
  const size_t vocab = 256;
  for (size_t t = 0; t < 23; ++t) {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < vocab; ++i) {
      diff = std::max(diff, std::abs(double{(*got)[t * vocab + i]} - (*expected)[t * vocab + i]));
      scale = std::max(scale, std::abs(double{(*expected)[t * vocab + i]}));
    }
    // With a bf16 state, fp32 values that differ in their last bits (the all-reduce sums in
    // another order) now and then round one bf16 step (2^-8) apart: logits then move by up
    // to about 3e-4 relative (measured), hence the looser bound there.
    EXPECT_LT(diff / scale, state_dtype == DType::kBF16 ? 1e-3 : 1e-5)
        << "row " << t << " at TP " << world->size();
  }

  // 64 greedy and 64 sampled tokens.
  SamplingParams greedy;
  EXPECT_EQ(Generate(*sharded->runner, prompt, greedy, 64), Generate(*whole->runner, prompt, greedy, 64));
  SamplingParams sampled;
  sampled.temperature = 0.9f;
  sampled.top_p = 0.95f;
  sampled.seed = 1234;
  EXPECT_EQ(Generate(*sharded->runner, prompt, sampled, 64), Generate(*whole->runner, prompt, sampled, 64));
  sampled.top_k = 20;
  sampled.top_p = 1.0f;
  EXPECT_EQ(Generate(*sharded->runner, prompt, sampled, 64), Generate(*whole->runner, prompt, sampled, 64));
  // Plain temperature: each rank's Gumbel-max on the device, merged by score, then id.
  sampled.top_k = 0;
  EXPECT_EQ(Generate(*sharded->runner, prompt, sampled, 64), Generate(*whole->runner, prompt, sampled, 64));
}

// ngroups 1 (every rank has a copy of the group), 2 (at TP4 two ranks share each group), 4
// (whole groups), 3 (ranks whose heads start inside a group and reach into the next).
INSTANTIATE_TEST_SUITE_P(Groups, TensorParallelTest,
                         ::testing::Combine(::testing::Values(1, 2, 4, 3),
                                            ::testing::Values(DType::kF32, DType::kBF16)),
                         [](const ::testing::TestParamInfo<std::tuple<int, DType>>& info) {
                           return absl::StrCat("g", std::get<0>(info.param), "_",
                                               std::get<1>(info.param) == DType::kBF16 ? "bf16"
                                                                                       : "f32");
                         });

TEST(TensorParallelMemoryTest, EachRankHoldsItsShareOfTheWeights) {
  auto world = World();
  const std::string dir = SharedTinyModel(*world, "mem", {{"tie_embeddings", "false"}});
  comm::SingleRankCommunicator single;
  auto whole = Build(dir, single);
  auto sharded = Build(dir, *world);
  // Replicated: the block norms and norm_f (d_model each, f32), plus with one group...
  // tiny has 2 groups; at TP2 each rank holds one, at TP4 each pair of ranks shares one, so
  // B/C rows and conv channels are replicated within a pair. Expected bytes worked out from
  // the shapes: everything split N ways except the norms and the shared group rows.
  const auto& c = whole->model->config();
  const int n = world->size();
  const size_t f32 = 4;
  const size_t norms = static_cast<size_t>((c.n_layer + 1) * c.d_model) * f32;
  const size_t total = whole->model->weight_bytes();
  const size_t group_rows = static_cast<size_t>(c.ngroups * c.d_state);
  // B and C rows of in_proj (d_model wide) plus conv weight+bias channels, per layer.
  const size_t bc_bytes = static_cast<size_t>(c.n_layer) * 2 * group_rows *
                          static_cast<size_t>(c.d_model + c.d_conv + 1) * f32;
  const int groups_per_rank_copy = n <= c.ngroups ? 1 : n / static_cast<int>(c.ngroups);
  const size_t expected = (total - norms - bc_bytes) / n + norms +
                          bc_bytes * groups_per_rank_copy / n;
  const size_t got = sharded->model->weight_bytes();
  // Padded vocab rows split unevenly by at most one row per rank.
  const size_t slack = static_cast<size_t>(2 * c.d_model) * f32;
  EXPECT_NEAR(static_cast<double>(got), static_cast<double>(expected), static_cast<double>(slack))
      << "rank " << world->rank() << " of " << n << " holds " << got << " of " << total << " bytes";
}

// The CPU backend with allocation failure on demand: what a rank whose GPU runs out of
// memory sees. Every op goes to the CPU backend's public op (which checks it again).
class AllocationFailingBackend final : public testing::ForwardingBackend {
 public:
  explicit AllocationFailingBackend(std::unique_ptr<Backend> cpu)
      : ForwardingBackend(std::move(cpu)) {}
  void set_fail_allocations(bool fail) { fail_ = fail; }

 private:
  absl::StatusOr<Buffer> DoAllocate(size_t bytes) override {
    if (fail_) return absl::ResourceExhaustedError(absl::StrCat("no memory for ", bytes, " bytes"));
    return inner().Allocate(bytes);
  }

  bool fail_ = false;
};

// A longer step than any before makes every rank grow its step scratch; when the last rank
// cannot, the step must fail on every rank (not leave the others in a collective that rank
// skips), and once memory is back the same step must run on every rank again.
TEST(TensorParallelErrorTest, ARankThatCannotGrowItsScratchFailsTheStepOnEveryRank) {
  auto world = World();
  const std::string dir = SharedTinyModel(*world, "grow", {});
  BackendOptions options;
  options.threads = 1;
  auto failing = std::make_unique<AllocationFailingBackend>(
      std::move(CreateBackend(BackendKind::kCpu, options)).value());
  AllocationFailingBackend& backend = *failing;
  auto files = std::move(model::OpenModelFiles(dir)).value();
  auto m = model::Model::Load(files, backend, *world, {});
  ASSERT_TRUE(m.ok()) << m.status();
  auto runner = ModelRunner::Create(**m, backend, *world, 2);
  ASSERT_TRUE(runner.ok()) << runner.status();

  std::vector<int32_t> prompt(23);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37) % 250);
  const StepResult small = (*runner)->Execute(OneSequence(1, prompt, 0, 4, {}, 0));
  ASSERT_TRUE(small.ok) << small.error;

  const bool last = world->rank() == world->size() - 1;
  backend.set_fail_allocations(last);
  const StepResult failed = (*runner)->Execute(OneSequence(2, prompt, 0, 23, {}, 0));
  EXPECT_FALSE(failed.ok) << "rank " << world->rank();
  EXPECT_TRUE(failed.tokens.empty());

  backend.set_fail_allocations(false);
  const StepResult again = (*runner)->Execute(OneSequence(3, prompt, 0, 23, {}, 0));
  EXPECT_TRUE(again.ok) << "rank " << world->rank() << ": " << again.error;
  EXPECT_EQ(again.tokens.size(), 1u);
}

}  // namespace
}  // namespace coil
