#include "workers/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/philox.h"

namespace coil {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int32_t kNoId = std::numeric_limits<int32_t>::max();  // loses every tie
// The largest Gumbel draw UniformOpen01 can produce: -log(-log(1 - 2^-54)) < 37.5.
constexpr double kMaxGumbel = 37.5;

// A (value, id) pair ordered by value, then by the lower id.
struct Candidate {
  float value = kNegInf;
  int32_t id = kNoId;
};
static_assert(std::is_trivially_copyable_v<Candidate>);

bool Better(const Candidate& a, const Candidate& b) {
  return a.value > b.value || (a.value == b.value && a.id < b.id);
}

struct ScoredCandidate {
  double score = -std::numeric_limits<double>::infinity();
  int32_t id = kNoId;
  int32_t padding = 0;
};

bool BetterScore(const ScoredCandidate& a, const ScoredCandidate& b) {
  return a.score > b.score || (a.score == b.score && a.id < b.id);
}

// What each rank knows of one row before any collective.
struct RowStats {
  float raw_max = kNegInf;  // max raw logit over this rank's valid ids
  float raw_sum = 0.0f;     // sum of exp(raw - raw_max), for logprobs
  Candidate best;           // argmax of the processed (penalised) logits
  double scaled_sum = 0.0;  // sum of exp((x - best.value) / T), random rows only
};
static_assert(std::is_trivially_copyable_v<RowStats>);

template <typename T>
absl::StatusOr<std::vector<T>> AllGather(comm::Communicator& comm, const std::vector<T>& local) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::vector<T> all(local.size() * static_cast<size_t>(comm.size()));
  COIL_RETURN_IF_ERROR(comm.AllGatherBytes(local.data(), local.size() * sizeof(T), all.data()));
  return all;
}

// Applies repetition (prompt and output tokens), frequency and presence (output tokens)
// penalties to this rank's columns of one row.
void ApplyPenalties(const ScheduledSequence& row, VocabRange range, float* logits) {
  const SamplingParams& params = row.sampling;
  absl::flat_hash_map<int32_t, int32_t> output_counts;
  absl::flat_hash_map<int32_t, bool> seen;
  for (size_t i = 0; i < row.history.size(); ++i) {
    const int32_t id = row.history[i];
    if (id < range.begin || id >= range.end) continue;
    seen[id] = true;
    if (static_cast<int32_t>(i) >= row.num_prompt_tokens) ++output_counts[id];
  }
  for (const auto& [id, unused] : seen) {
    float& logit = logits[id - range.begin];
    if (params.repetition_penalty != 1.0f) {
      logit = logit > 0.0f ? logit / params.repetition_penalty : logit * params.repetition_penalty;
    }
    const auto count = output_counts.find(id);
    if (count != output_counts.end()) {
      logit -= params.frequency_penalty * static_cast<float>(count->second) +
               params.presence_penalty;
    }
  }
}

// Sorted (best first) valid local candidates of one row.
std::vector<Candidate> SortedCandidates(const float* logits, VocabRange range, int32_t valid_end) {
  std::vector<Candidate> all;
  all.reserve(static_cast<size_t>(std::max(0, valid_end - range.begin)));
  for (int32_t id = range.begin; id < valid_end; ++id) {
    all.push_back({logits[id - range.begin], id});
  }
  std::sort(all.begin(), all.end(), Better);
  return all;
}

// The k best valid local candidates, sorted, padded to k with empty candidates.
std::vector<Candidate> TopK(const float* logits, VocabRange range, int32_t valid_end, int32_t k) {
  std::vector<Candidate> all;
  for (int32_t id = range.begin; id < valid_end; ++id) all.push_back({logits[id - range.begin], id});
  const size_t keep = std::min(all.size(), static_cast<size_t>(k));
  std::partial_sort(all.begin(), all.begin() + keep, all.end(), Better);
  all.resize(keep);
  all.resize(static_cast<size_t>(k));
  return all;
}

