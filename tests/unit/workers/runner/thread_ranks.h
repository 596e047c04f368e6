// Tensor parallelism in one process, for tests: the ranks of a thread group
// (workers/comm/thread_communicator.h), each a thread that loads its shard of a model on a
// backend of its own and runs the same steps. This is how a sharded model runs on one GPU
// (several backends on it), where NCCL refuses two ranks per GPU and MPI may be missing.
#ifndef COIL_TESTS_UNIT_WORKERS_RUNNER_THREAD_RANKS_H_
#define COIL_TESTS_UNIT_WORKERS_RUNNER_THREAD_RANKS_H_

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/unit/workers/runner/runner_fixture.h"
#include "workers/comm/thread_communicator.h"
#include "workers/model/model_files.h"
#include "workers/model/model.h"
#include "workers/model_runner.h"

namespace coil::testing_reference {

// What one rank saw: the logits of every prompt position, and tokens generated greedily,
// with plain temperature (the device Gumbel-max path on a GPU) and with top_p (the host
// sampler).
struct RankOutputs {
  std::vector<float> prompt_logits;
  std::vector<float> decode_logits;  // kDecodeSteps decode steps after the prompt, in turn
  std::vector<int32_t> greedy, plain, top_p;
};

// The decode steps whose logits RankOutputs keeps: fixed tokens fed one at a time.
inline constexpr int32_t kDecodeSteps = 3;

// Runs `prompt`, kDecodeSteps decode steps of fixed tokens after it, and `n` generated
// tokens of each kind on `tp` thread ranks, each loading its shard of the model in `dir`
// on make_backend(rank) with `load` (and KV pages as `pages` says, for a model with
// attention); returns each rank's outputs. A
// rank that cannot set up would leave the others waiting in a collective for ever, so
// that ends the test program, with the reason.
inline std::vector<RankOutputs> RunOnThreadRanks(
    const std::string& dir, int tp,
    const std::function<absl::StatusOr<std::unique_ptr<Backend>>(int rank)>& make_backend,
    const std::vector<int32_t>& prompt, int n, const model::LoadOptions& load = {},
    const TestPages& pages = {}) {
  std::vector<RankOutputs> outputs(static_cast<size_t>(tp));
  auto group = comm::MakeThreadGroup(tp);
  EXPECT_TRUE(group.ok()) << group.status();
  if (!group.ok()) return outputs;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < tp; ++rank) {
    threads.emplace_back([&, rank] {
      comm::Communicator& comm = *(*group)[static_cast<size_t>(rank)];
      RankOutputs& out = outputs[static_cast<size_t>(rank)];
      const auto fatal = [rank](const absl::Status& status) {
        if (status.ok()) return;
        std::fprintf(stderr, "rank %d cannot set up its shard: %s\n", rank,
                     status.ToString().c_str());
        std::abort();
      };
      auto backend = make_backend(rank);
      fatal(backend.status());
      auto files = model::OpenModelFiles(dir);
      fatal(files.status());
      auto model = model::Model::Load(*files, **backend, comm, load);
      fatal(model.status());
      auto runner = ModelRunner::Create(**model, **backend, comm, 2, pages.Options(2));
      fatal(runner.status());
      auto logits = (*runner)->ExecuteAllLogits(
          WithPages(OneSequence(1, prompt, 0, static_cast<int32_t>(prompt.size()), {}, 0), pages));
      EXPECT_TRUE(logits.ok()) << "rank " << rank << ": " << logits.status();
      if (logits.ok()) out.prompt_logits = std::move(logits).value();
      std::vector<int32_t> fed = prompt;
      for (int32_t i = 0; i < kDecodeSteps && logits.ok(); ++i) {
        fed.push_back(7 + 3 * i);
        logits = (*runner)->ExecuteAllLogits(WithPages(
            OneSequence(2 + i, fed, static_cast<int32_t>(fed.size()) - 1, 1, {}, 0), pages));
        EXPECT_TRUE(logits.ok()) << "rank " << rank << ": " << logits.status();
        if (logits.ok())
          out.decode_logits.insert(out.decode_logits.end(), logits->begin(), logits->end());
      }
      out.greedy = Generate(**runner, prompt, {}, n, pages);
      SamplingParams sampled;
      sampled.temperature = 0.9f;
      sampled.seed = 1234;
      out.plain = Generate(**runner, prompt, sampled, n, pages);
      sampled.top_p = 0.95f;
      out.top_p = Generate(**runner, prompt, sampled, n, pages);
    });
  }
  for (std::thread& thread : threads) thread.join();
  return outputs;
}

// Every rank of a TP run against the TP1 run: the same tokens of each kind, and logits
// within `tolerance` relative per row (TP changes only the order of some sums).
inline void ExpectShardsMatchTp1(const std::vector<RankOutputs>& tp1,
                                 const std::vector<RankOutputs>& sharded, size_t vocab,
                                 double tolerance) {
  ASSERT_EQ(tp1.size(), 1u);
  const RankOutputs& want = tp1[0];
  ASSERT_FALSE(want.prompt_logits.empty());
  ASSERT_FALSE(want.greedy.empty());
  for (size_t rank = 0; rank < sharded.size(); ++rank) {
    SCOPED_TRACE(absl::StrCat("rank ", rank, " of ", sharded.size()));
    const RankOutputs& got = sharded[rank];
    ASSERT_EQ(got.prompt_logits.size(), want.prompt_logits.size());
    EXPECT_LT(WorstRowError(got.prompt_logits, want.prompt_logits, vocab), tolerance);
    ASSERT_EQ(got.decode_logits.size(), want.decode_logits.size());
    ASSERT_FALSE(want.decode_logits.empty());
    EXPECT_LT(WorstRowError(got.decode_logits, want.decode_logits, vocab), tolerance);
    EXPECT_EQ(got.greedy, want.greedy);
    EXPECT_EQ(got.plain, want.plain);
    EXPECT_EQ(got.top_p, want.top_p);
  }
}

}  // namespace coil::testing_reference

#endif  // COIL_TESTS_UNIT_WORKERS_RUNNER_THREAD_RANKS_H_
