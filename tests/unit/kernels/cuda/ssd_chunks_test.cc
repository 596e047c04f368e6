// The CUDA SSD scan's chunk list (kernels/cuda/ssd_chunks.h), checked on the host against
// a token-by-token walk: a chunk starts at a run's first token and at every multiple of
// chunk_size of the absolute position, runs of one token have none, and C B^T offsets are
// the running sum of squared lengths times the groups. Runs without a GPU: the device
// builds its list with these same functions.
#include "kernels/cuda/ssd_chunks.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace coil::cuda {
namespace {

// The independent oracle: walks every token of every run of two or more tokens.
SsdChunkPlan WalkTokens(const RecurrentBatch& batch, int64_t chunk, int64_t groups) {
  SsdChunkPlan plan;
  int64_t cb = 0;
  for (int s = 0; s < batch.num_seqs(); ++s) {
    plan.seq_first_chunk.push_back(static_cast<int32_t>(plan.chunks.size()));
    const int32_t length = batch.run_length(s);
    if (length < 2) continue;
    for (int32_t i = 0; i < length; ++i) {
      const int64_t position = int64_t{batch.start_positions[s]} + i;
      if (i == 0 || position % chunk == 0) {
        plan.chunks.push_back({0, batch.run_begin(s) + i, 0, s, 0});
      }
      ++plan.chunks.back().length;
    }
  }
  plan.seq_first_chunk.push_back(static_cast<int32_t>(plan.chunks.size()));
  for (SsdChunk& c : plan.chunks) {
    c.cb_offset = groups * cb;
    cb += int64_t{c.length} * c.length;
    plan.max_length = std::max(plan.max_length, c.length);
  }
  plan.cb_floats_per_group = cb;
  return plan;
}

void ExpectSamePlan(const SsdChunkPlan& got, const SsdChunkPlan& want) {
  ASSERT_EQ(got.chunks.size(), want.chunks.size());
  for (size_t i = 0; i < got.chunks.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "chunk " << i);
    EXPECT_EQ(got.chunks[i].row0, want.chunks[i].row0);
    EXPECT_EQ(got.chunks[i].length, want.chunks[i].length);
    EXPECT_EQ(got.chunks[i].seq, want.chunks[i].seq);
    EXPECT_EQ(got.chunks[i].cb_offset, want.chunks[i].cb_offset);
  }
  EXPECT_EQ(got.seq_first_chunk, want.seq_first_chunk);
  EXPECT_EQ(got.cb_floats_per_group, want.cb_floats_per_group);
  EXPECT_EQ(got.max_length, want.max_length);
}

TEST(SsdChunksTest, WorkedExample) {
  // Chunk 8: a run of 12 tokens from position 6 covers 6..17 -> [6, 8), [8, 16), [16, 18).
  EXPECT_EQ(SsdPieceCount(6, 12, 8), 3);
  const int32_t want_offset[] = {0, 2, 10}, want_length[] = {2, 8, 2};
  for (int32_t k = 0; k < 3; ++k) {
    int32_t offset = -1, length = -1;
    SsdPiece(6, 12, 8, k, &offset, &length);
    EXPECT_EQ(offset, want_offset[k]) << k;
    EXPECT_EQ(length, want_length[k]) << k;
  }
  const SsdSequenceTotals totals = SsdTotalsOf(6, 12, 8);
  EXPECT_EQ(totals.chunks, 3);
  EXPECT_EQ(totals.cb_floats, 4 + 64 + 4);
  // A run of one token belongs to the decode kernel: no chunk.
  EXPECT_EQ(SsdTotalsOf(5, 1, 8).chunks, 0);
}

TEST(SsdChunksTest, BatchOfDecodeAndPrefillRuns) {
  // Runs 1 (decode), 12 from 6, 2 from 7 (crosses 8), 3 from 0, 1 (padding).
  RecurrentBatch batch;
  batch.Add(1, 3, false, 40);
  batch.Add(12, 0, false, 6);
  batch.Add(2, 1, false, 7);
  batch.Add(3, 2, true, 0);
  batch.Add(1, 4, true, 0);
  const SsdChunkPlan plan = BuildSsdChunkPlan(batch, 8, 2);
  ASSERT_EQ(plan.chunks.size(), 6u);
  const int32_t rows[] = {1, 3, 11, 13, 14, 15}, lengths[] = {2, 8, 2, 1, 1, 3};
  const int32_t seqs[] = {1, 1, 1, 2, 2, 3};
  int64_t cb = 0;
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(plan.chunks[i].row0, rows[i]) << i;
    EXPECT_EQ(plan.chunks[i].length, lengths[i]) << i;
    EXPECT_EQ(plan.chunks[i].seq, seqs[i]) << i;
    EXPECT_EQ(plan.chunks[i].cb_offset, 2 * cb) << i;
    cb += lengths[i] * lengths[i];
  }
  EXPECT_EQ(plan.seq_first_chunk, (std::vector<int32_t>{0, 0, 3, 5, 6, 6}));
  EXPECT_EQ(plan.max_length, 8);
  ExpectSamePlan(plan, WalkTokens(batch, 8, 2));
}

TEST(SsdChunksTest, RandomBatchesMatchTheTokenWalk) {
  std::mt19937_64 rng(20261202);
  for (int64_t chunk : {1, 2, 5, 8, 64, 256, 100000}) {
    for (int trial = 0; trial < 20; ++trial) {
      SCOPED_TRACE(::testing::Message() << "chunk " << chunk << " trial " << trial);
      RecurrentBatch batch;
      const int seqs = std::uniform_int_distribution<int>(1, 12)(rng);
      for (int s = 0; s < seqs; ++s) {
        const int kind = std::uniform_int_distribution<int>(0, 3)(rng);
        const int32_t length =
            kind == 0 ? 1 : std::uniform_int_distribution<int32_t>(2, kind == 3 ? 3000 : 40)(rng);
        const int32_t position = std::uniform_int_distribution<int32_t>(0, 5000)(rng);
        batch.Add(length, s, position == 0, position);
      }
      const int64_t groups = std::uniform_int_distribution<int64_t>(1, 3)(rng);
      ExpectSamePlan(BuildSsdChunkPlan(batch, chunk, groups), WalkTokens(batch, chunk, groups));
    }
  }
}