// Gumbel-max over a candidate list: the sample from softmax(value / T) restricted to it.
int32_t GumbelMax(const std::vector<Candidate>& candidates, const ScheduledSequence& row) {
  ScoredCandidate best;
  for (const Candidate& candidate : candidates) {
    const double score = static_cast<double>(candidate.value) / row.sampling.temperature +
                         philox::Gumbel(row.sampling.seed, static_cast<uint32_t>(row.rng_step),
                                        static_cast<uint32_t>(candidate.id));
    const ScoredCandidate scored{score, candidate.id, 0};
    if (BetterScore(scored, best)) best = scored;
  }
  return best.id;
}

bool IsRandom(const ScheduledSequence& row) { return row.sampling.temperature > 0.0f; }
bool UsesTopK(const ScheduledSequence& row) { return IsRandom(row) && row.sampling.top_k > 0; }
bool UsesNucleusOnly(const ScheduledSequence& row) {
  return IsRandom(row) && row.sampling.top_k <= 0 && row.sampling.top_p < 1.0f;
}
bool WantsLogprobs(const ScheduledSequence& row) {
  return row.sampling.logprobs || row.sampling.top_logprobs > 0;
}

// Keeps the shortest prefix of `sorted` whose probability (exp((v - max) / T) / z) reaches
// top_p, then drops what min_p excludes.
std::vector<Candidate> Filter(std::vector<Candidate> sorted, const ScheduledSequence& row,
                              float global_max, double z) {
  const double temperature = row.sampling.temperature;
  if (row.sampling.top_p < 1.0f) {
    double cumulative = 0.0;
    size_t keep = 0;
    while (keep < sorted.size()) {
      cumulative += std::exp((static_cast<double>(sorted[keep].value) - global_max) / temperature) / z;
      ++keep;
      if (cumulative >= row.sampling.top_p) break;
    }
    sorted.resize(keep);
  }
  if (row.sampling.min_p > 0.0f) {
    const double floor = std::log(static_cast<double>(row.sampling.min_p));
    std::erase_if(sorted, [&](const Candidate& c) {
      return (static_cast<double>(c.value) - global_max) / temperature < floor;
    });
  }
  return sorted;
}

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& params) {
  if (!(params.temperature >= 0.0f) || std::isinf(params.temperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature is ", params.temperature, "; it must be >= 0 (0 is greedy)"));
  }
  if (params.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k is ", params.top_k, "; it must be >= 0 (0 disables it)"));
  }
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_p is ", params.top_p, "; it must be in (0, 1]"));
  }
  if (!(params.min_p >= 0.0f && params.min_p <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_p is ", params.min_p, "; it must be in [0, 1]"));
  }
  if (!(params.repetition_penalty > 0.0f) || std::isinf(params.repetition_penalty)) {
    return absl::InvalidArgumentError(absl::StrCat("repetition_penalty is ",
                                                   params.repetition_penalty,
                                                   "; it must be > 0 (1 disables it)"));
  }
  if (!std::isfinite(params.presence_penalty) || !std::isfinite(params.frequency_penalty)) {
    return absl::InvalidArgumentError("presence_penalty and frequency_penalty must be finite");
  }
  if (params.top_logprobs < 0 || params.top_logprobs > 20) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_logprobs is ", params.top_logprobs, "; it must be in [0, 20]"));
  }
  return absl::OkStatus();
}

Sampler::Sampler(comm::Communicator& comm, VocabRange range, int32_t vocab_size)
    : comm_(comm), range_(range), vocab_size_(vocab_size) {}


