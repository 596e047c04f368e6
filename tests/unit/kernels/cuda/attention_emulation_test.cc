// The CUDA paged-attention kernels emulated on the host: their block bodies
// (paged_attention_tiles.h: the row mapping, the page walk of the K/V loads, the tiles and
// splits, the softmax halves, the merges and the partials' layout) run for every block of
// the grids PlanPagedAttention gives, with AttnHostExec standing in for a block (the
// tensor-core products as fp32 sums in k order), and KvWriteElement for every element. The
// results are checked against the CPU backend's reference mode (within the bf16 rounding of
// q and the weights, or tightly for an f32 cache), and against each other bit for bit: a
// decode row = that row at the end of a prefill chunk, a prompt split in chunks = whole,
// whatever the page size. Shapes: GQA 1, 2 and 8; head dims 16, 64 and 128; page sizes 16,
// 5 and 48 (dividing no tile) and 1; contexts 1, 15, 16, 17, 63, 64, 65, 255, 256, 257,
// 300 and 4097 (every tile and split boundary). What this cannot check is GPU-only: wmma's
// fragment order, cp.async and the barriers' placement on real threads. Runs without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/paged_attention_tiles.h"
#include "tests/unit/kernels/op_test_util.h"

namespace coil::cuda {
namespace {

struct Shape {
  int32_t heads, kv_heads, head_dim;
  bool bf16;
};

std::string Name(const Shape& s) {
  return absl::StrCat("h", s.heads, "_kvh", s.kv_heads, "_d", s.head_dim,
                      s.bf16 ? "_bf16" : "_f32");
}

// A paged cache on the host, random throughout (history, stale slots alike), in the dtype
// the kernels read: bf16 bits or f32.
struct HostCache {
  Shape shape;
  int32_t block_size;
  int64_t pages;
  std::vector<uint8_t> k, v;
  int64_t row_bytes() const { return int64_t{shape.head_dim} * (shape.bf16 ? 2 : 4); }
};

HostCache RandomCache(std::mt19937_64& rng, const Shape& shape, int32_t block_size, int64_t pages) {
  HostCache c{shape, block_size, pages, {}, {}};
  const size_t n = static_cast<size_t>((pages + 1) * block_size * shape.kv_heads * shape.head_dim);
  const DType dtype = shape.bf16 ? DType::kBF16 : DType::kF32;
  c.k = testing::Encode(testing::RandomFloats(rng, n, -1.5f, 1.5f), dtype);
  c.v = testing::Encode(testing::RandomFloats(rng, n), dtype);
  return c;
}

// One step's sequences: runs[s] query rows from starts[s], each on its own shuffled pages.
PagedKvBatch MakeBatch(std::mt19937_64& rng, const std::vector<int32_t>& runs,
                       const std::vector<int32_t>& starts, int32_t block_size, int64_t* pages) {
  PagedKvBatch b;
  b.block_size = block_size;
  int64_t total = 0;
  for (size_t s = 0; s < runs.size(); ++s)
    total += (starts[s] + runs[s] + block_size - 1) / block_size;
  *pages = total + 1;
  std::vector<int32_t> order =
      testing::ShuffledSlots(rng, static_cast<int>(*pages), static_cast<int>(*pages));
  size_t next = 0;
  for (size_t s = 0; s < runs.size(); ++s) {
    const int64_t need = (starts[s] + runs[s] + block_size - 1) / block_size;
    b.Add(runs[s], starts[s],
          std::vector<int32_t>(order.begin() + next, order.begin() + next + need));
    next += need;
  }
  // The host arrays are the "device" mirrors here.
  b.device_cu_seqlens = b.cu_seqlens.data();
  b.device_start_positions = b.start_positions.data();
  b.device_cu_blocks = b.cu_blocks.data();
  b.device_block_table = b.block_table.data();
  return b;
}

// 128-byte aligned shared memory for one block.
struct HostSmem {
  explicit HostSmem(int64_t bytes)
      : data(static_cast<unsigned char*>(std::aligned_alloc(128, (bytes + 127) / 128 * 128))) {}
  ~HostSmem() { std::free(data); }
  unsigned char* data;
};

// Every block of PagedAttention's grids, as the launcher orders them: prefill blocks, decode
// blocks, then the combine; out [rows, heads * head_dim] f32.
template <int kD>
void EmulateForHeadDim(const AttnParams& a, const AttnLaunch& plan) {
  if (plan.prefill_items > 0) {
    const AttnSmemLayout layout = AttnLayout(16 * kAttnPrefillWarps, kD, a.bf16);
    HostSmem smem(layout.bytes);
    for (int64_t item = 0; item < plan.prefill_items; ++item) {
      for (int g = 0; g < a.kv_heads; ++g) {
        AttnHostExec<32 * kAttnPrefillWarps> ex;
        AttnPrefillBlock<kD>(ex, a, AttnSmem{layout, smem.data}, a.items[2 * item], g,
                             a.items[2 * item + 1]);
      }
    }
  }
  if (!plan.decode) return;
  const int warps = (a.heads / a.kv_heads + 15) / 16;
  const AttnSmemLayout layout = AttnLayout(16 * warps, kD, a.bf16);
  HostSmem smem(layout.bytes);
  for (int32_t split = 0; split < plan.max_splits; ++split) {
    for (int s = 0; s < a.num_seqs; ++s) {
      if (!AttnDecodeBlockHasWork(a, s, split)) continue;  // the kernel's early return
      for (int g = 0; g < a.kv_heads; ++g) {
        const AttnSmem sm{layout, smem.data};
        switch (warps) {
          case 1: {
            AttnHostExec<32> ex;
            AttnDecodeBlock<kD>(ex, a, sm, s, g, split, 32);
            break;
          }
          default: {
            ASSERT_EQ(warps, 2) << "the test's shapes use up to 32 heads per KV head";
            AttnHostExec<64> ex;
            AttnDecodeBlock<kD>(ex, a, sm, s, g, split, 64);
          }
        }
      }
    }
  }
  if (plan.max_splits > 1) {
    for (int s = 0; s < a.num_seqs; ++s) {
      for (int h = 0; h < a.heads; ++h) {
        for (int col = 0; col < a.head_dim; ++col) AttnCombineColumn(a, s, h, col);
      }
    }
  }
}

// The kernels' parameters over a host cache: q and out [rows, heads * head_dim] f32, the
// batch's arrays at the four pointers given (what the kernels take as device mirrors).
AttnParams HostParams(const HostCache& cache, const float* q, float* out, float* partials,
                      const AttnLaunch& plan, int32_t num_seqs, const int32_t* cu_seqlens,
                      const int32_t* start_positions, const int32_t* cu_blocks,
                      const int32_t* block_table) {
  const Shape& sh = cache.shape;
  const int64_t width = int64_t{sh.heads} * sh.head_dim;
  AttnParams a;
  a.q = q;
  a.q_stride = width;
  a.out = out;
  a.out_stride = width;
  a.out_bf16 = false;
  a.k_cache = cache.k.data();
  a.v_cache = cache.v.data();
  a.bf16 = sh.bf16;
  a.heads = sh.heads;
  a.kv_heads = sh.kv_heads;
  a.head_dim = sh.head_dim;
  a.block_size = cache.block_size;
  const float scale = 1.0f / std::sqrt(static_cast<float>(sh.head_dim));
  a.scale_log2 = scale * 1.4426950408889634f;
  a.num_seqs = num_seqs;
  a.cu_seqlens = cu_seqlens;
  a.start_positions = start_positions;
  a.cu_blocks = cu_blocks;
  a.block_table = block_table;
  a.partials = partials;
  a.max_splits = plan.max_splits;
  a.items = plan.items.data();
  return a;
}

void EmulatePlan(const AttnParams& a, const AttnLaunch& plan) {
  switch (a.head_dim) {
    case 16:
      EmulateForHeadDim<16>(a, plan);
      break;
    case 64:
      EmulateForHeadDim<64>(a, plan);
      break;
    default:
      EmulateForHeadDim<128>(a, plan);
  }
}

// The cache as the kernels see it: [pages + 1, block_size, kv_heads, head_dim].
Tensor KTensor(const HostCache& cache) {
  const Shape& sh = cache.shape;
  return Tensor(const_cast<uint8_t*>(cache.k.data()), sh.bf16 ? DType::kBF16 : DType::kF32,
                {cache.pages + 1, cache.block_size, sh.kv_heads, sh.head_dim});
}

// PagedAttention through the emulated kernels: out [rows, heads * head_dim], f32.
std::vector<float> Emulate(const HostCache& cache, const PagedKvBatch& batch,
                           const std::vector<float>& q) {
  const Shape& sh = cache.shape;
  const int64_t rows = batch.cu_seqlens.back(), width = int64_t{sh.heads} * sh.head_dim;
  const Tensor q_t(const_cast<float*>(q.data()), DType::kF32, {rows, width});
  auto plan = PlanPagedAttention(q_t, KTensor(cache), batch);
  EXPECT_TRUE(plan.ok()) << plan.status();
  std::vector<float> out(rows * width, std::nanf(""));
  std::vector<float> partials(static_cast<size_t>(plan->partial_floats), std::nanf(""));
  EmulatePlan(HostParams(cache, q.data(), out.data(), partials.data(), *plan, batch.num_seqs(),
                         batch.device_cu_seqlens, batch.device_start_positions,
                         batch.device_cu_blocks, batch.device_block_table),
              *plan);
  return out;
}

// KvCacheWrite's element map over every row of `batch` (rows k and v of kv_heads * head_dim
// floats), the positions and tables read through the four pointers given.
void EmulateKvWrite(HostCache& cache, const PagedKvBatch& batch, const std::vector<float>& k,
                    const std::vector<float>& v, const int32_t* start_positions,
                    const int32_t* cu_blocks, const int32_t* block_table) {
  const int32_t width = cache.shape.kv_heads * cache.shape.head_dim;
  const KvWriteParams w{k.data(),         width,           v.data(),         width,
                        cache.k.data(),   cache.v.data(),  cache.shape.bf16, width,
                        cache.block_size, start_positions, cu_blocks,        block_table};
  for (int s = 0; s < batch.num_seqs(); ++s) {
    for (int32_t t = batch.cu_seqlens[s]; t < batch.cu_seqlens[s + 1]; ++t) {
      for (int32_t i = 0; i < width; ++i) KvWriteElement(w, s, batch.cu_seqlens[s], t, i);
    }
  }
}

// The CPU backend's reference mode on the same cache and rows.
std::vector<float> Reference(const HostCache& cache, const PagedKvBatch& batch,
                             const std::vector<float>& q) {
  const Shape& sh = cache.shape;
  const int64_t rows = batch.cu_seqlens.back(), width = int64_t{sh.heads} * sh.head_dim;
  auto cpu = CreateBackend(BackendKind::kCpu, {.threads = 2, .use_reference = true});
  EXPECT_TRUE(cpu.ok());
  const DType dtype = sh.bf16 ? DType::kBF16 : DType::kF32;
  std::vector<float> out(rows * width);
  PagedKvBatch host = batch;
  host.device_cu_seqlens = host.device_start_positions = nullptr;
  host.device_cu_blocks = host.device_block_table = nullptr;
  const absl::Status s =
      (*cpu)->PagedAttention(Tensor(const_cast<float*>(q.data()), DType::kF32, {rows, width}),
                             Tensor(const_cast<uint8_t*>(cache.k.data()), dtype,
                                    {cache.pages + 1, cache.block_size, sh.kv_heads, sh.head_dim}),
                             Tensor(const_cast<uint8_t*>(cache.v.data()), dtype,
                                    {cache.pages + 1, cache.block_size, sh.kv_heads, sh.head_dim}),
                             host, 1.0f / std::sqrt(static_cast<float>(sh.head_dim)),
                             Tensor(out.data(), DType::kF32, {rows, width}));
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// The bound against the reference: tight for f32 products; for bf16 ones, q and the weights
// are rounded to bf16 (8 significant bits), which the reference does not do. Measured NMSE
// per sequence on these inputs: up to 8e-6 with bf16 products, 2e-13 with f32 ones.
double Bound(const Shape& s) { return s.bf16 ? 2e-5 : 1e-9; }

class AttentionEmulationTest : public ::testing::TestWithParam<Shape> {};

// Decode rows and prefill chunks at every tile and split boundary, GQA and page sizes that
// divide no tile, against the reference.
TEST_P(AttentionEmulationTest, MatchesTheReference) {
  const Shape sh = GetParam();
  for (int32_t block_size : {16, 5, 48, 1}) {
    SCOPED_TRACE(::testing::Message() << Name(sh) << " block_size " << block_size);
    std::mt19937_64 rng(testing::SeedFromName(absl::StrCat(Name(sh), block_size)));
    // Decode rows with contexts 1, 15, 16, 17, 63, 64, 65, 255, 256, 257, 4097; a prompt
    // of 70 rows (items of 64 pairs and a part, splits crossed by none); chunks resuming at
    // 250 (crossing the first split) and at 4094.
    const std::vector<int32_t> runs = {1, 1, 1, 1, 70, 1, 1, 1, 1, 1, 1, 9, 1, 3};
    const std::vector<int32_t> starts = {0,  14,  15,  16,  0,   62,   63,
                                         64, 254, 255, 256, 250, 4096, 4094};
    int64_t pages = 0;
    const PagedKvBatch batch = MakeBatch(rng, runs, starts, block_size, &pages);
    const HostCache cache = RandomCache(rng, sh, block_size, pages);
    const std::vector<float> q =
        testing::RandomFloats(rng, batch.cu_seqlens.back() * sh.heads * sh.head_dim, -2.0f, 2.0f);
    const std::vector<float> got = Emulate(cache, batch, q);
    const std::vector<float> want = Reference(cache, batch, q);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_FALSE(std::isnan(got[i])) << "element " << i;
    const int64_t width = int64_t{sh.heads} * sh.head_dim;
    for (int s = 0; s < batch.num_seqs(); ++s) {
      const auto begin = static_cast<size_t>(batch.cu_seqlens[s] * width);
      const auto end = static_cast<size_t>(batch.cu_seqlens[s + 1] * width);
      const double nmse =
          testing::Nmse(std::vector<float>(got.begin() + begin, got.begin() + end),
                        std::vector<float>(want.begin() + begin, want.begin() + end));
      EXPECT_LE(nmse, Bound(sh)) << "sequence " << s << " (run " << runs[s] << " from " << starts[s]
                                 << ")";
    }
  }
}

// The kernels' step sequence is the same for a decode row, for that row inside a prefill
// chunk and for a prompt split into chunks: bit for bit in the emulation, whatever the page
// size and the other sequences.
TEST_P(AttentionEmulationTest, DecodeRowsAndChunksGiveTheWholePromptsBits) {
  const Shape sh = GetParam();
  constexpr int32_t kLen = 300;  // two splits, five tiles
  std::mt19937_64 rng(testing::SeedFromName(absl::StrCat("split", Name(sh))));
  // One sequence's logical K, V (kLen positions) and q rows, placed into each layout.
  const int64_t kv_width = int64_t{sh.kv_heads} * sh.head_dim,
                q_width = int64_t{sh.heads} * sh.head_dim;
  const DType dtype = sh.bf16 ? DType::kBF16 : DType::kF32;
  const std::vector<uint8_t> k =
      testing::Encode(testing::RandomFloats(rng, kLen * kv_width, -1.5f, 1.5f), dtype);
  const std::vector<uint8_t> v =
      testing::Encode(testing::RandomFloats(rng, kLen * kv_width), dtype);
  const std::vector<float> q = testing::RandomFloats(rng, kLen * q_width, -2.0f, 2.0f);
  const size_t elem = DTypeSize(dtype);
  // Runs `chunks` of the sequence (one step each, sequence 0 beside a decode row of another
  // sequence when `crowd`), on pages of `block_size`; returns the sequence's out rows.
  auto run = [&](const std::vector<int32_t>& chunks, int32_t block_size, bool crowd) {
    std::vector<float> rows;
    int32_t start = 0;
    for (int32_t c : chunks) {
      std::vector<int32_t> runs = {c}, starts = {start};
      if (crowd) {
        runs.push_back(1);
        starts.push_back(40);
      }
      int64_t pages = 0;
      std::mt19937_64 page_rng(static_cast<uint64_t>(start) * 31 + block_size);
      const PagedKvBatch batch = MakeBatch(page_rng, runs, starts, block_size, &pages);
      HostCache cache = RandomCache(page_rng, sh, block_size, pages);
      for (int32_t p = 0; p < start + c; ++p) {  // the sequence's keys up to this chunk's end
        const int64_t slot =
            int64_t{batch.block_table[p / block_size]} * block_size + p % block_size;
        for (int32_t g = 0; g < sh.kv_heads; ++g) {
          const size_t to = static_cast<size_t>((slot * sh.kv_heads + g) * sh.head_dim) * elem;
          const size_t from =
              static_cast<size_t>((int64_t{p} * sh.kv_heads + g) * sh.head_dim) * elem;
          std::memcpy(cache.k.data() + to, k.data() + from, sh.head_dim * elem);
          std::memcpy(cache.v.data() + to, v.data() + from, sh.head_dim * elem);
        }
      }
      std::vector<float> step_q(q.begin() + start * q_width, q.begin() + (start + c) * q_width);
      if (crowd) {
        const std::vector<float> other = testing::RandomFloats(page_rng, q_width);
        step_q.insert(step_q.end(), other.begin(), other.end());
      }
      const std::vector<float> out = Emulate(cache, batch, step_q);
      rows.insert(rows.end(), out.begin(), out.begin() + int64_t{c} * q_width);
      start += c;
    }
    return rows;
  };
  const std::vector<float> whole = run({kLen}, 16, false);
  for (float x : whole) ASSERT_FALSE(std::isnan(x));
  const std::vector<int32_t> decode_tail = [] {
    std::vector<int32_t> c = {250};
    for (int i = 0; i < 50; ++i) c.push_back(1);  // decode rows across the second split
    return c;
  }();
  for (int32_t block_size : {16, 5, 48}) {
    SCOPED_TRACE(::testing::Message() << Name(sh) << " block_size " << block_size);
    EXPECT_EQ(run({kLen}, block_size, true), whole) << "whole, beside a decode row";
    EXPECT_EQ(run({64, 1, 190, 45}, block_size, false), whole) << "chunks";
    EXPECT_EQ(run(decode_tail, block_size, block_size == 5), whole) << "decode rows";
  }
}

// A decode graph's attention step, emulated: the K/V write and the decode grid launched
// once for a capacity of kCapacity positions per sequence (as a captured graph launches
// them), reading the block tables, context lengths and write positions from fixed
// "device" buffers that each replay rewrites, against an op-by-op step whose grid and
// split scratch are sized from its own lengths (the lengths the host passes at launch):
// the same cache bytes and outputs, bit for bit, at contexts 1, 15, 16, 17 and 4097, with
// a padding entry on the scratch page, whatever the previous replay left in the buffers,
// the split scratch and the outputs.
TEST_P(AttentionEmulationTest, ACapacityGridReadingDeviceLengthsEqualsAnExactLaunch) {
  const Shape sh = GetParam();
  constexpr int32_t kCapacity = 4100;  // the graph's max_context: 17 splits
  constexpr int kSeqs = 4;             // a bucket: three sequences and a padding entry
  const std::vector<int32_t> contexts = {1, 15, 16, 17, 4097};
  const int64_t width = int64_t{sh.heads} * sh.head_dim,
                kv_width = int64_t{sh.kv_heads} * sh.head_dim;
  for (int32_t block_size : {16, 5}) {
    SCOPED_TRACE(::testing::Message() << Name(sh) << " block_size " << block_size);
    std::mt19937_64 rng(testing::SeedFromName(absl::StrCat("graph", Name(sh), block_size)));
    const int32_t pages_per_seq = (kCapacity + block_size - 1) / block_size;
    const int64_t pages = int64_t{kSeqs - 1} * pages_per_seq;  // page `pages`: the scratch page
    HostCache cache = RandomCache(rng, sh, block_size, pages);
    // What the capture fixed: the buffers (sized for the capacity), the rows, the scratch
    // and the plan of a batch of scratch entries at the capacity.
    std::vector<int32_t> dev_cu_seqlens(kSeqs + 1), dev_start(kSeqs), dev_cu_blocks(kSeqs + 1),
        dev_table(static_cast<size_t>(kSeqs) * pages_per_seq);
    std::vector<float> q(kSeqs * width), k(kSeqs * kv_width), v(kSeqs * kv_width),
        out(kSeqs * width, std::nanf(""));
    PagedKvBatch capture;
    capture.block_size = block_size;
    for (int s = 0; s < kSeqs; ++s) capture.Add(1, 0, {static_cast<int32_t>(pages)});
    capture.max_context = kCapacity;
    auto plan =
        PlanPagedAttention(Tensor(q.data(), DType::kF32, {kSeqs, width}), KTensor(cache), capture);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->max_splits, 17);
    std::vector<float> partials(static_cast<size_t>(plan->partial_floats), std::nanf(""));
    const AttnParams graph =
        HostParams(cache, q.data(), out.data(), partials.data(), *plan, kSeqs,
                   dev_cu_seqlens.data(), dev_start.data(), dev_cu_blocks.data(), dev_table.data());

    for (size_t step = 0; step < contexts.size(); ++step) {
      const std::vector<int32_t> ctx = {contexts[step], contexts[(step + 1) % contexts.size()],
                                        contexts[(step + 3) % contexts.size()]};
      SCOPED_TRACE(::testing::Message()
                   << "contexts " << ctx[0] << ", " << ctx[1] << ", " << ctx[2]);
      // This step's batch: each sequence's last position on pages drawn afresh, so a stale
      // table would read other pages; the padding entry at position 0 of the scratch page.
      const std::vector<int32_t> order =
          testing::ShuffledSlots(rng, static_cast<int>(pages), static_cast<int>(pages));
      PagedKvBatch batch;
      batch.block_size = block_size;
      for (int s = 0; s < kSeqs - 1; ++s) {
        const int32_t need = (ctx[s] + block_size - 1) / block_size;
        const auto first = order.begin() + int64_t{s} * pages_per_seq;
        batch.Add(1, ctx[s] - 1, std::vector<int32_t>(first, first + need));
      }
      batch.Add(1, 0, {static_cast<int32_t>(pages)});
      const std::vector<float> step_q = testing::RandomFloats(rng, q.size(), -2.0f, 2.0f);
      const std::vector<float> step_k = testing::RandomFloats(rng, k.size(), -1.5f, 1.5f);
      const std::vector<float> step_v = testing::RandomFloats(rng, v.size());

      // The op-by-op step: its own arrays, its grid and scratch from its lengths.
      HostCache eager = cache;
      PagedKvBatch host = batch;
      host.device_cu_seqlens = host.cu_seqlens.data();
      host.device_start_positions = host.start_positions.data();
      host.device_cu_blocks = host.cu_blocks.data();
      host.device_block_table = host.block_table.data();
      EmulateKvWrite(eager, host, step_k, step_v, host.start_positions.data(),
                     host.cu_blocks.data(), host.block_table.data());
      const std::vector<float> want = Emulate(eager, host, step_q);

      // The replay: the step's rows and arrays copied into the captured buffers (the
      // table's tail keeps the previous step's entries), then the captured launches.
      std::copy(step_q.begin(), step_q.end(), q.begin());
      std::copy(step_k.begin(), step_k.end(), k.begin());
      std::copy(step_v.begin(), step_v.end(), v.begin());
      std::copy(batch.cu_seqlens.begin(), batch.cu_seqlens.end(), dev_cu_seqlens.begin());
      std::copy(batch.start_positions.begin(), batch.start_positions.end(), dev_start.begin());
      std::copy(batch.cu_blocks.begin(), batch.cu_blocks.end(), dev_cu_blocks.begin());
      std::copy(batch.block_table.begin(), batch.block_table.end(), dev_table.begin());
      EmulateKvWrite(cache, batch, k, v, dev_start.data(), dev_cu_blocks.data(), dev_table.data());
      EmulatePlan(graph, *plan);

      EXPECT_EQ(cache.k, eager.k) << "the K write";
      EXPECT_EQ(cache.v, eager.v) << "the V write";
      ASSERT_EQ(out.size(), want.size());
      for (int s = 0; s < kSeqs; ++s) {
        EXPECT_TRUE(std::equal(out.begin() + s * width, out.begin() + (s + 1) * width,
                               want.begin() + s * width))
            << "sequence " << s;
      }
      for (float x : want) ASSERT_FALSE(std::isnan(x));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionEmulationTest,
                         ::testing::Values(Shape{4, 4, 64, true}, Shape{4, 2, 16, true},
                                           Shape{16, 2, 128, true}, Shape{8, 1, 64, false},
                                           Shape{24, 1, 16, true}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return Name(info.param);
                         });

// KvCacheWrite's element map: each row's K and V land in its page and slot, rounded for a
// bf16 cache, over page sizes 16, 5 and 1; no other slot changes.
TEST(KvWriteEmulationTest, RowsLandInTheirPagesAndSlots) {
  for (int32_t block_size : {16, 5, 1}) {
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "block_size " << block_size << (bf16 ? " bf16" : " f32"));
      std::mt19937_64 rng(testing::SeedFromName(absl::StrCat("kvwrite", block_size, bf16)));
      constexpr int32_t kWidth = 2 * 24;  // 2 KV heads of 24
      int64_t pages = 0;
      const PagedKvBatch batch = MakeBatch(rng, {3, 1, 20, 1}, {0, 9, 13, 31}, block_size, &pages);
      const int64_t rows = batch.cu_seqlens.back();
      const std::vector<float> k = testing::RandomFloats(rng, rows * (kWidth + 3));
      const std::vector<float> v = testing::RandomFloats(rng, rows * kWidth);
      const size_t elem = bf16 ? 2 : 4;
      const size_t cache_bytes = static_cast<size_t>((pages + 1) * block_size * kWidth) * elem;
      std::vector<uint8_t> k_cache(cache_bytes, 0xA5), v_cache(cache_bytes, 0xA5);
      KvWriteParams w{k.data(),
                      kWidth + 3,
                      v.data(),
                      kWidth,
                      k_cache.data(),
                      v_cache.data(),
                      bf16,
                      kWidth,
                      block_size,
                      batch.start_positions.data(),
                      batch.cu_blocks.data(),
                      batch.block_table.data()};
      for (int s = 0; s < batch.num_seqs(); ++s) {
        for (int32_t t = batch.cu_seqlens[s]; t < batch.cu_seqlens[s + 1]; ++t) {
          for (int32_t i = 0; i < kWidth; ++i) KvWriteElement(w, s, batch.cu_seqlens[s], t, i);
        }
      }
      // Expected: the test's own placement of each row.
      std::vector<uint8_t> k_want(cache_bytes, 0xA5), v_want(cache_bytes, 0xA5);
      for (int s = 0; s < batch.num_seqs(); ++s) {
        for (int32_t i = 0; i < batch.run_length(s); ++i) {
          const int64_t p = batch.start_positions[s] + i, t = batch.cu_seqlens[s] + i;
          const int32_t page = batch.block_table[batch.cu_blocks[s] + p / block_size];
          const int64_t slot = int64_t{page} * block_size + p % block_size;
          std::vector<float> krow(k.begin() + t * (kWidth + 3),
                                  k.begin() + t * (kWidth + 3) + kWidth);
          std::vector<float> vrow(v.begin() + t * kWidth, v.begin() + (t + 1) * kWidth);
          const std::vector<uint8_t> kb = testing::Encode(krow, bf16 ? DType::kBF16 : DType::kF32);
          const std::vector<uint8_t> vb = testing::Encode(vrow, bf16 ? DType::kBF16 : DType::kF32);
          std::memcpy(k_want.data() + slot * kWidth * elem, kb.data(), kb.size());
          std::memcpy(v_want.data() + slot * kWidth * elem, vb.data(), vb.size());
        }
      }
      EXPECT_EQ(k_cache, k_want);
      EXPECT_EQ(v_cache, v_want);
    }
  }
}

// The plan: decode blocks over the longest context's splits (or max_context's, a graph's
// capacity), prefill items of 64 (row, head) pairs, scratch only when a row has two splits;
// head dims and GQA ratios the kernels are not built for are refused by name.
TEST(AttentionPlanTest, GridsScratchAndRefusals) {
  std::mt19937_64 rng(1);
  int64_t pages = 0;
  PagedKvBatch batch = MakeBatch(rng, {1, 70, 1}, {300, 0, 10}, 16, &pages);
  std::vector<float> q(72 * 8 * 64);
  std::vector<uint8_t> cache(static_cast<size_t>((pages + 1) * 16 * 2 * 64 * 2));
  const Tensor q_t(q.data(), DType::kF32, {72, 8 * 64});
  const Tensor k_t(cache.data(), DType::kBF16, {pages + 1, 16, 2, 64});
  auto plan = PlanPagedAttention(q_t, k_t, batch);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->decode);
  EXPECT_EQ(plan->max_splits, 2);     // context 301
  EXPECT_EQ(plan->prefill_items, 5);  // 70 rows x 4 heads per KV head = 280 pairs
  EXPECT_EQ(plan->items[2], 1);       // item 1: sequence 1, pairs from 64
  EXPECT_EQ(plan->items[3], 64);
  EXPECT_EQ(plan->partial_floats, 3 * 8 * 2 * 66);
  batch.max_context = 5000;  // a graph's capacity
  plan = PlanPagedAttention(q_t, k_t, batch);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->max_splits, 20);

  const Tensor k48(cache.data(), DType::kBF16, {pages + 1, 16, 2, 48});
  auto refused = PlanPagedAttention(Tensor(q.data(), DType::kF32, {72, 8 * 48}), k48, batch);
  EXPECT_TRUE(absl::IsUnimplemented(refused.status()));
  EXPECT_NE(refused.status().message().find("head_dim 16, 32, 64 or 128, not 48"),
            std::string::npos);
  const Tensor k1(cache.data(), DType::kBF16, {pages + 1, 16, 1, 16});
  refused = PlanPagedAttention(Tensor(q.data(), DType::kF32, {72, 80 * 16}), k1, batch);
  EXPECT_TRUE(absl::IsUnimplemented(refused.status()));
  EXPECT_NE(refused.status().message().find("not 80"), std::string::npos);
}

}  // namespace
}  // namespace coil::cuda
