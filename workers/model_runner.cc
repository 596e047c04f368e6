#include "workers/model_runner.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "workers/comm/step_status.h"

namespace coil {

absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(model::Model& model,
                                                                 Backend& backend,
                                                                 comm::Communicator& comm,
                                                                 int64_t state_rows,
                                                                 const RunnerOptions& options) {
  if (state_rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("state rows is ", state_rows, "; give at least 1 (--state-rows)"));
  }
  COIL_ASSIGN_OR_RETURN(StatePool pool, StatePool::Create(backend, model.StateShape(
                                                                     state_rows, options.state_dtype)));
  std::optional<KvCache> kv_cache;
  if (model.config().has_attention()) {
    if (options.kv_pages < 1 || options.block_size < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("the model has attention layers and needs KV pages; got ", options.kv_pages,
                       " pages of ", options.block_size, " tokens (--kv-pages, --block-size)"));
    }
    COIL_ASSIGN_OR_RETURN(
        kv_cache, KvCache::Create(backend, model.KvShape(options.kv_pages, options.block_size)));
  }
  return std::unique_ptr<ModelRunner>(
      new ModelRunner(model, backend, comm, std::move(pool), std::move(kv_cache), options));
}

int32_t ModelRunner::GraphContext(const RunnerOptions& options) {
  const int64_t cache = std::max<int64_t>(options.kv_pages, 0) * std::max(options.block_size, 0);
  const int64_t asked = options.max_context > 0 ? options.max_context : cache;
  return static_cast<int32_t>(
      std::min<int64_t>({asked, cache, std::numeric_limits<int32_t>::max()}));
}

absl::StatusOr<StepMetadata> ModelRunner::Metadata(const StepPlan& plan) const {
  KvPages kv;
  if (kv_cache_) {
    kv.block_size = static_cast<int32_t>(kv_cache_->block_size());
    kv.pages = kv_cache_->pages();
  }
  return BuildStepMetadata(plan, model_.config().padded_vocab_size(), pool_.state_rows(), kv);
}

absl::StatusOr<int64_t> ModelRunner::RunStep(const StepMetadata& meta, bool all_rows) {
  if (!all_rows && graphs_.Takes(meta)) return graphs_.Run(meta, caches());
  return model_.Run(meta, caches(), all_rows);
}

absl::Status ModelRunner::Forward(const StepMetadata& meta, bool all_rows,
                                  std::vector<float>& logits) {
  logits.clear();
  if (meta.num_tokens() == 0) return absl::OkStatus();
  COIL_ASSIGN_OR_RETURN(const int64_t sampled, RunStep(meta, all_rows));
  logits.resize(static_cast<size_t>(sampled * model_.layout().vocab.size()));
  return model_.backend().CopyToHost(logits.data(), model_.logits(sampled).raw(),
                                     logits.size() * 4);
}

absl::Status ModelRunner::CopyStateRows(const std::vector<StateCopy>& copies, const char* what) {
  for (const StateCopy& copy : copies) {
    const absl::Status copied = pool_.CopyRow(backend_, copy.from_slot, copy.to_slot);
    if (!copied.ok())
      return absl::Status(copied.code(), absl::StrCat(what, ": ", copied.message()));
  }
  return absl::OkStatus();
}

StepResult ModelRunner::Execute(const StepPlan& plan) {
  StepResult result;
  result.step_id = plan.step_id;
  absl::Status local = absl::OkStatus();
  auto meta = Metadata(plan);
  std::vector<const ScheduledSequence*> rows;
  using Kind = DeviceSampler::RowSampling;
  std::vector<Kind> kinds;
  if (!meta.ok()) {
    local = meta.status();
  } else {
    rows.reserve(meta->sample_sequences.size());
    for (int32_t s : meta->sample_sequences) rows.push_back(&plan.sequences[s]);
    // Greedy rows need only each rank's argmax, taken on the device, and plain temperature
    // rows only its Gumbel-max: a pair per row comes back instead of a row of logits. Only
    // the other rows' logits are copied to the host. The same split on every rank (the
    // same plan), and a row's token does not depend on which way its neighbours go.
    kinds.reserve(rows.size());
    gumbel_temperatures_.resize(rows.size());
    gumbel_seeds_.resize(rows.size());
    gumbel_steps_.resize(rows.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      const absl::Span<const ScheduledSequence* const> one(&rows[r], 1);
      kinds.push_back(Sampler::AllGreedy(one)           ? Kind::kArgmax
                      : Sampler::AllPlainTemperature(one) ? Kind::kGumbel
                                                          : Kind::kHost);
      gumbel_temperatures_[r] = rows[r]->sampling.temperature;
      gumbel_seeds_[r] = rows[r]->sampling.seed;
      gumbel_steps_[r] = rows[r]->rng_step;
    }
    // Restores before the forward pass, snapshots after it (step.proto's order). A copy that
    // fails still lets the forward pass run: it keeps making its collective calls after a
    // local error (it returns the error at the end), so the ranks stay in step; only a
    // broken collective stops it early, and then the job cannot go on anyway.
    local = CopyStateRows(plan.restores, "restore");
    const absl::Status forward = [&]() -> absl::Status {
      answers_.host_logits.clear();  // the vectors keep their capacity
      answers_.ids.clear();
      answers_.values.clear();
      answers_.scores.clear();
      if (meta->num_tokens() == 0) return absl::OkStatus();
      COIL_ASSIGN_OR_RETURN(const int64_t sampled, RunStep(*meta, /*all_rows=*/false));
      return device_sampler_.Answer(model_.logits(sampled), kinds, gumbel_temperatures_,
                                    gumbel_seeds_, gumbel_steps_, answers_);
    }();
    if (local.ok()) local = forward;
    if (local.ok()) local = CopyStateRows(plan.snapshots, "snapshot");
  }
  auto failures = comm::AllReduceStepStatus(comm_, local);
  absl::Status combined = failures.ok() ? comm::CombineRankFailures(*failures) : failures.status();
  if (combined.ok() && meta.ok() && meta->num_samples() > 0) {
    auto tokens = SampleRows(rows, kinds);
    if (tokens.ok()) {
      result.tokens = std::move(tokens).value();
    } else {
      combined = tokens.status();
    }
  }
  if (!combined.ok()) {
    result.ok = false;
    result.failed_rank = failures.ok() && !failures->empty() ? failures->front().rank : -1;
    result.fatal = !failures.ok();
    result.error = std::string(combined.message());
    result.tokens.clear();
  }
  return result;
}

