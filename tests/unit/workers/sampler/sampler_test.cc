// The sharded sampler against a second, straightforward implementation written in this
// test that sees whole logits rows (sort, cut, renormalise, Gumbel-max), and against
// values worked out by hand. Runs under mpirun with 1, 2 and 4 ranks: every rank holds its
// vocab shard of the same rows, and every rank must return exactly the reference tokens.
#include "workers/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/backend_factory.h"
#include "kernels/philox.h"
#include "workers/comm/communicator.h"

namespace coil {
namespace {

std::unique_ptr<comm::Communicator> MakeComm() {
  comm::CommunicatorOptions options;
  options.kind = comm::CommunicatorKind::kMpi;
  auto comm = comm::CreateCommunicator(options);
  EXPECT_TRUE(comm.ok()) << comm.status();
  return std::move(comm).value();
}

// ---- the reference: whole rows, no sharding, written from the definitions ----

std::vector<float> ReferencePenalties(std::vector<float> logits, const ScheduledSequence& row) {
  const SamplingParams& p = row.sampling;
  std::map<int32_t, int> output_count;
  std::map<int32_t, bool> seen;
  for (size_t i = 0; i < row.history.size(); ++i) {
    seen[row.history[i]] = true;
    if (static_cast<int32_t>(i) >= row.num_prompt_tokens) output_count[row.history[i]]++;
  }
  for (const auto& [id, unused] : seen) {
    float v = logits[id];
    if (p.repetition_penalty != 1.0f) v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
    if (output_count.count(id)) {
      v -= p.frequency_penalty * static_cast<float>(output_count[id]) + p.presence_penalty;
    }
    logits[id] = v;
  }
  return logits;
}

int32_t ReferenceSample(const std::vector<float>& raw, int32_t vocab_size,
                        const ScheduledSequence& row) {
  const std::vector<float> x = ReferencePenalties(raw, row);
  std::vector<int32_t> ids(static_cast<size_t>(vocab_size));
  for (int32_t i = 0; i < vocab_size; ++i) ids[i] = i;
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  const SamplingParams& p = row.sampling;
  if (p.temperature == 0.0f) return ids[0];
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < ids.size()) ids.resize(p.top_k);
  const double t = p.temperature;
  const double top = x[ids[0]];
  if (p.top_p < 1.0f) {
    double z = 0;
    for (int32_t id : ids) z += std::exp((x[id] - top) / t);
    double cumulative = 0;
    size_t keep = 0;
    while (keep < ids.size()) {
      cumulative += std::exp((x[ids[keep]] - top) / t) / z;
      ++keep;
      if (cumulative >= p.top_p) break;
    }
    ids.resize(keep);
  }
  if (p.min_p > 0.0f) {
    std::erase_if(ids, [&](int32_t id) { return (x[id] - top) / t < std::log(double{p.min_p}); });
  }
  int32_t best = -1;
  double best_score = -INFINITY;
  for (int32_t id : ids) {  // ascending id order among equal scores is not needed: ties ~never
    const double score = x[id] / t + philox::Gumbel(p.seed, row.rng_step, id);
    if (score > best_score) best_score = score, best = id;
  }
  return best;
}

// Runs the sharded sampler: this rank takes its columns of every row.
std::vector<SampledToken> ShardedSample(comm::Communicator& comm,
                                        const std::vector<std::vector<float>>& rows,
                                        const std::vector<ScheduledSequence>& sequences,
                                        int32_t padded_vocab, int32_t vocab_size) {
  const VocabRange range = PartitionVocab(padded_vocab, comm.size(), comm.rank());
  std::vector<float> local;
  for (const auto& row : rows) local.insert(local.end(), row.begin() + range.begin, row.begin() + range.end);
  std::vector<const ScheduledSequence*> pointers;
  for (const auto& s : sequences) pointers.push_back(&s);
  Sampler sampler(comm, range, vocab_size);
  auto tokens = sampler.Sample(pointers, local.data());
  EXPECT_TRUE(tokens.ok()) << tokens.status();
  return tokens.ok() ? *tokens : std::vector<SampledToken>{};
}

std::vector<float> RandomRow(std::mt19937& rng, int32_t n, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> row(static_cast<size_t>(n));
  for (float& v : row) v = normal(rng);
  return row;
}

TEST(SamplerTest, PenaltiesByHand) {
  auto comm = MakeComm();
  // logits [1, 2, -1, 0.5], prompt [0], outputs [2, 2, 3]; repetition 2, frequency 0.5,
  // presence 0.25. By hand: id0 (prompt only) 1/2 = 0.5; id1 untouched 2; id2: -1*2 = -2,
  // then -0.5*2 - 0.25 = -3.25; id3: 0.5/2 = 0.25, then -0.5 - 0.25 = -0.5.
  ScheduledSequence row;
  row.sample = true;
  row.sampling.repetition_penalty = 2.0f;
  row.sampling.frequency_penalty = 0.5f;
  row.sampling.presence_penalty = 0.25f;
  row.history = {0, 2, 2, 3};
  row.num_prompt_tokens = 1;
  const std::vector<float> logits = {1.0f, 2.0f, -1.0f, 0.5f};
  const VocabRange range = PartitionVocab(4, comm->size(), comm->rank());
  std::vector<float> local(logits.begin() + range.begin, logits.begin() + range.end);
  const ScheduledSequence* rows[] = {&row};
  Sampler sampler(*comm, range, 4);
  auto tokens = sampler.Sample(rows, local.data());
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ((*tokens)[0].token_id, 1);
  const float expected[] = {0.5f, 2.0f, -3.25f, -0.5f};
  for (int32_t id = range.begin; id < range.end; ++id) {
    EXPECT_FLOAT_EQ(local[id - range.begin], expected[id]) << "id " << id;
  }
}

TEST(SamplerTest, GreedyTiesGoToLowestIdAndPaddingIsNeverChosen) {
  auto comm = MakeComm();
  // 10 real ids, padded to 16; ids 3 and 7 tie for the real maximum; padding holds 100.
  std::vector<float> row(16, 0.0f);
  row[3] = row[7] = 5.0f;
  for (int id = 10; id < 16; ++id) row[id] = 100.0f;
  std::vector<ScheduledSequence> seqs(2);
  seqs[1].sampling.temperature = 1.0f;  // random sampling must skip the padding too
  seqs[1].sampling.seed = 7;
  auto tokens = ShardedSample(*comm, {row, row}, seqs, 16, 10);
  ASSERT_EQ(tokens.size(), 2u);
  EXPECT_EQ(tokens[0].token_id, 3);
  EXPECT_LT(tokens[1].token_id, 10);
}

TEST(SamplerTest, MatchesWholeRowReferenceForEveryParameterMix) {
  auto comm = MakeComm();
  std::mt19937 rng(1234);  // same stream on every rank: same rows and parameters
  const int32_t padded = 1000, vocab = 997;
  std::vector<std::vector<float>> rows;
  std::vector<ScheduledSequence> seqs;
  for (int i = 0; i < 120; ++i) {
    rows.push_back(RandomRow(rng, padded, i % 3 == 0 ? 0.5f : 3.0f));  // flat and peaked
    ScheduledSequence s;
    s.request_id = static_cast<uint64_t>(i);
    s.sample = true;
    s.rng_step = i;
    SamplingParams& p = s.sampling;
    p.seed = rng();
    p.temperature = (i % 5 == 0) ? 0.0f : 0.3f + 0.2f * static_cast<float>(i % 7);
    p.top_k = (i % 4 == 1) ? 1 + static_cast<int32_t>(rng() % 60) : 0;
    p.top_p = (i % 3 == 2) ? 0.5f + 0.1f * static_cast<float>(i % 5) : 1.0f;
    p.min_p = (i % 6 == 4) ? 0.05f : 0.0f;
    if (i % 8 == 3) {
      p.repetition_penalty = 1.3f;
      p.frequency_penalty = 0.2f;
      p.presence_penalty = 0.1f;
      for (int h = 0; h < 30; ++h) s.history.push_back(static_cast<int32_t>(rng() % padded % vocab));
      s.num_prompt_tokens = 10;
    }
    seqs.push_back(s);
  }
  const std::vector<SampledToken> tokens = ShardedSample(*comm, rows, seqs, padded, vocab);
  ASSERT_EQ(tokens.size(), seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    EXPECT_EQ(tokens[i].token_id, ReferenceSample(rows[i], vocab, seqs[i])) << "row " << i;
    EXPECT_EQ(tokens[i].request_id, seqs[i].request_id);
  }
}

TEST(SamplerTest, LogprobsAreRawLogSoftmaxAndTopNIsSorted) {
  auto comm = MakeComm();
  std::mt19937 rng(99);
  const int32_t padded = 64, vocab = 60;
  const std::vector<float> row = RandomRow(rng, padded, 2.0f);
  ScheduledSequence s;
  s.sample = true;
  s.sampling.temperature = 0.0f;
  s.sampling.repetition_penalty = 1.5f;  // logprobs ignore penalties
  s.history = {5, 6};
  s.num_prompt_tokens = 2;
  s.sampling.logprobs = true;
  s.sampling.top_logprobs = 5;
  const auto tokens = ShardedSample(*comm, {row}, {s}, padded, vocab);
  ASSERT_EQ(tokens.size(), 1u);
  double z = 0;
  for (int32_t i = 0; i < vocab; ++i) z += std::exp(double{row[i]});
  const int32_t id = tokens[0].token_id;
  EXPECT_NEAR(tokens[0].logprob, row[id] - std::log(z), 1e-5);
  std::vector<int32_t> order(vocab);
  for (int32_t i = 0; i < vocab; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  ASSERT_EQ(tokens[0].top_logprobs.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(tokens[0].top_logprobs[i].token_id, order[i]);
    EXPECT_NEAR(tokens[0].top_logprobs[i].logprob, row[order[i]] - std::log(z), 1e-5);
  }
}

// Gumbel-max must sample from softmax(logits / T): over 20000 RNG steps the frequencies
// of 6 tokens match the probabilities within 4 standard errors; with top_k = 3 the other
// tokens never appear and the three share the renormalised mass.
TEST(SamplerTest, FrequenciesFollowTheDistribution) {
  auto comm = MakeComm();
  const std::vector<float> logits = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, 1.5f};
  const int kDraws = 20000;
  for (int32_t top_k : {0, 3}) {
    std::vector<std::vector<float>> rows(kDraws, logits);
    std::vector<ScheduledSequence> seqs(kDraws);
    for (int i = 0; i < kDraws; ++i) {
      seqs[i].sampling.temperature = 0.8f;
      seqs[i].sampling.top_k = top_k;
      seqs[i].sampling.seed = 42;
      seqs[i].rng_step = i;
    }
    const auto tokens = ShardedSample(*comm, rows, seqs, 6, 6);
    std::vector<int> counts(6, 0);
    for (const auto& t : tokens) counts[t.token_id]++;
    const std::vector<int> kept = top_k == 3 ? std::vector<int>{0, 5, 1} : std::vector<int>{0, 1, 2, 3, 4, 5};
    double z = 0;
    for (int id : kept) z += std::exp(logits[id] / 0.8);
    for (int id = 0; id < 6; ++id) {
      const bool in = std::find(kept.begin(), kept.end(), id) != kept.end();
      const double p = in ? std::exp(logits[id] / 0.8) / z : 0.0;
      const double sigma = std::sqrt(p * (1 - p) / kDraws);
      EXPECT_NEAR(counts[id] / double{kDraws}, p, 4 * sigma + 1e-9) << "top_k " << top_k << " id " << id;
    }
  }
}

TEST(SamplerTest, BadParametersAreRefusedByName) {
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_NE(ValidateSamplingParams(p).message().find("top_p"), absl::string_view::npos);
  p = {};
  p.temperature = -1.0f;
  EXPECT_EQ(ValidateSamplingParams(p).code(), absl::StatusCode::kInvalidArgument);
  p = {};
  p.min_p = 1.5f;
  EXPECT_NE(ValidateSamplingParams(p).message().find("min_p"), absl::string_view::npos);
  p = {};
  p.top_k = -2;
  EXPECT_NE(ValidateSamplingParams(p).message().find("top_k"), absl::string_view::npos);
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}).ok());
}

