// Prefix caching end to end on thread ranks: the scheduler plans (with its prefix cache on
// or off), rank 0 encodes each plan and broadcasts it, every rank decodes and runs it
// (restores, forward pass, snapshots) on its own shard of a tiny model (chunk size 8): the
// Mamba2 one, and the hybrid one, whose snapshots also share their prefix's KV pages with
// the requests resumed from them. The invariant checked is warm = cold, bit for bit: a
// request resumed from a snapshot left by an earlier request gives the very tokens and
// logprobs (greedy, seeded temperature, top_p) of the same request on a server with no
// cache, at TP1, TP2 and TP4, for a shared prefix that ends on a chunk boundary, one token
// after it and one token before it. The cached-token counts are worked out by hand beside
// each case. A bf16 SSM state, rounded at chunk boundaries (where snapshots are
// taken), keeps the invariant too.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "scheduler/scheduler.h"
#include "tests/unit/workers/runner/runner_fixture.h"
#include "workers/comm/thread_communicator.h"
#include "workers/model/model.h"
#include "workers/model/model_files.h"
#include "workers/model_runner.h"
#include "workers/plan_codec.h"
#include "workers/worker_loop.h"

namespace coil {
namespace {

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  int32_t cached = -1;
};

// Sends `plan` from rank 0 to every rank as its length, then its bytes.
absl::StatusOr<StepPlan> BroadcastPlan(comm::Communicator& comm, const StepPlan* plan) {
  std::string bytes = comm.rank() == 0 ? EncodeStepPlan(*plan) : std::string();
  int64_t size = static_cast<int64_t>(bytes.size());
  if (absl::Status sent = comm.Broadcast(&size, sizeof(size), 0); !sent.ok()) return sent;
  bytes.resize(static_cast<size_t>(size));
  if (absl::Status sent = comm.Broadcast(bytes.data(), bytes.size(), 0); !sent.ok()) return sent;
  return DecodeStepPlan(bytes);
}

// Serves `batches` in turn on `tp` thread ranks: a batch's requests are added together
// and stepped until all finish; the scheduler (and its cache) lives across batches.
// Returns each request's outcome, by request id.
std::map<uint64_t, Outcome> Serve(const std::string& dir, int tp, const SchedulerConfig& config,
                                  const std::vector<std::vector<NewRequest>>& batches,
                                  ::coil::DType state_dtype) {
  std::map<uint64_t, Outcome> outcomes;
  auto group = comm::MakeThreadGroup(tp);
  EXPECT_TRUE(group.ok()) << group.status();
  if (!group.ok()) return outcomes;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < tp; ++rank) {
    threads.emplace_back([&, rank] {
      comm::Communicator& comm = *(*group)[static_cast<size_t>(rank)];
      // A rank that cannot set up would leave the others in a collective for ever.
      const auto fatal = [rank](const absl::Status& status) {
        if (status.ok()) return;
        std::fprintf(stderr, "rank %d cannot set up: %s\n", rank, status.ToString().c_str());
        std::abort();
      };
      auto backend = CreateBackend(BackendKind::kCpu, {.threads = 1});
      fatal(backend.status());
      auto files = model::OpenModelFiles(dir);
      fatal(files.status());
      auto model = model::Model::Load(*files, **backend, comm, {});
      fatal(model.status());
      RunnerOptions run;
      run.kv_pages = config.kv_pages;
      run.block_size = config.block_size;
      run.state_dtype = state_dtype;
      auto runner = ModelRunner::Create(**model, **backend, comm, config.state_rows, run);
      fatal(runner.status());
      if (rank > 0) {
        while (true) {
          absl::StatusOr<StepPlan> plan = BroadcastPlan(comm, nullptr);
          fatal(plan.status());
          if (plan->shutdown) return;
          ExecuteDecodedPlan(**runner, comm, plan);
        }
      }
      auto scheduler = Scheduler::Create(config);
      fatal(scheduler.status());
      // A failure is recorded and ends the serving, but the workers are still shut down.
      bool failed = false;
      for (const std::vector<NewRequest>& batch : batches) {
        for (const NewRequest& request : batch) {
          const absl::Status added = (*scheduler)->AddRequest(request);
          EXPECT_TRUE(added.ok()) << added;
        }
        for (int step = 0; step < 1000 && !failed && (*scheduler)->HasUnfinishedRequests();
             ++step) {
          const StepPlan plan = (*scheduler)->Schedule();
          const absl::StatusOr<StepPlan> sent = BroadcastPlan(comm, &plan);
          fatal(sent.status());
          const StepResult result = ExecuteDecodedPlan(**runner, comm, sent);
          auto updates = (*scheduler)->Update(plan, result);
          failed = plan.sequences.empty() || !result.ok || !updates.ok();
          EXPECT_FALSE(failed) << "step " << step << ": " << result.error << " "
                               << updates.status();
          if (failed) break;
          for (const RequestUpdate& update : *updates) {
            Outcome& outcome = outcomes[update.request_id];
            outcome.tokens.push_back(update.token->token_id);
            outcome.logprobs.push_back(update.token->logprob);
            outcome.cached = update.num_cached_tokens;
          }
        }
      }
      StepPlan shutdown = (*scheduler)->ShutdownPlan();
      fatal(BroadcastPlan(comm, &shutdown).status());
    });
  }
  for (std::thread& thread : threads) thread.join();
  return outcomes;
}