absl::StatusOr<std::vector<SampledToken>> ModelRunner::SampleRows(
    const std::vector<const ScheduledSequence*>& rows,
    const std::vector<DeviceSampler::RowSampling>& kinds) {
  using Kind = DeviceSampler::RowSampling;
  std::vector<SampledToken> tokens(rows.size());
  // One collective sampler call per kind present, in a fixed order (every rank has the
  // same kinds); each row's token lands at its own index.
  for (const Kind kind : {Kind::kArgmax, Kind::kGumbel, Kind::kHost}) {
    std::vector<const ScheduledSequence*> part;
    std::vector<size_t> where;
    std::vector<int32_t> ids;
    std::vector<float> values;
    std::vector<double> scores;
    for (size_t r = 0; r < rows.size(); ++r) {
      if (kinds[r] != kind) continue;
      part.push_back(rows[r]);
      where.push_back(r);
      ids.push_back(answers_.ids[r]);
      values.push_back(answers_.values[r]);
      scores.push_back(answers_.scores[r]);
    }
    if (part.empty()) continue;
    absl::StatusOr<std::vector<SampledToken>> got =
        kind == Kind::kArgmax   ? sampler_.SampleGreedy(part, ids, values)
        : kind == Kind::kGumbel ? sampler_.SampleGumbel(part, ids, scores)
                                : sampler_.Sample(part, answers_.host_logits.data());
    COIL_RETURN_IF_ERROR(got.status());
    for (size_t i = 0; i < where.size(); ++i) tokens[where[i]] = std::move((*got)[i]);
  }
  return tokens;
}

absl::StatusOr<std::vector<float>> ModelRunner::ExecuteAllLogits(const StepPlan& plan) {
  absl::Status local = absl::OkStatus();
  std::vector<float> shard;
  auto meta = Metadata(plan);
  if (!meta.ok()) {
    local = meta.status();
  } else {
    local = CopyStateRows(plan.restores, "restore");
    const absl::Status forward = Forward(*meta, /*all_rows=*/true, shard);
    if (local.ok()) local = forward;
    if (local.ok()) local = CopyStateRows(plan.snapshots, "snapshot");
  }
  COIL_ASSIGN_OR_RETURN(auto failures, comm::AllReduceStepStatus(comm_, local));
  COIL_RETURN_IF_ERROR(comm::CombineRankFailures(failures));

  // Ranks hold near-equal vocab ranges: pad each to the largest, gather, and lay the
  // columns out in vocab order.
  const int64_t rows = meta->num_tokens();
  const int64_t padded_vocab = model_.config().padded_vocab_size();
  const int tp = comm_.size();
  int64_t widest = 0;
  for (int r = 0; r < tp; ++r) widest = std::max<int64_t>(widest, PartitionVocab(static_cast<int32_t>(padded_vocab), tp, r).size());
  const int64_t local_width = model_.layout().vocab.size();
  std::vector<float> padded(static_cast<size_t>(rows * widest), 0.0f);
  for (int64_t t = 0; t < rows; ++t) {
    std::memcpy(&padded[t * widest], &shard[t * local_width], static_cast<size_t>(local_width) * 4);
  }
  std::vector<float> gathered(padded.size() * static_cast<size_t>(tp));
  COIL_RETURN_IF_ERROR(comm_.AllGather(padded.data(), padded.size(), gathered.data()));
  std::vector<float> logits(static_cast<size_t>(rows * padded_vocab));
  for (int r = 0; r < tp; ++r) {
    const VocabRange range = PartitionVocab(static_cast<int32_t>(padded_vocab), tp, r);
    for (int64_t t = 0; t < rows; ++t) {
      std::memcpy(&logits[t * padded_vocab + range.begin],
                  &gathered[(static_cast<size_t>(r) * rows + t) * widest],
                  static_cast<size_t>(range.size()) * 4);
    }
  }
  return logits;
}

}  // namespace coil