absl::StatusOr<std::vector<SampledToken>> Sampler::Sample(
    absl::Span<const ScheduledSequence* const> rows, float* logits) {
  const size_t num_rows = rows.size();
  const int32_t width = range_.size();
  const int32_t valid_end = std::min(range_.end, vocab_size_);
  const int size = comm_.size();
  std::vector<SampledToken> tokens(num_rows);
  if (num_rows == 0) return tokens;

  bool any_logprobs = false, any_top_k = false, any_nucleus = false, any_plain_random = false;
  int32_t max_top_logprobs = 0;
  for (const ScheduledSequence* row : rows) {
    COIL_RETURN_IF_ERROR_CONTEXT(ValidateSamplingParams(row->sampling),
                                 absl::StrCat("request ", row->request_id));
    any_logprobs |= WantsLogprobs(*row);
    any_top_k |= UsesTopK(*row);
    any_nucleus |= UsesNucleusOnly(*row);
    any_plain_random |= IsRandom(*row) && !UsesTopK(*row) && !UsesNucleusOnly(*row);
    max_top_logprobs = std::max(max_top_logprobs, row->sampling.top_logprobs);
  }

  // Raw values are needed after penalties change them: keep the rows that want logprobs,
  // and this rank's raw top-n of them.
  std::vector<std::vector<float>> raw_rows(num_rows);
  std::vector<Candidate> local_top_raw(num_rows * static_cast<size_t>(max_top_logprobs));
  std::vector<RowStats> stats(num_rows);
  for (size_t r = 0; r < num_rows; ++r) {
    const ScheduledSequence& row = *rows[r];
    float* x = logits + r * static_cast<size_t>(width);
    RowStats& s = stats[r];
    if (WantsLogprobs(row)) {
      raw_rows[r].assign(x, x + width);
      for (int32_t id = range_.begin; id < valid_end; ++id) {
        s.raw_max = std::max(s.raw_max, x[id - range_.begin]);
      }
      double sum = 0.0;
      for (int32_t id = range_.begin; id < valid_end; ++id) {
        sum += std::exp(static_cast<double>(x[id - range_.begin]) - s.raw_max);
      }
      s.raw_sum = static_cast<float>(sum);
      if (row.sampling.top_logprobs > 0) {
        std::vector<Candidate> top = TopK(x, range_, valid_end, max_top_logprobs);
        std::copy(top.begin(), top.end(),
                  local_top_raw.begin() + static_cast<ptrdiff_t>(r * max_top_logprobs));
      }
    }
    if (row.sampling.HasPenalties()) ApplyPenalties(row, range_, x);
    for (int32_t id = range_.begin; id < valid_end; ++id) {
      const Candidate c{x[id - range_.begin], id};
      if (Better(c, s.best)) s.best = c;
    }
    if (IsRandom(row) && valid_end > range_.begin) {
      double sum = 0.0;
      for (int32_t id = range_.begin; id < valid_end; ++id) {
        sum += std::exp((static_cast<double>(x[id - range_.begin]) - s.best.value) /
                        row.sampling.temperature);
      }
      s.scaled_sum = sum;
    }
  }

  // One gather of every row's statistics: the global argmax, the normalisers.
  COIL_ASSIGN_OR_RETURN(std::vector<RowStats> all_stats, AllGather(comm_, stats));
  std::vector<Candidate> global_best(num_rows);
  std::vector<double> scaled_z(num_rows, 0.0), raw_log_z(num_rows, 0.0);
  for (size_t r = 0; r < num_rows; ++r) {
    const ScheduledSequence& row = *rows[r];
    float raw_max = kNegInf;
    for (int k = 0; k < size; ++k) {
      const RowStats& s = all_stats[k * num_rows + r];
      if (Better(s.best, global_best[r])) global_best[r] = s.best;
      raw_max = std::max(raw_max, s.raw_max);
    }
    double raw_sum = 0.0;
    for (int k = 0; k < size; ++k) {  // rank order: the same bits on every rank
      const RowStats& s = all_stats[k * num_rows + r];
      if (s.best.id != kNoId && IsRandom(row)) {
        scaled_z[r] += s.scaled_sum * std::exp((static_cast<double>(s.best.value) -
                                                global_best[r].value) /
                                               row.sampling.temperature);
      }
      if (s.raw_sum > 0.0f) raw_sum += s.raw_sum * std::exp(static_cast<double>(s.raw_max) - raw_max);
    }
    raw_log_z[r] = raw_max + std::log(raw_sum);
    tokens[r].request_id = row.request_id;
    tokens[r].token_id = global_best[r].id;  // greedy; random rows overwrite it below
  }

  // top_k rows: every rank's k best, merged; then top_p, min_p and Gumbel-max on the list.
  if (any_top_k) {
    int32_t max_k = 0;
    for (const ScheduledSequence* row : rows) {
      if (UsesTopK(*row)) max_k = std::max(max_k, row->sampling.top_k);
    }
    max_k = std::min(max_k, vocab_size_);
    std::vector<Candidate> local(num_rows * static_cast<size_t>(max_k));
    for (size_t r = 0; r < num_rows; ++r) {
      if (!UsesTopK(*rows[r])) continue;
      const int32_t k = std::min(rows[r]->sampling.top_k, max_k);
      std::vector<Candidate> top =
          TopK(logits + r * static_cast<size_t>(width), range_, valid_end, k);
      std::copy(top.begin(), top.end(), local.begin() + static_cast<ptrdiff_t>(r * max_k));
    }
    COIL_ASSIGN_OR_RETURN(std::vector<Candidate> all, AllGather(comm_, local));
    for (size_t r = 0; r < num_rows; ++r) {
      const ScheduledSequence& row = *rows[r];
      if (!UsesTopK(row)) continue;
      const int32_t k = std::min(row.sampling.top_k, max_k);
      std::vector<Candidate> merged;
      for (int rank = 0; rank < size; ++rank) {
        const Candidate* part = all.data() + (static_cast<size_t>(rank) * num_rows + r) * max_k;
        for (int32_t i = 0; i < k; ++i) {
          if (part[i].id != kNoId) merged.push_back(part[i]);
        }
      }
      std::sort(merged.begin(), merged.end(), Better);
      if (static_cast<int32_t>(merged.size()) > k) merged.resize(static_cast<size_t>(k));
      double z = 0.0;
      for (const Candidate& c : merged) {
        z += std::exp((static_cast<double>(c.value) - global_best[r].value) / row.sampling.temperature);
      }
      tokens[r].token_id = GumbelMax(Filter(std::move(merged), row, global_best[r].value, z), row);
    }
  }

  // top_p without top_k: each rank sends the shortest prefix of its sorted ids that reaches
  // top_p on its own (plus a margin for rounding). The global nucleus restricted to one rank
  // is a prefix of that rank's sorted ids whose mass, without the nucleus' last member, is
  // below top_p, so the union of these prefixes holds the whole nucleus in its exact order.
  if (any_nucleus) {
    std::vector<std::vector<Candidate>> prefixes(num_rows);
    std::vector<int32_t> counts(num_rows, 0);
    for (size_t r = 0; r < num_rows; ++r) {
      const ScheduledSequence& row = *rows[r];
      if (!UsesNucleusOnly(row)) continue;
      std::vector<Candidate> sorted =
          SortedCandidates(logits + r * static_cast<size_t>(width), range_, valid_end);
      double cumulative = 0.0;
      size_t keep = 0;
      const double target = static_cast<double>(row.sampling.top_p) + 1e-6;
      while (keep < sorted.size() && cumulative < target) {
        cumulative += std::exp((static_cast<double>(sorted[keep].value) - global_best[r].value) /
                               row.sampling.temperature) /
                      scaled_z[r];
        ++keep;
      }
      sorted.resize(keep);
      counts[r] = static_cast<int32_t>(keep);
      prefixes[r] = std::move(sorted);
    }
    COIL_ASSIGN_OR_RETURN(std::vector<int32_t> all_counts, AllGather(comm_, counts));
    size_t max_total = 0;
    for (int rank = 0; rank < size; ++rank) {
      size_t total = 0;
      for (size_t r = 0; r < num_rows; ++r) total += all_counts[rank * num_rows + r];
      max_total = std::max(max_total, total);
    }
    std::vector<Candidate> packed;
    packed.reserve(max_total);
    for (size_t r = 0; r < num_rows; ++r) {
      packed.insert(packed.end(), prefixes[r].begin(), prefixes[r].end());
    }
    packed.resize(max_total);
    COIL_ASSIGN_OR_RETURN(std::vector<Candidate> all, AllGather(comm_, packed));
    for (size_t r = 0; r < num_rows; ++r) {
      const ScheduledSequence& row = *rows[r];
      if (!UsesNucleusOnly(row)) continue;
      std::vector<Candidate> merged;
      for (int rank = 0; rank < size; ++rank) {
        size_t offset = static_cast<size_t>(rank) * max_total;
        for (size_t before = 0; before < r; ++before) offset += all_counts[rank * num_rows + before];
        const int32_t count = all_counts[rank * num_rows + r];
        merged.insert(merged.end(), all.begin() + static_cast<ptrdiff_t>(offset),
                      all.begin() + static_cast<ptrdiff_t>(offset + count));
      }
      std::sort(merged.begin(), merged.end(), Better);
      tokens[r].token_id =
          GumbelMax(Filter(std::move(merged), row, global_best[r].value, scaled_z[r]), row);
    }
  }

  // Random rows with neither top_k nor top_p: Gumbel-max over every id min_p keeps, each
  // rank over its own ids. An id can only win if its value plus the largest possible
  // Gumbel draw reaches the best value plus that id's own draw, which prunes most ids at
  // low temperatures without changing the result.
  if (any_plain_random) {
    std::vector<ScoredCandidate> local(num_rows);
    for (size_t r = 0; r < num_rows; ++r) {
      const ScheduledSequence& row = *rows[r];
      if (!IsRandom(row) || UsesTopK(row) || UsesNucleusOnly(row)) continue;
      const float* x = logits + r * static_cast<size_t>(width);
      const double temperature = row.sampling.temperature;
      const double best_value = global_best[r].value;
      const double floor = row.sampling.min_p > 0.0f
                               ? std::log(static_cast<double>(row.sampling.min_p))
                               : -std::numeric_limits<double>::infinity();
      const double prune = best_value / temperature +
                           philox::Gumbel(row.sampling.seed, static_cast<uint32_t>(row.rng_step),
                                          static_cast<uint32_t>(global_best[r].id)) -
                           kMaxGumbel;
      ScoredCandidate best;
      for (int32_t id = range_.begin; id < valid_end; ++id) {
        const double scaled = static_cast<double>(x[id - range_.begin]) / temperature;
        if (scaled < prune) continue;
        if ((static_cast<double>(x[id - range_.begin]) - best_value) / temperature < floor) continue;
        const ScoredCandidate scored{
            scaled + philox::Gumbel(row.sampling.seed, static_cast<uint32_t>(row.rng_step),
                                    static_cast<uint32_t>(id)),
            id, 0};
        if (BetterScore(scored, best)) best = scored;
      }
      local[r] = best;
    }
    COIL_ASSIGN_OR_RETURN(std::vector<ScoredCandidate> all, AllGather(comm_, local));
    for (size_t r = 0; r < num_rows; ++r) {
      const ScheduledSequence& row = *rows[r];
      if (!IsRandom(row) || UsesTopK(row) || UsesNucleusOnly(row)) continue;
      ScoredCandidate best;
      for (int rank = 0; rank < size; ++rank) {
        if (BetterScore(all[rank * num_rows + r], best)) best = all[rank * num_rows + r];
      }
      tokens[r].token_id = best.id;
    }
  }

  // Logprobs: the sampled token's raw value lives on one rank; the top-n are merged.
  if (any_logprobs) {
    const size_t stride = 1 + static_cast<size_t>(max_top_logprobs);
    std::vector<Candidate> local(num_rows * stride);
    for (size_t r = 0; r < num_rows; ++r) {
      if (!WantsLogprobs(*rows[r])) continue;
      const int32_t id = tokens[r].token_id;
      if (id >= range_.begin && id < range_.end) local[r * stride] = {raw_rows[r][id - range_.begin], id};
      std::copy(local_top_raw.begin() + static_cast<ptrdiff_t>(r * max_top_logprobs),
                local_top_raw.begin() + static_cast<ptrdiff_t>((r + 1) * max_top_logprobs),
                local.begin() + static_cast<ptrdiff_t>(r * stride + 1));
    }
    COIL_ASSIGN_OR_RETURN(std::vector<Candidate> all, AllGather(comm_, local));
    for (size_t r = 0; r < num_rows; ++r) {
      const ScheduledSequence& row = *rows[r];
      if (!WantsLogprobs(row)) continue;
      std::vector<Candidate> top;
      for (int rank = 0; rank < size; ++rank) {
        const Candidate* part = all.data() + (static_cast<size_t>(rank) * num_rows + r) * stride;
        if (part[0].id == tokens[r].token_id) {
          tokens[r].logprob = static_cast<float>(part[0].value - raw_log_z[r]);
        }
        for (int32_t i = 0; i < row.sampling.top_logprobs; ++i) {
          if (part[1 + i].id != kNoId) top.push_back(part[1 + i]);
        }
      }
      std::sort(top.begin(), top.end(), Better);
      if (static_cast<int32_t>(top.size()) > row.sampling.top_logprobs) {
        top.resize(static_cast<size_t>(row.sampling.top_logprobs));
      }
      for (const Candidate& c : top) {
        tokens[r].top_logprobs.push_back({c.id, static_cast<float>(c.value - raw_log_z[r])});
      }
    }
  }
  return tokens;
}