TEST(VocabPartitionTest, ContiguousNearEqualRangesCoverEverything) {
  // 50288 over 3 ranks: 16763 rows each with one left over for rank 0 (by hand).
  EXPECT_EQ(PartitionVocab(50288, 3, 0).size(), 16763);
  EXPECT_EQ(PartitionVocab(50288, 3, 1).begin, 16763);
  EXPECT_EQ(PartitionVocab(50288, 3, 2).end, 50288);
  for (int tp : {1, 2, 3, 4, 7}) {
    int32_t next = 0;
    for (int r = 0; r < tp; ++r) {
      const VocabRange range = PartitionVocab(1003, tp, r);
      EXPECT_EQ(range.begin, next);
      EXPECT_GE(range.size(), 1003 / tp);
      EXPECT_LE(range.size(), 1003 / tp + 1);
      next = range.end;
    }
    EXPECT_EQ(next, 1003);
  }
}


// Backend::GumbelArgmax over real ids (the whole row, or each rank's shard merged by the
// larger score and then the lower id) picks the sampler's token for plain temperature rows,
// step after step; the sampler is the independent implementation.
TEST(SamplerTest, GumbelArgmaxOpMatchesPlainTemperatureSampling) {
  auto comm = MakeComm();
  auto backend = CreateBackend(BackendKind::kCpu);
  ASSERT_TRUE(backend.ok()) << backend.status();
  constexpr int32_t kPadded = 1000, kVocab = 990;
  constexpr int64_t kRows = 6;
  const float temperatures[kRows] = {0.05f, 0.3f, 0.7f, 1.0f, 1.9f, 5.0f};
  std::mt19937 rng(11);
  std::vector<ScheduledSequence> sequences(kRows);
  for (int64_t r = 0; r < kRows; ++r) {
    sequences[r].sample = true;
    sequences[r].sampling.temperature = temperatures[r];
    sequences[r].sampling.seed = (uint64_t{rng()} << 32) | rng();
  }
  std::vector<const ScheduledSequence*> pointers;
  for (const auto& s : sequences) pointers.push_back(&s);
  ASSERT_TRUE(Sampler::AllPlainTemperature(pointers));
  const VocabRange range = PartitionVocab(kPadded, comm->size(), comm->rank());
  const int32_t local_valid = std::min(range.end, kVocab) - range.begin;
  ASSERT_GT(local_valid, 0);
  const Device dev = (*backend)->device();
  int distinct_tokens = 0;
  for (int32_t step = 0; step < 25; ++step) {
    std::vector<std::vector<float>> rows;
    std::vector<float> whole, temps(kRows);
    std::vector<int32_t> seeds(2 * kRows), steps(kRows, step);
    for (int64_t r = 0; r < kRows; ++r) {
      sequences[r].rng_step = step;
      rows.push_back(RandomRow(rng, kPadded, 3.0f));
      whole.insert(whole.end(), rows.back().begin(), rows.back().end());
      temps[r] = temperatures[r];
      seeds[2 * r] = static_cast<int32_t>(static_cast<uint32_t>(sequences[r].sampling.seed));
      seeds[2 * r + 1] = static_cast<int32_t>(sequences[r].sampling.seed >> 32);
    }
    const std::vector<SampledToken> expected =
        ShardedSample(*comm, rows, sequences, kPadded, kVocab);
    ASSERT_EQ(expected.size(), static_cast<size_t>(kRows));

    const Tensor t_temps(temps.data(), DType::kF32, {kRows}, dev);
    const Tensor t_seeds(seeds.data(), DType::kI32, {kRows, 2}, dev);
    const Tensor t_steps(steps.data(), DType::kI32, {kRows}, dev);
    std::vector<int32_t> ids(kRows, -1), scores(2 * kRows, 0);
    // The whole row on one device: column 0 is id 0; the view drops the padded ids.
    ASSERT_TRUE((*backend)
                    ->GumbelArgmax(Tensor(whole.data(), DType::kF32, {kRows, kPadded}, dev)
                                       .Columns(0, kVocab),
                                   t_temps, t_seeds, t_steps, 0,
                                   Tensor(ids.data(), DType::kI32, {kRows}, dev),
                                   Tensor(scores.data(), DType::kI32, {kRows, 2}, dev))
                    .ok());
    for (int64_t r = 0; r < kRows; ++r) {
      EXPECT_EQ(ids[r], expected[r].token_id) << "step " << step << " row " << r;
    }

    // This rank's shard, then the cross-rank merge a tensor-parallel step would do.
    std::vector<float> local;
    for (const auto& row : rows) local.insert(local.end(), row.begin() + range.begin, row.begin() + range.end);
    ASSERT_TRUE(
        (*backend)
            ->GumbelArgmax(
                Tensor(local.data(), DType::kF32, {kRows, range.size()}, dev).Columns(0, local_valid),
                t_temps, t_seeds, t_steps, range.begin,
                Tensor(ids.data(), DType::kI32, {kRows}, dev),
                Tensor(scores.data(), DType::kI32, {kRows, 2}, dev))
            .ok());
    struct Scored {
      double score;
      int32_t id;
      int32_t padding;
    };
    std::vector<Scored> mine(kRows), all(kRows * static_cast<size_t>(comm->size()));
    for (int64_t r = 0; r < kRows; ++r) {
      const uint64_t bits = static_cast<uint32_t>(scores[2 * r]) |
                            (uint64_t{static_cast<uint32_t>(scores[2 * r + 1])} << 32);
      std::memcpy(&mine[r].score, &bits, sizeof(double));
      mine[r].id = range.begin + ids[r];
      mine[r].padding = 0;
      // The shard's score is the sampler's formula at the shard's winner.
      EXPECT_EQ(mine[r].score,
                static_cast<double>(local[r * range.size() + ids[r]]) / double{temperatures[r]} +
                    philox::Gumbel(sequences[r].sampling.seed, static_cast<uint32_t>(step),
                                   static_cast<uint32_t>(mine[r].id)));
    }
    ASSERT_TRUE(comm->AllGatherBytes(mine.data(), mine.size() * sizeof(Scored), all.data()).ok());
    for (int64_t r = 0; r < kRows; ++r) {
      Scored best = all[r];
      for (int k = 1; k < comm->size(); ++k) {
        const Scored& c = all[k * kRows + r];
        if (c.score > best.score || (c.score == best.score && c.id < best.id)) best = c;
      }
      EXPECT_EQ(best.id, expected[r].token_id) << "step " << step << " row " << r;
      distinct_tokens += expected[r].token_id != expected[0].token_id;
    }
  }
  EXPECT_GT(distinct_tokens, 0);  // the rows really sample different tokens

  // Any restriction, penalty, logprob or greedy row leaves the host path in charge.
  for (int which = 0; which < 6; ++which) {
    std::vector<ScheduledSequence> changed = sequences;
    SamplingParams& p = changed[2].sampling;
    if (which == 0) p.top_k = 5;
    if (which == 1) p.top_p = 0.9f;
    if (which == 2) p.min_p = 0.1f;
    if (which == 3) p.presence_penalty = 0.5f;
    if (which == 4) p.logprobs = true;
    if (which == 5) p.temperature = 0.0f;
    std::vector<const ScheduledSequence*> changed_pointers;
    for (const auto& s : changed) changed_pointers.push_back(&s);
    EXPECT_FALSE(Sampler::AllPlainTemperature(changed_pointers)) << "case " << which;
  }
}

}  // namespace
}  // namespace coil