// `block_size` 0: the Mamba2 model, no pages.
SchedulerConfig Config(bool prefix_cache, int32_t block_size) {
  SchedulerConfig config;
  config.max_num_seqs = 8;
  config.state_rows = 8;
  config.max_batched_tokens = 256;
  config.max_model_len = 128;
  config.ssd_chunk_size = 8;  // both tiny models' chunk_size
  config.prefix_cache = prefix_cache;
  if (block_size > 0) {
    config.num_attention_layers = 2;  // nemotron-tiny's "M*-M-*"
    config.block_size = block_size;
    config.kv_pages = 8 * 128 / block_size;  // every row at full length
  }
  return config;
}

NewRequest Request(uint64_t id, std::vector<int32_t> prompt, const SamplingParams& sampling) {
  NewRequest request;
  request.request_id = id;
  request.prompt_token_ids = std::move(prompt);
  request.sampling = sampling;
  request.sampling.logprobs = true;
  request.max_tokens = 12;
  return request;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct Case {
  int tp;
  checkpoint::DType weights;
  int32_t block_size = 0;  // 0: the Mamba2 model; else the hybrid one with pages this size
  ::coil::DType state = ::coil::DType::kF32;  // the SSM state pool's type
};

class PrefixCacheExactnessTest : public ::testing::TestWithParam<Case> {};

TEST_P(PrefixCacheExactnessTest, WarmRunsGiveTheColdRunsBits) {
  const Case& c = GetParam();
  const auto dir = testing_reference::WriteShape(
      absl::StrCat("prefix_", c.tp, "_", checkpoint::DTypeName(c.weights), "_", c.block_size),
      c.block_size > 0 ? "nemotron-tiny" : "tiny", c.weights, {});
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::vector<int32_t> system = testing_reference::TokensBelow(250, 25, 31);
  const std::vector<int32_t> question = {11, 12, 13, 14, 15};
  const std::vector<int32_t> other = {21, 22, 23, 24, 25, 26};
  SamplingParams greedy, seeded, nucleus;
  seeded.temperature = 0.9f;
  seeded.seed = 77;
  nucleus = seeded;
  nucleus.top_p = 0.8f;

  // Shared prefixes of 24 (three whole chunks), 25 and 23 tokens. The warm server first
  // runs another question after the prefix, asking for a cut at its end: its snapshots
  // are at 24 and the cut rounded down, 24, 24 and 16. The request then resumes at 24, 24
  // and 16 (at 23 the snapshot at 24 holds a different token 23).
  for (const auto& [shared, cached] : {std::pair{24, 24}, {25, 24}, {23, 16}}) {
    SCOPED_TRACE(absl::StrCat("TP", c.tp, ", ", shared, " shared tokens"));
    const std::vector<int32_t> prefix(system.begin(), system.begin() + shared);
    std::vector<NewRequest> asked;
    uint64_t id = 10;
    for (const SamplingParams* sampling : {&greedy, &seeded, &nucleus}) {
      asked.push_back(Request(id++, Concat(prefix, question), *sampling));
    }
    NewRequest first = Request(1, Concat(prefix, other), greedy);
    first.cache_prefix_tokens = shared;

    const auto cold = Serve(*dir, c.tp, Config(false, c.block_size), {asked}, c.state);
    const auto warm = Serve(*dir, c.tp, Config(true, c.block_size), {{first}, asked}, c.state);
    ASSERT_EQ(warm.at(1).cached, 0);
    for (const NewRequest& request : asked) {
      SCOPED_TRACE(absl::StrCat("request ", request.request_id));
      const Outcome& want = cold.at(request.request_id);
      const Outcome& got = warm.at(request.request_id);
      ASSERT_EQ(want.tokens.size(), 12u);
      EXPECT_EQ(want.cached, 0);
      EXPECT_EQ(got.cached, cached);
      EXPECT_EQ(got.tokens, want.tokens);
      ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
      EXPECT_EQ(std::memcmp(got.logprobs.data(), want.logprobs.data(), want.logprobs.size() * 4), 0)
          << "logprobs differ in their bits";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PrefixCacheExactnessTest,
    ::testing::Values(Case{1, checkpoint::DType::kF32}, Case{2, checkpoint::DType::kF32},
                      Case{4, checkpoint::DType::kF32}, Case{2, checkpoint::DType::kBF16},
                      Case{1, checkpoint::DType::kF32, 4}, Case{2, checkpoint::DType::kF32, 8},
                      Case{4, checkpoint::DType::kF32, 4}, Case{2, checkpoint::DType::kBF16, 2},
                      Case{2, checkpoint::DType::kBF16, 0, ::coil::DType::kBF16},
                      Case{2, checkpoint::DType::kBF16, 4, ::coil::DType::kBF16}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return absl::StrCat(info.param.block_size > 0 ? "hybrid_" : "mamba2_", "tp", info.param.tp,
                          "_", checkpoint::DTypeName(info.param.weights),
                          info.param.block_size > 0 ? absl::StrCat("_pages", info.param.block_size)
                                                    : std::string(),
                          info.param.state == ::coil::DType::kBF16 ? "_statebf16" : "");
    });

}  // namespace
}  // namespace coil