bool Sampler::AllPlainTemperature(absl::Span<const ScheduledSequence* const> rows) {
  for (const ScheduledSequence* row : rows) {
    if (!IsRandom(*row) || UsesTopK(*row) || UsesNucleusOnly(*row) ||
        row->sampling.min_p != 0.0f || row->sampling.HasPenalties() || WantsLogprobs(*row)) {
      return false;
    }
  }
  return true;
}

bool Sampler::AllGreedy(absl::Span<const ScheduledSequence* const> rows) {
  for (const ScheduledSequence* row : rows) {
    if (IsRandom(*row) || row->sampling.HasPenalties() || WantsLogprobs(*row)) return false;
  }
  return true;
}

absl::StatusOr<std::vector<SampledToken>> Sampler::SampleGreedy(
    absl::Span<const ScheduledSequence* const> rows, absl::Span<const int32_t> ids,
    absl::Span<const float> values) {
  const size_t num_rows = rows.size();
  if (ids.size() != num_rows || values.size() != num_rows) {
    return absl::InternalError(absl::StrCat("greedy sampling got ", ids.size(), " ids and ",
                                            values.size(), " values for ", num_rows, " rows"));
  }
  std::vector<SampledToken> tokens(num_rows);
  if (num_rows == 0) return tokens;
  for (const ScheduledSequence* row : rows) {
    COIL_RETURN_IF_ERROR_CONTEXT(ValidateSamplingParams(row->sampling),
                                 absl::StrCat("request ", row->request_id));
  }
  // The same candidates Sample's greedy rows compare: this rank's best valid id, or none.
  std::vector<Candidate> local(num_rows);
  for (size_t r = 0; r < num_rows; ++r) {
    const int32_t id = ids[r];
    if (id >= range_.begin && id < std::min(range_.end, vocab_size_)) local[r] = {values[r], id};
  }
  COIL_ASSIGN_OR_RETURN(std::vector<Candidate> all, AllGather(comm_, local));
  for (size_t r = 0; r < num_rows; ++r) {
    Candidate best;
    for (int k = 0; k < comm_.size(); ++k) {
      if (Better(all[k * num_rows + r], best)) best = all[k * num_rows + r];
    }
    tokens[r].request_id = rows[r]->request_id;
    tokens[r].token_id = best.id;
  }
  return tokens;
}

