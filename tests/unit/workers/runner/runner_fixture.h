// Test fixture pieces shared by the runner tests that load a whole model: a random model
// written to a temporary directory, loaded on a backend with a single-rank communicator,
// and step plans built from token lists.
#ifndef COIL_TESTS_UNIT_WORKERS_RUNNER_RUNNER_FIXTURE_H_
#define COIL_TESTS_UNIT_WORKERS_RUNNER_RUNNER_FIXTURE_H_

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/kv_cache.h"
#include "tests/unit/workers/runner/test_models.h"
#include "workers/comm/single_rank_communicator.h"
#include "workers/model/model.h"
#include "workers/model/model_config.h"
#include "workers/model/model_files.h"
#include "workers/model/model_writer.h"
#include "workers/model_runner.h"

namespace coil::testing_reference {

// Writes the named shape ("tiny", "130m") with `sets` applied and amplified random weights
// (test_models.h); returns the directory.
inline absl::StatusOr<std::string> WriteShape(
    const std::string& name, const std::string& shape, checkpoint::DType matrix_dtype,
    const std::vector<std::pair<std::string, std::string>>& sets) {
  absl::StatusOr<model::ModelConfig> config = model::NamedModelShape(shape);
  if (!config.ok()) return config.status();
  for (const auto& [key, value] : sets) {
    const absl::Status set = model::SetModelConfigField(*config, key, value);
    if (!set.ok()) return set;
  }
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    absl::StrCat("coil_runner_fixture_", ::getpid(), "_", name);
  std::filesystem::create_directories(dir);
  std::vector<model::TensorData> tensors =
      model::RandomModelTensors(*config, matrix_dtype, checkpoint::DType::kF32, 7);
  Amplify(tensors);
  model::WriteOptions options;
  if (config->format == model::ConfigFormat::kNemotronH) {
    options.layout = checkpoint::KeyLayout::kHuggingFace;  // its only layout
  }
  const absl::Status written = model::WriteModelDirectory(*config, tensors, options, dir.string());
  if (!written.ok()) return written;
  return dir.string();
}

// A model on `backend` (owned here) with one rank and a runner over `state_rows` rows.
struct LoadedModel {
  model::ModelFiles files;
  std::unique_ptr<Backend> backend;
  comm::SingleRankCommunicator comm;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<ModelRunner> runner;
};

inline absl::StatusOr<std::unique_ptr<LoadedModel>> LoadOn(const std::string& dir,
                                                           std::unique_ptr<Backend> backend,
                                                           int64_t state_rows,
                                                           model::WeightType weights,
                                                           const RunnerOptions& run = {}) {
  auto loaded = std::make_unique<LoadedModel>();
  loaded->backend = std::move(backend);
  auto files = model::OpenModelFiles(dir);
  if (!files.ok()) return files.status();
  loaded->files = std::move(files).value();
  model::LoadOptions options;
  options.weight_type = weights;
  auto model =
      model::Model::Load(loaded->files, *loaded->backend, loaded->comm, options);
  if (!model.ok()) return model.status();
  loaded->model = std::move(model).value();
  auto runner =
      ModelRunner::Create(*loaded->model, *loaded->backend, loaded->comm, state_rows, run);
  if (!runner.ok()) return runner.status();
  loaded->runner = std::move(runner).value();
  return loaded;
}

// The run tokens[begin, begin + count) of request `id` on `slot`, sampled greedily at its
// end; fresh when it starts the sequence.
inline ScheduledSequence RunOf(uint64_t id, int32_t slot, const std::vector<int32_t>& tokens,
                               int32_t begin, int32_t count) {
  ScheduledSequence run;
  run.request_id = id;
  run.state_slot = slot;
  run.fresh = begin == 0;
  run.start_position = begin;
  run.token_ids.assign(tokens.begin() + begin, tokens.begin() + begin + count);
  run.sample = true;
  return run;
}

// A plan of `runs`, the decodes (one token, resumed) moved first as the scheduler does.
inline StepPlan PlanOf(std::vector<ScheduledSequence> runs, uint64_t step_id) {
  StepPlan plan;
  plan.step_id = step_id;
  std::stable_partition(runs.begin(), runs.end(), [](const ScheduledSequence& run) {
    return !run.fresh && run.token_ids.size() == 1;
  });
  for (const ScheduledSequence& run : runs) {
    if (!run.fresh && run.token_ids.size() == 1) ++plan.num_decodes;
  }
  plan.sequences = std::move(runs);
  return plan;
}

// KV pages for plans built by hand (the scheduler's job in a server): the sequence on state
// row r owns pages [r * pages_per_row, (r + 1) * pages_per_row) of blocks of `block_size`
// tokens, as many as its positions need. block_size 0: a model without attention.
struct TestPages {
  int32_t block_size = 0;
  int32_t pages_per_row = 0;
  // The runner options of a pool of `state_rows` rows' pages.
  RunnerOptions Options(int64_t state_rows) const {
    RunnerOptions run;
    run.block_size = block_size > 0 ? block_size : 16;
    run.kv_pages = static_cast<int64_t>(pages_per_row) * state_rows;
    return run;
  }
};

// Gives every sequence of `plan` its block table (TestPages).
inline StepPlan WithPages(StepPlan plan, const TestPages& pages) {
  if (pages.block_size <= 0) return plan;
  for (ScheduledSequence& seq : plan.sequences) {
    const int32_t positions = seq.start_position + static_cast<int32_t>(seq.token_ids.size());
    const int32_t needed = (positions + pages.block_size - 1) / pages.block_size;
    seq.kv_block_table.clear();
    for (int32_t i = 0; i < needed; ++i) {
      seq.kv_block_table.push_back(seq.state_slot * pages.pages_per_row + i);
    }
  }
  return plan;
}

// One sequence's run tokens[begin, begin + count) as step `step` of request 1 on slot 0,
// sampled with `sampling` at RNG step `rng_step`.
inline StepPlan OneSequence(uint64_t step, const std::vector<int32_t>& tokens, int32_t begin,
                            int32_t count, const SamplingParams& sampling, int32_t rng_step) {
  return OneSequencePlan(step, tokens, begin, count, /*sample=*/true, sampling, rng_step);
}

// `n` tokens from `prompt`: the prompt in one step, then a decode step per token.
inline std::vector<int32_t> Generate(ModelRunner& runner, const std::vector<int32_t>& prompt,
                                     const SamplingParams& sampling, int n,
                                     const TestPages& pages = {}) {
  std::vector<int32_t> tokens = prompt, out;
  uint64_t step = 0;
  StepResult r = runner.Execute(WithPages(
      OneSequence(++step, tokens, 0, static_cast<int32_t>(tokens.size()), sampling, 0), pages));
  EXPECT_TRUE(r.ok) << r.error;
  if (!r.ok) return out;
  out.push_back(r.tokens[0].token_id);
  while (static_cast<int>(out.size()) < n) {
    tokens.push_back(out.back());
    r = runner.Execute(
        WithPages(OneSequence(++step, tokens, static_cast<int32_t>(tokens.size()) - 1, 1, sampling,
                              static_cast<int32_t>(out.size())),
                  pages));
    EXPECT_TRUE(r.ok) << r.error;
    if (!r.ok) break;
    out.push_back(r.tokens[0].token_id);
  }
  return out;
}

// The worst over rows of max |a - b| / max |b|, rows of `width` values.
inline double WorstRowError(const std::vector<float>& a, const std::vector<float>& b,
                            size_t width) {
  double worst = 0.0;
  for (size_t row = 0; row * width < b.size(); ++row) {
    double diff = 0.0, scale = 0.0;
    for (size_t i = row * width; i < (row + 1) * width && i < a.size(); ++i) {
      diff = std::max(diff, std::abs(double{a[i]} - double{b[i]}));
      scale = std::max(scale, std::abs(double{b[i]}));
    }
    worst = std::max(worst, diff / std::max(scale, 1e-30));
  }
  return worst;
}

inline std::vector<int32_t> TokensBelow(int32_t vocab, int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, vocab - 1);
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  for (int32_t& token : tokens) token = id(rng);
  return tokens;
}