TEST(SsdChunksTest, SplitAtChunkMultiplesGivesTheSamePieces) {
  // 700 tokens whole, or as 256 + 256 + 188 over three steps: the same absolute pieces.
  RecurrentBatch whole;
  whole.Add(700, 0, true, 0);
  std::vector<std::pair<int64_t, int32_t>> pieces_whole, pieces_split;
  for (const SsdChunk& c : BuildSsdChunkPlan(whole, 256, 1).chunks) {
    pieces_whole.emplace_back(c.row0, c.length);
  }
  int32_t position = 0;
  for (int32_t step : {256, 256, 188}) {
    RecurrentBatch part;
    part.Add(step, 0, position == 0, position);
    for (const SsdChunk& c : BuildSsdChunkPlan(part, 256, 1).chunks) {
      pieces_split.emplace_back(position + c.row0, c.length);
    }
    position += step;
  }
  EXPECT_EQ(pieces_whole, pieces_split);
  EXPECT_EQ(pieces_whole.size(), 3u);
}

TEST(SsdChunksTest, TrianglePairsCoverTheLowerTriangleOnce) {
  for (int32_t tiles = 1; tiles <= 40; ++tiles) {
    std::vector<int> seen(tiles * tiles, 0);
    for (int32_t pair = 0; pair < tiles * (tiles + 1) / 2; ++pair) {
      int32_t t = -1, s = -1;
      SsdTrianglePair(pair, &t, &s);
      ASSERT_GE(s, 0);
      ASSERT_LE(s, t);
      ASSERT_LT(t, tiles) << "pair " << pair;
      ++seen[t * tiles + s];
    }
    for (int32_t t = 0; t < tiles; ++t) {
      for (int32_t s = 0; s <= t; ++s) EXPECT_EQ(seen[t * tiles + s], 1) << t << "," << s;
    }
  }
}

// Chunk-list equality: the pieces, offsets and sequences of two plans.
bool SamePlan(const SsdChunkPlan& a, const SsdChunkPlan& b) {
  if (a.chunks.size() != b.chunks.size() || a.seq_first_chunk != b.seq_first_chunk ||
      a.cb_floats_per_group != b.cb_floats_per_group || a.max_length != b.max_length) {
    return false;
  }
  for (size_t i = 0; i < a.chunks.size(); ++i) {
    const SsdChunk &x = a.chunks[i], &y = b.chunks[i];
    if (x.cb_offset != y.cb_offset || x.row0 != y.row0 || x.length != y.length || x.seq != y.seq) {
      return false;
    }
  }
  return true;
}

// The plan is kept while the layers of a step scan the same batch, and rebuilt (with the
// device list forgotten) as soon as anything it depends on changes; slots and fresh flags,
// which it does not depend on, keep it.
TEST(SsdPlanCacheTest, KeepsThePlanOfTheSameBatchOnly) {
  RecurrentBatch batch;
  batch.Add(300, 0, true, 0);
  batch.Add(1, 1, false, 40);
  batch.Add(70, 2, false, 500);
  SsdPlanCache cache;
  int token = 0;
  const void* at = &token;
  const SsdChunkPlan* first = &cache.PlanFor(batch, 64, 2);
  EXPECT_TRUE(SamePlan(*first, BuildSsdChunkPlan(batch, 64, 2)));
  EXPECT_FALSE(cache.HasDeviceList(at, 3));
  cache.SetDeviceList(at, 3);
  EXPECT_TRUE(cache.HasDeviceList(at, 3));
  EXPECT_FALSE(cache.HasDeviceList(at, 4)) << "a reallocated workspace holds no list";
  EXPECT_FALSE(cache.HasDeviceList(&batch, 3));

  RecurrentBatch other_slots = batch;
  other_slots.slots = {5, 6, 7};
  other_slots.fresh = {1, 1, 1};
  EXPECT_EQ(&cache.PlanFor(other_slots, 64, 2), first);
  EXPECT_TRUE(cache.HasDeviceList(at, 3)) << "slots and fresh flags do not change the list";

  auto expect_rebuilt = [&](const RecurrentBatch& b, int64_t chunk_size, int64_t groups) {
    cache.SetDeviceList(at, 3);
    const SsdChunkPlan& plan = cache.PlanFor(b, chunk_size, groups);
    EXPECT_TRUE(SamePlan(plan, BuildSsdChunkPlan(b, chunk_size, groups)));
    EXPECT_FALSE(cache.HasDeviceList(at, 3));
  };
  RecurrentBatch moved = batch;
  moved.start_positions[2] = 501;  // same lengths, the third run's chunks cut elsewhere
  expect_rebuilt(moved, 64, 2);
  expect_rebuilt(batch, 64, 2);
  expect_rebuilt(batch, 32, 2);
  expect_rebuilt(batch, 32, 3);  // C B^T offsets scale with the groups
  RecurrentBatch longer = batch;
  longer.cu_seqlens = {0, 300, 302, 372};
  expect_rebuilt(longer, 32, 3);

  cache.SetDeviceList(at, 3);
  cache.ForgetDeviceList();
  EXPECT_FALSE(cache.HasDeviceList(at, 3));
}

}  // namespace
}  // namespace coil::cuda
