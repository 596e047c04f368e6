// Draws the next token of every sampled sequence of a step from logits split by vocab rows over the
// tensor-parallel ranks, without gathering a logits row (docs/ARCHITECTURE.md §5). Every rank calls
// Sample with the same rows and returns the same tokens; the token does not depend on the number of
// ranks, only on the logits, the parameters, the seed and the RNG step.
//
// Order of processing (Hugging Face's warper order): penalties on the raw logits, then
// greedy (temperature 0) is the argmax, lowest id on ties; otherwise divide by the
// temperature, keep the top_k, then the nucleus top_p (renormalised over what top_k kept),
// then drop what is below min_p times the most likely probability, and draw by Gumbel-max
// with a counter-based RNG keyed by (seed, rng_step, vocab id). Ids at or above the real
// vocabulary size are never chosen. Logprobs are those of the model's raw distribution
// (before penalties and temperature).
#ifndef COIL_WORKERS_SAMPLER_H_
#define COIL_WORKERS_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "scheduler/plan.h"
#include "workers/comm/communicator.h"
#include "workers/vocab_partition.h"

namespace coil {

class Sampler {
 public:
  // `comm` must outlive the sampler and use host memory. `range` is this rank's share of the
  // padded vocabulary (PartitionVocab); `vocab_size` the real vocabulary.
  Sampler(comm::Communicator& comm, VocabRange range, int32_t vocab_size);

  // `logits` is [rows.size(), range.size()] row-major: this rank's columns of each sampled
  // row, in the order of `rows`. Penalties are applied to it in place. Collective: every
  // rank calls it with the same `rows`.
  absl::StatusOr<std::vector<SampledToken>> Sample(
      absl::Span<const ScheduledSequence* const> rows, float* logits);

  // Whether Sample would only take each row's argmax: every row greedy (temperature 0),
  // without penalties or logprobs. Such a step needs no logits on the host (SampleGreedy).
  static bool AllGreedy(absl::Span<const ScheduledSequence* const> rows);

  // Whether Sample would only take each row's Gumbel-max over every real id: every row
  // random (temperature > 0) without top_k, top_p, min_p, penalties or logprobs. Then the
  // token is Backend::GumbelArgmax's answer, merged across ranks by the larger score and
  // the lower id, and the step needs no logits on the host.
  static bool AllPlainTemperature(absl::Span<const ScheduledSequence* const> rows);

  // Sample's answer for an AllPlainTemperature step from each rank's Gumbel-max over its
  // real-vocabulary columns: ids[r] the global id of row r's best score on this rank (-1
  // when none) and scores[r] that score. Collective.
  absl::StatusOr<std::vector<SampledToken>> SampleGumbel(
      absl::Span<const ScheduledSequence* const> rows, absl::Span<const int32_t> ids,
      absl::Span<const double> scores);

  // Sample's answer for an AllGreedy step from each rank's argmax over its real-vocabulary
  // columns instead of the logits: ids[r] the global id of row r's largest value on this
  // rank (the lowest among equals; -1 when none) and values[r] that value. Collective.
  absl::StatusOr<std::vector<SampledToken>> SampleGreedy(
      absl::Span<const ScheduledSequence* const> rows, absl::Span<const int32_t> ids,
      absl::Span<const float> values);

 private:
  comm::Communicator& comm_;
  VocabRange range_;
  int32_t vocab_size_;
};

// Checks sampling parameters (the message names the field and its allowed range).
absl::Status ValidateSamplingParams(const SamplingParams& params);

}  // namespace coil

#endif  // COIL_WORKERS_SAMPLER_H_