absl::StatusOr<std::vector<SampledToken>> Sampler::SampleGumbel(
    absl::Span<const ScheduledSequence* const> rows, absl::Span<const int32_t> ids,
    absl::Span<const double> scores) {
  const size_t num_rows = rows.size();
  if (ids.size() != num_rows || scores.size() != num_rows) {
    return absl::InternalError(absl::StrCat("gumbel sampling got ", ids.size(), " ids and ",
                                            scores.size(), " scores for ", num_rows, " rows"));
  }
  std::vector<SampledToken> tokens(num_rows);
  if (num_rows == 0) return tokens;
  for (const ScheduledSequence* row : rows) {
    COIL_RETURN_IF_ERROR_CONTEXT(ValidateSamplingParams(row->sampling),
                                 absl::StrCat("request ", row->request_id));
  }
  // The same candidates Sample's plain random rows compare.
  std::vector<ScoredCandidate> local(num_rows);
  for (size_t r = 0; r < num_rows; ++r) {
    const int32_t id = ids[r];
    if (id >= range_.begin && id < std::min(range_.end, vocab_size_)) local[r] = {scores[r], id, 0};
  }
  COIL_ASSIGN_OR_RETURN(std::vector<ScoredCandidate> all, AllGather(comm_, local));
  for (size_t r = 0; r < num_rows; ++r) {
    ScoredCandidate best;
    for (int k = 0; k < comm_.size(); ++k) {
      if (BetterScore(all[k * num_rows + r], best)) best = all[k * num_rows + r];
    }
    tokens[r].request_id = rows[r]->request_id;
    tokens[r].token_id = best.id;
  }
  return tokens;
}

}  // namespace coil