// Every layer's conv and SSM state, all rows (scratch included), copied to the host.
inline absl::StatusOr<std::vector<float>> SnapshotState(Backend& backend, const StatePool& pool) {
  std::vector<float> all;
  for (int64_t l = 0; l < pool.shape().layers; ++l) {
    for (const Tensor& t : {pool.ConvState(l), pool.SsmState(l)}) {
      const size_t offset = all.size();
      all.resize(offset + static_cast<size_t>(t.numel()));
      const absl::Status copied =
          backend.CopyToHost(all.data() + offset, t.raw(), static_cast<size_t>(t.numel()) * 4);
      if (!copied.ok()) return copied;
    }
  }
  return all;
}

// Writes a snapshot back (the inverse of SnapshotState).
inline absl::Status RestoreState(Backend& backend, const StatePool& pool,
                                 const std::vector<float>& all) {
  size_t offset = 0;
  for (int64_t l = 0; l < pool.shape().layers; ++l) {
    for (const Tensor& t : {pool.ConvState(l), pool.SsmState(l)}) {
      const absl::Status copied =
          backend.CopyFromHost(t.raw(), all.data() + offset, static_cast<size_t>(t.numel()) * 4);
      if (!copied.ok()) return copied;
      offset += static_cast<size_t>(t.numel());
    }
  }
  return absl::OkStatus();
}

// The bytes of K and V of every cache layer's pages [0, pages) (the scratch page left out),
// copied to the host.
inline absl::StatusOr<std::vector<uint8_t>> SnapshotPages(Backend& backend, const KvCache& cache) {
  std::vector<uint8_t> all;
  for (int64_t l = 0; l < cache.shape().layers; ++l) {
    for (const Tensor& t : {cache.KCache(l), cache.VCache(l)}) {
      const size_t bytes = static_cast<size_t>(t.numel() / (cache.pages() + 1) * cache.pages()) *
                           DTypeSize(t.dtype());
      const size_t offset = all.size();
      all.resize(offset + bytes);
      const absl::Status copied = backend.CopyToHost(all.data() + offset, t.raw(), bytes);
      if (!copied.ok()) return copied;
    }
  }
  return all;
}

// The floats of one state row `row` of every layer within a snapshot.
inline std::vector<float> StateRow(const StatePool& pool, const std::vector<float>& all,
                                   int64_t row) {
  std::vector<float> out;
  size_t offset = 0;
  for (int64_t l = 0; l < pool.shape().layers; ++l) {
    for (const int64_t per_row :
         {pool.shape().conv_floats_per_row(), pool.shape().ssm_floats_per_row()}) {
      const auto begin = all.begin() + static_cast<std::ptrdiff_t>(offset + row * per_row);
      out.insert(out.end(), begin, begin + per_row);
      offset += static_cast<size_t>((pool.state_rows() + 1) * per_row);
    }
  }
  return out;
}

}  // namespace coil::testing_reference

#endif  // COIL_TESTS_UNIT_WORKERS_RUNNER_RUNNER_FIXTURE_H_
