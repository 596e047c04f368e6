// The attention ops' invariants that serving relies on, each checked bit for bit rather
// than against stored numbers (the op harness compares values against float64
// references):
//  - a prompt split into chunks anywhere, or fed token by token as decode rows, gives the
//    bits of the whole prompt, for page sizes 1, 16 and 5 (dividing neither the chunks nor
//    the tiles of keys), GQA ratios 1, 2 and 8, f32 and bf16 caches;
//  - the page size and where the pages lie do not change a bit;
//  - a sequence's rows do not depend on what else shares the step, or on the threads;
// and the KV cache pool's layout, and the refusals of malformed inputs, each naming what to
// fix.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "kernels/kv_cache.h"
#include "tests/unit/kernels/op_test_util.h"

namespace coil {
namespace {

using testing::DeviceArray;
using ::testing::HasSubstr;

struct Shape {
  int64_t heads, kv_heads, head_dim;
  DType cache_dtype = DType::kF32;
  int64_t q_width() const { return heads * head_dim; }
  int64_t kv_width() const { return kv_heads * head_dim; }
};

// One sequence's inputs at every position: q [len, H * Dh], k and v [len, KVH * Dh].
struct Sequence {
  int64_t len;
  std::vector<float> q, k, v;
};

Sequence RandomSequence(std::mt19937_64& rng, const Shape& shape, int64_t len) {
  return {len, testing::RandomFloats(rng, len * shape.q_width(), -2.0f, 2.0f),
          testing::RandomFloats(rng, len * shape.kv_width(), -1.5f, 1.5f),
          testing::RandomFloats(rng, len * shape.kv_width())};
}

// Tokens [begin, begin + length) of sequence `seq` in a step.
struct Entry {
  int seq;
  int64_t begin, length;
};

// Runs steps of KvCacheWrite then PagedAttention (as an attention layer does) over a pool
// of its own, handing pages out in a shuffled order (`page_seed`) as sequences grow, and
// collects each sequence's attention output rows [len, H * Dh].
class Runner {
 public:
  Runner(Backend& backend, const Shape& shape, int32_t block_size,
         const std::vector<Sequence>& seqs, uint64_t page_seed)
      : backend_(backend), shape_(shape), block_size_(block_size), seqs_(seqs) {
    int64_t pages = 0;
    for (const Sequence& s : seqs) pages += (s.len + block_size - 1) / block_size;
    pages += 2;
    auto cache = KvCache::Create(backend, {.layers = 2,
                                           .pages = pages,
                                           .block_size = block_size,
                                           .kv_heads = shape.kv_heads,
                                           .head_dim = shape.head_dim,
                                           .dtype = shape.cache_dtype});
    EXPECT_TRUE(cache.ok()) << cache.status();
    cache_ = std::make_unique<KvCache>(std::move(*cache));
    free_.resize(pages);
    std::iota(free_.begin(), free_.end(), 0);
    std::mt19937_64 rng(page_seed);
    std::shuffle(free_.begin(), free_.end(), rng);
    tables_.resize(seqs.size());
    outs_.resize(seqs.size());
    for (size_t s = 0; s < seqs.size(); ++s) {
      outs_[s].assign(seqs[s].len * shape.q_width(), std::nanf(""));
    }
  }

  void Step(const std::vector<Entry>& entries) {
    PagedKvBatch batch;
    batch.block_size = block_size_;
    std::vector<float> q, k, v;
    for (const Entry& e : entries) {
      const Sequence& s = seqs_[e.seq];
      std::vector<int32_t>& table = tables_[e.seq];
      while (static_cast<int64_t>(table.size()) * block_size_ < e.begin + e.length) {
        table.push_back(free_.back());
        free_.pop_back();
      }
      batch.Add(static_cast<int32_t>(e.length), static_cast<int32_t>(e.begin), table);
      auto append = [&](std::vector<float>& to, const std::vector<float>& from, int64_t width) {
        to.insert(to.end(), from.begin() + e.begin * width,
                  from.begin() + (e.begin + e.length) * width);
      };
      append(q, s.q, shape_.q_width());
      append(k, s.k, shape_.kv_width());
      append(v, s.v, shape_.kv_width());
    }
    const int64_t rows = batch.cu_seqlens.back();
    auto d_q = DeviceArray::FromFloats(backend_, q);
    auto d_k = DeviceArray::FromFloats(backend_, k);
    auto d_v = DeviceArray::FromFloats(backend_, v);
    auto d_out = DeviceArray::FromFloats(backend_, std::vector<float>(rows * shape_.q_width()));
    ASSERT_TRUE(d_q.ok() && d_k.ok() && d_v.ok() && d_out.ok());
    const Device dev = backend_.device();
    // Layer 1 of the pool: a layer's view starts inside the pool's memory.
    const absl::Status wrote =
        backend_.KvCacheWrite(Tensor(d_k->data(), DType::kF32, {rows, shape_.kv_width()}, dev),
                              Tensor(d_v->data(), DType::kF32, {rows, shape_.kv_width()}, dev),
                              batch, cache_->KCache(1), cache_->VCache(1));
    ASSERT_TRUE(wrote.ok()) << wrote;
    const absl::Status attended = backend_.PagedAttention(
        Tensor(d_q->data(), DType::kF32, {rows, shape_.q_width()}, dev), cache_->KCache(1),
        cache_->VCache(1), batch, 1.0f / std::sqrt(static_cast<float>(shape_.head_dim)),
        Tensor(d_out->data(), DType::kF32, {rows, shape_.q_width()}, dev));
    ASSERT_TRUE(attended.ok()) << attended;
    auto out = d_out->ReadFloats();
    ASSERT_TRUE(out.ok());
    int64_t row = 0;
    for (const Entry& e : entries) {
      std::copy(out->begin() + row * shape_.q_width(),
                out->begin() + (row + e.length) * shape_.q_width(),
                outs_[e.seq].begin() + e.begin * shape_.q_width());
      row += e.length;
    }
  }

  const std::vector<float>& out(int seq) const { return outs_[seq]; }
  const KvCache& cache() const { return *cache_; }

 private:
  Backend& backend_;
  Shape shape_;
  int32_t block_size_;
  const std::vector<Sequence>& seqs_;
  std::unique_ptr<KvCache> cache_;
  std::vector<int32_t> free_;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<std::vector<float>> outs_;
};

// Sequence 0 alone, in chunks of `chunks` (summing to its length).
std::vector<float> RunChunks(Backend& backend, const Shape& shape, int32_t block_size,
                             const Sequence& seq, const std::vector<int64_t>& chunks,
                             uint64_t page_seed) {
  const std::vector<Sequence> seqs = {seq};
  Runner runner(backend, shape, block_size, seqs, page_seed);
  int64_t begin = 0;
  for (int64_t c : chunks) {
    runner.Step({{0, begin, c}});
    begin += c;
  }
  EXPECT_EQ(begin, seq.len);
  return runner.out(0);
}

struct Target {
  std::string name;
  BackendKind kind;
  int threads;
};

std::vector<Target> Targets() {
  std::vector<Target> t = {{"cpu", BackendKind::kCpu, 2}, {"cpu1t", BackendKind::kCpu, 1}};
#if COIL_WITH_CUDA
  t.push_back({"cuda", BackendKind::kCuda, 1});
#endif
  return t;
}

// Calls body(backend) for each target this machine has (no GPU: the CPU only).
template <typename Body>
void ForEachBackend(Body body) {
  for (const Target& t : Targets()) {
    SCOPED_TRACE(t.name);
    auto backend = CreateBackend(t.kind, {.threads = t.threads});
    if (absl::IsUnimplemented(backend.status()) || absl::IsUnavailable(backend.status())) continue;
    ASSERT_TRUE(backend.ok()) << backend.status();
    body(**backend);
  }
}

// Whole prompt = chunks = decode rows = other page sizes and placements, bit for bit.
TEST(AttentionSplitTest, ChunksDecodeRowsAndPageSizesGiveTheWholePromptsBits) {
  constexpr int64_t kLen = 53;  // four tiles of 16 keys and a part
  for (const Shape& shape : {Shape{4, 4, 16}, Shape{4, 2, 40}, Shape{8, 1, 32},
                             Shape{4, 2, 40, DType::kBF16}, Shape{8, 1, 32, DType::kBF16}}) {
    SCOPED_TRACE(::testing::Message() << "h" << shape.heads << " kvh" << shape.kv_heads << " d"
                                      << shape.head_dim << " " << DTypeName(shape.cache_dtype));
    std::mt19937_64 rng(
        testing::SeedFromName(absl::StrCat("split", shape.heads, shape.kv_heads, shape.head_dim)));
    const Sequence seq = RandomSequence(rng, shape, kLen);
    ForEachBackend([&](Backend& backend) {
      const std::vector<float> whole = RunChunks(backend, shape, 16, seq, {kLen}, 1);
      for (float x : whole) ASSERT_FALSE(std::isnan(x));
      const std::vector<int64_t> decode(kLen, 1);
      for (int32_t block_size : {1, 16, 5}) {
        SCOPED_TRACE(::testing::Message() << "block_size " << block_size);
        // Chunks that end inside tiles and pages, one of a single row, and a row-block's worth.
        for (const std::vector<int64_t>& chunks :
             {std::vector<int64_t>{kLen}, std::vector<int64_t>{10, 1, 16, 26},
              std::vector<int64_t>{17, 17, 19}, std::vector<int64_t>{1, 52}, decode}) {
          SCOPED_TRACE(::testing::Message() << chunks.size() << " chunks, first " << chunks[0]);
          for (uint64_t page_seed : {2, 3}) {
            EXPECT_EQ(RunChunks(backend, shape, block_size, seq, chunks, page_seed), whole);
          }
        }
      }
    });
  }
}

// A sequence's rows alone and inside steps shared with other sequences (decode rows,
// prompts, chunks, in another order), on 2 threads and on 1, bit for bit.
TEST(AttentionBatchTest, ASequencesRowsDoNotDependOnTheBatchOrTheThreads) {
  const Shape shape{6, 2, 24, DType::kBF16};
  std::mt19937_64 rng(testing::SeedFromName("AttentionBatch"));
  std::vector<Sequence> seqs;
  for (int64_t len : {40, 3, 70, 21, 1}) seqs.push_back(RandomSequence(rng, shape, len));
  auto solo = CreateBackend(BackendKind::kCpu, {.threads = 1});
  ASSERT_TRUE(solo.ok());
  std::vector<std::vector<float>> alone;
  for (const Sequence& s : seqs) alone.push_back(RunChunks(**solo, shape, 16, s, {s.len}, 7));
  ForEachBackend([&](Backend& backend) {
    for (int32_t block_size : {16, 5}) {
      SCOPED_TRACE(::testing::Message() << "block_size " << block_size);
      Runner runner(backend, shape, block_size, seqs, 11);
      // Step 1: prompts' first chunks; step 2: decode rows beside chunks; step 3: the rest.
      runner.Step({{2, 0, 33}, {0, 0, 20}, {1, 0, 3}});
      runner.Step({{4, 0, 1}, {0, 20, 1}, {2, 33, 20}, {3, 0, 21}});
      runner.Step({{0, 21, 19}, {2, 53, 1}});
      runner.Step({{2, 54, 16}});
      for (size_t s = 0; s < seqs.size(); ++s) {
        EXPECT_EQ(runner.out(static_cast<int>(s)), alone[s]) << "sequence " << s;
      }
    }
  });
}

// A decode step of KvCacheWrite and PagedAttention captured once as a graph (on a backend
// that has graphs: CUDA) with the batch's arrays in device buffers and max_context as its
// capacity, then replayed after those buffers are rewritten for longer contexts on more
// pages (one context reaching the capacity): each replay gives the eager ops' bits.
TEST(AttentionGraphTest, OneCaptureServesGrowingContexts) {
  const Shape shape{8, 2, 64, DType::kBF16};
  constexpr int64_t kSeqs = 3, kPages = 200, kCapacity = 1500;
  constexpr int32_t kBlock = 16;
  ForEachBackend([&](Backend& backend) {
    if (!backend.SupportsGraphs()) return;  // the CPU records no graphs
    std::mt19937_64 rng(testing::SeedFromName("AttentionGraph"));
    auto cache = KvCache::Create(backend, {.layers = 1,
                                           .pages = kPages,
                                           .block_size = kBlock,
                                           .kv_heads = shape.kv_heads,
                                           .head_dim = shape.head_dim,
                                           .dtype = shape.cache_dtype});
    ASSERT_TRUE(cache.ok()) << cache.status();
    // The step's arrays live at fixed device addresses the graph reads at each replay.
    const size_t table_capacity = kSeqs * (kCapacity / kBlock + 1);
    auto d_cu = DeviceArray::FromInts(backend, std::vector<int32_t>(kSeqs + 1));
    auto d_start = DeviceArray::FromInts(backend, std::vector<int32_t>(kSeqs));
    auto d_cu_blocks = DeviceArray::FromInts(backend, std::vector<int32_t>(kSeqs + 1));
    auto d_table = DeviceArray::FromInts(backend, std::vector<int32_t>(table_capacity));
    auto d_q = DeviceArray::FromFloats(backend, std::vector<float>(kSeqs * shape.q_width()));
    auto d_k = DeviceArray::FromFloats(backend, std::vector<float>(kSeqs * shape.kv_width()));
    auto d_v = DeviceArray::FromFloats(backend, std::vector<float>(kSeqs * shape.kv_width()));
    auto d_out = DeviceArray::FromFloats(backend, std::vector<float>(kSeqs * shape.q_width()));
    ASSERT_TRUE(d_cu.ok() && d_start.ok() && d_cu_blocks.ok() && d_table.ok() && d_q.ok() &&
                d_k.ok() && d_v.ok() && d_out.ok());
    const Device dev = backend.device();
    std::vector<int32_t> order(kPages);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    // A decode batch at `positions`, its arrays uploaded into the fixed buffers.
    auto step = [&](const std::vector<int32_t>& positions) {
      PagedKvBatch batch;
      batch.block_size = kBlock;
      batch.max_context = kCapacity;
      size_t next = 0;
      for (int32_t p : positions) {
        const size_t pages = static_cast<size_t>(p / kBlock + 1);
        batch.Add(1, p, std::vector<int32_t>(order.begin() + next, order.begin() + next + pages));
        next += pages;
      }
      auto upload = [&](const DeviceArray& to, const std::vector<int32_t>& from) {
        EXPECT_TRUE(backend.CopyFromHost(to.data(), from.data(), from.size() * 4).ok());
      };
      upload(*d_cu, batch.cu_seqlens);
      upload(*d_start, batch.start_positions);
      upload(*d_cu_blocks, batch.cu_blocks);
      upload(*d_table, batch.block_table);
      batch.device_cu_seqlens = static_cast<const int32_t*>(d_cu->data());
      batch.device_start_positions = static_cast<const int32_t*>(d_start->data());
      batch.device_cu_blocks = static_cast<const int32_t*>(d_cu_blocks->data());
      batch.device_block_table = static_cast<const int32_t*>(d_table->data());
      for (const auto* a : {&*d_q, &*d_k, &*d_v}) {
        const std::vector<float> values = testing::RandomFloats(
            rng, (a == &*d_q ? shape.q_width() : shape.kv_width()) * kSeqs, -2.0f, 2.0f);
        EXPECT_TRUE(backend.CopyFromHost(a->data(), values.data(), values.size() * 4).ok());
      }
      return batch;
    };
    auto ops = [&](const PagedKvBatch& batch) {
      absl::Status s =
          backend.KvCacheWrite(Tensor(d_k->data(), DType::kF32, {kSeqs, shape.kv_width()}, dev),
                               Tensor(d_v->data(), DType::kF32, {kSeqs, shape.kv_width()}, dev),
                               batch, cache->KCache(0), cache->VCache(0));
      if (s.ok()) {
        s = backend.PagedAttention(
            Tensor(d_q->data(), DType::kF32, {kSeqs, shape.q_width()}, dev), cache->KCache(0),
            cache->VCache(0), batch, 0.125f,
            Tensor(d_out->data(), DType::kF32, {kSeqs, shape.q_width()}, dev));
      }
      return s;
    };
    const PagedKvBatch first = step({5, 100, 300});
    ASSERT_TRUE(ops(first).ok());  // the warm-up sizes the op scratch for the capacity
    ASSERT_TRUE(backend.Synchronize().ok());
    ASSERT_TRUE(backend.BeginCapture().ok());
    const absl::Status recorded = ops(first);
    auto graph = backend.EndCapture();
    ASSERT_TRUE(recorded.ok()) << recorded;
    ASSERT_TRUE(graph.ok()) << graph.status();
    for (const std::vector<int32_t>& positions :
         {std::vector<int32_t>{6, 101, 301}, {200, 700, kCapacity - 1}, {17, 16, 15}}) {
      SCOPED_TRACE(::testing::Message()
                   << "positions " << positions[0] << ", " << positions[1] << ", " << positions[2]);
      const PagedKvBatch batch = step(positions);
      ASSERT_TRUE(backend.Replay(**graph).ok());
      auto replayed = d_out->ReadFloats();
      ASSERT_TRUE(ops(batch).ok());
      auto eager = d_out->ReadFloats();
      ASSERT_TRUE(replayed.ok() && eager.ok());
      EXPECT_EQ(*replayed, *eager);
      EXPECT_TRUE(backend.IsGraphCurrent(**graph));
    }
  });
}

// x rounded to the nearest bf16, ties to even, in double (the test's own rounding).
double RoundBf16(double x) {
  int e;
  const double m = std::frexp(x, &e);
  return std::ldexp(std::nearbyint(m * 256.0), e - 8);
}

// Relu2 squares exactly representable squares (x with 12 significant bits), so its bf16 out
// is the nearest-even rounding of a known value, ties included; NaN stays NaN, -inf and
// negatives give 0, +inf stays. f32 and bf16 outs, on every backend, widths with a tail.
TEST(Relu2Test, SquaresRoundsToNearestEvenAndKeepsNaN) {
  std::mt19937_64 rng(testing::SeedFromName("Relu2"));
  std::uniform_int_distribution<int> mantissa(2048, 4095), exponent(-20, 20), sign(0, 1);
  std::vector<float> x;
  for (int i = 0; i < 997; ++i) {
    const float v = std::ldexp(static_cast<float>(mantissa(rng)), exponent(rng) - 11);
    x.push_back(sign(rng) ? -v : v);
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f, -0.0f, inf, -inf, std::nanf(""), 1.0f + 1.0f / 256, 1.5f}) x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size());
  ForEachBackend([&](Backend& backend) {
    auto d_x = DeviceArray::FromFloats(backend, x);
    auto d_f32 = DeviceArray::FromFloats(backend, std::vector<float>(n));
    auto d_bf16 = DeviceArray::FromFloats(backend, std::vector<float>(n), DType::kBF16);
    ASSERT_TRUE(d_x.ok() && d_f32.ok() && d_bf16.ok());
    const Device dev = backend.device();
    const Tensor xt(d_x->data(), DType::kF32, {1, n}, dev);
    ASSERT_TRUE(backend.Relu2(xt, Tensor(d_f32->data(), DType::kF32, {1, n}, dev)).ok());
    ASSERT_TRUE(backend.Relu2(xt, Tensor(d_bf16->data(), DType::kBF16, {1, n}, dev)).ok());
    auto f32 = d_f32->ReadFloats();
    auto bf16_bytes = d_bf16->Read();
    ASSERT_TRUE(f32.ok() && bf16_bytes.ok());
    for (int64_t i = 0; i < n; ++i) {
      uint16_t half;
      std::memcpy(&half, bf16_bytes->data() + 2 * i, 2);
      const uint32_t bits = static_cast<uint32_t>(half) << 16;
      float b;
      std::memcpy(&b, &bits, 4);
      if (std::isnan(x[i])) {
        EXPECT_TRUE(std::isnan((*f32)[i]) && std::isnan(b)) << i;
        continue;
      }
      const double square = x[i] > 0 ? static_cast<double>(x[i]) * x[i] : 0.0;
      EXPECT_EQ((*f32)[i], static_cast<float>(square)) << "x " << x[i];
      EXPECT_EQ(b, static_cast<float>(std::isinf(square) ? square : RoundBf16(square)))
          << "x " << x[i];
    }
  });
}

// The pool: [layers, pages + 1, block_size, kv_heads, head_dim] per K and V, zeroed, one
// contiguous view per layer, the page's cost over all layers, bad shapes refused by name.
TEST(KvCacheTest, LayoutViewsAndRefusals) {
  auto backend = CreateBackend(BackendKind::kCpu);
  ASSERT_TRUE(backend.ok());
  const KvCacheShape shape{.layers = 3,
                           .pages = 10,
                           .block_size = 4,
                           .kv_heads = 2,
                           .head_dim = 8,
                           .dtype = DType::kBF16};
  // 2 (K, V) x 3 layers x 4 tokens x 2 heads x 8 dims x 2 bytes.
  EXPECT_EQ(shape.bytes_per_page(), 2 * 3 * 4 * 2 * 8 * 2);
  EXPECT_EQ(shape.bytes_per_token(), 2 * 3 * 2 * 8 * 2);
  auto cache = KvCache::Create(**backend, shape);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ(cache->scratch_page(), 10);
  EXPECT_EQ(cache->bytes(), size_t{2} * 3 * 11 * 4 * 2 * 8 * 2);
  const Tensor k1 = cache->KCache(1);
  EXPECT_EQ(k1.dtype(), DType::kBF16);
  EXPECT_TRUE(k1.contiguous());
  EXPECT_EQ(k1.dim(0), 11);
  EXPECT_EQ(k1.dim(1), 4);
  EXPECT_EQ(k1.dim(2), 2);
  EXPECT_EQ(k1.dim(3), 8);
  // Layer 1 starts one layer of 11 pages after layer 0; V is apart from K.
  EXPECT_EQ(static_cast<char*>(k1.raw()) - static_cast<char*>(cache->KCache(0).raw()),
            11 * 4 * 2 * 8 * 2);
  EXPECT_NE(cache->VCache(1).raw(), k1.raw());
  std::vector<uint16_t> host(k1.numel(), 1);
  ASSERT_TRUE((*backend)->CopyToHost(host.data(), cache->VCache(2).raw(), host.size() * 2).ok());
  EXPECT_EQ(std::count(host.begin(), host.end(), 0), static_cast<long>(host.size()));

  KvCacheShape bad = shape;
  bad.pages = 0;
  auto refused = KvCache::Create(**backend, bad);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status()));
  EXPECT_THAT(refused.status().message(), HasSubstr("pages 0"));
  bad = shape;
  bad.dtype = DType::kF16;
  refused = KvCache::Create(**backend, bad);
  EXPECT_THAT(refused.status().message(), HasSubstr("use f32 or bf16"));
}

// Every malformed input is refused before any memory is touched, with what to fix.
class AttentionRefusalTest : public ::testing::Test {
 protected:
  static constexpr int64_t kHeads = 4, kKvHeads = 2, kHeadDim = 8, kPages = 6, kBlock = 4;
  static constexpr int64_t kRows = 5;

  void SetUp() override {
    auto b = CreateBackend(BackendKind::kCpu, {.threads = 2});
    ASSERT_TRUE(b.ok());
    backend_ = std::move(*b);
    q_.assign(kRows * kHeads * kHeadDim, 0.5f);
    kv_.assign(kRows * kKvHeads * kHeadDim, 0.25f);
    out_.assign(kRows * kHeads * kHeadDim, 0.0f);
    k_cache_.assign((kPages + 1) * kBlock * kKvHeads * kHeadDim, 0.0f);
    v_cache_ = k_cache_;
    // A prompt of 3 rows (pages 2, 5) and two decode rows at positions 7 and 0.
    batch_.block_size = kBlock;
    batch_.Add(3, 0, {2});
    batch_.Add(1, 7, {0, 4});
    batch_.Add(1, 0, {1});
  }
  Tensor F32(std::vector<float>& v, std::initializer_list<int64_t> shape) {
    return Tensor(v.data(), DType::kF32, shape);
  }
  Tensor Q() { return F32(q_, {kRows, kHeads * kHeadDim}); }
  Tensor Kv() { return F32(kv_, {kRows, kKvHeads * kHeadDim}); }
  Tensor Out() { return F32(out_, {kRows, kHeads * kHeadDim}); }
  Tensor KCache() { return F32(k_cache_, {kPages + 1, kBlock, kKvHeads, kHeadDim}); }
  Tensor VCache() { return F32(v_cache_, {kPages + 1, kBlock, kKvHeads, kHeadDim}); }
  absl::Status Attend(const PagedKvBatch& batch) {
    return backend_->PagedAttention(Q(), KCache(), VCache(), batch, 0.35f, Out());
  }
  absl::Status Write(const PagedKvBatch& batch) {
    return backend_->KvCacheWrite(Kv(), Kv(), batch, KCache(), VCache());
  }
  // Both ops refuse `batch` with a message containing `what`.
  void ExpectRefused(const PagedKvBatch& batch, const std::string& what) {
    for (const absl::Status& s : {Attend(batch), Write(batch)}) {
      EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
      EXPECT_THAT(s.message(), HasSubstr(what));
    }
  }

  std::unique_ptr<Backend> backend_;
  std::vector<float> q_, kv_, out_, k_cache_, v_cache_;
  PagedKvBatch batch_;
};

TEST_F(AttentionRefusalTest, TheGoodBatchRuns) {
  ASSERT_TRUE(Write(batch_).ok());
  ASSERT_TRUE(Attend(batch_).ok());
  // Row 4 attends to position 0 of its page 1 only: its out is that V row (0.25).
  for (int64_t i = 4 * kHeads * kHeadDim; i < 5 * kHeads * kHeadDim; ++i) {
    EXPECT_EQ(out_[i], 0.25f) << i;
  }
}

TEST_F(AttentionRefusalTest, MalformedBatches) {
  PagedKvBatch b = batch_;
  b.block_table[1] = 2;  // sequence 1's page 0 is sequence 0's page being written
  ExpectRefused(b, "page 2 is read by sequence 1");
  b = batch_;
  b.block_table[2] = 2;  // sequence 1 writes sequence 0's page (position 7 lies in entry 1)
  ExpectRefused(b, "page 2 is written twice in one step");
  b = batch_;
  b.block_table[3] = kPages;  // padding may share the scratch page; a real run may use it too
  EXPECT_TRUE(Attend(b).ok());
  b = batch_;
  b.block_table[0] = kPages + 1;
  ExpectRefused(b, "block table entry 0 is page 7; pages are 0..5 (6 is the scratch page)");
  b = batch_;
  b.block_table[2] = -1;
  ExpectRefused(b, "is page -1");
  b = batch_;
  b.block_table = {2, 0, 1};  // sequence 1 needs 2 pages for positions 0..7
  b.cu_blocks = {0, 1, 2, 3};
  ExpectRefused(b,
                "sequence 1 holds 8 positions (start 7 + run 1) but its block table has 1 "
                "pages of 4; give it at least 2 pages");
  b = batch_;
  b.max_context = 7;  // sequence 1 holds 8 positions
  ExpectRefused(b, "sequence 1 holds 8 positions but max_context is 7");
  b.max_context = 8;
  EXPECT_TRUE(Attend(b).ok());
  b = batch_;
  b.block_size = 8;
  ExpectRefused(b, "build the batch with the cache's block size");
  b = batch_;
  b.block_size = 0;
  ExpectRefused(b, "block_size is 0");
  b = batch_;
  b.cu_seqlens = {0, 3, 4, 4};
  ExpectRefused(b, "sequence 2 has a run of 0 rows");
  b = batch_;
  b.cu_seqlens = {0, 3, 4, 6};
  ExpectRefused(b, "the runs cover 6 rows but the tensors have 5");
  b = batch_;
  b.start_positions[2] = -1;
  ExpectRefused(b, "positions are >= 0");
  b = batch_;
  b.cu_blocks.pop_back();
  ExpectRefused(b, "give num_seqs + 1 of each");
  b = batch_;
  b.block_table.push_back(3);
  ExpectRefused(b, "the tables must cover block_table exactly");
  PagedKvBatch empty;
  empty.block_size = kBlock;
  ExpectRefused(empty, "the KV batch has no sequences");
}

TEST_F(AttentionRefusalTest, AChangedBatchIsCheckedAgain) {
  // The base class skips re-checking the batch it checked last: a batch changed in place
  // after a successful op must still be refused.
  PagedKvBatch b = batch_;
  ASSERT_TRUE(Attend(b).ok());
  b.block_table[0] = 99;
  EXPECT_TRUE(absl::IsInvalidArgument(Attend(b)));
  b.block_table[0] = 2;
  EXPECT_TRUE(Attend(b).ok());
}

TEST_F(AttentionRefusalTest, MalformedTensors) {
  auto refused = [](const absl::Status& s, const std::string& what) {
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr(what));
  };
  std::vector<float> wide_q(kRows * 5 * kHeadDim), small(64);
  // q's width is not a multiple of the KV heads' heads (5 heads over 2 KV heads).
  refused(backend_->PagedAttention(F32(wide_q, {kRows, 5 * kHeadDim}), KCache(), VCache(), batch_,
                                   0.35f, Out()),
          "with heads a multiple of the cache's 2 KV heads");
  refused(backend_->PagedAttention(F32(q_, {kRows, kHeads * kHeadDim - 1}), KCache(), VCache(),
                                   batch_, 0.35f, Out()),
          "its width must be heads * head_dim (8)");
  refused(backend_->PagedAttention(Q(), KCache(), VCache(), batch_, 0.0f, Out()),
          "it must be finite and > 0");
  refused(backend_->PagedAttention(Q(), KCache(), VCache(), batch_, 0.35f, Q()), "out overlaps q");
  refused(backend_->PagedAttention(Q(), KCache(), KCache(), batch_, 0.35f, Out()),
          "k_cache overlaps v_cache");
  std::vector<uint16_t> v16(v_cache_.size());
  refused(
      backend_->PagedAttention(
          Q(), KCache(), Tensor(v16.data(), DType::kBF16, {kPages + 1, kBlock, kKvHeads, kHeadDim}),
          batch_, 0.35f, Out()),
      "both caches need one dtype");
  refused(backend_->PagedAttention(Q(), F32(k_cache_, {kPages + 1, kBlock, kKvHeads * kHeadDim}),
                                   VCache(), batch_, 0.35f, Out()),
          "the op takes rank 4");
  refused(backend_->PagedAttention(
              Q(),
              Tensor(k_cache_.data(), DType::kF32, {kPages + 1, kBlock, kKvHeads, kHeadDim},
                     {kBlock * kKvHeads * kHeadDim * 2, kKvHeads * kHeadDim, kHeadDim, 1}),
              VCache(), batch_, 0.35f, Out()),
          "it must be contiguous");
  refused(backend_->PagedAttention(Q(), F32(small, {1, 4, 2, 8}), F32(small, {1, 4, 2, 8}), batch_,
                                   0.35f, Out()),
          "it needs pages plus the scratch page");
  refused(
      backend_->KvCacheWrite(F32(q_, {kRows, kHeads * kHeadDim}), Kv(), batch_, KCache(), VCache()),
      "the cache's kv_heads * head_dim");
  refused(backend_->KvCacheWrite(Kv(), F32(kv_, {kRows - 1, kKvHeads * kHeadDim}), batch_, KCache(),
                                 VCache()),
          "k's rows");
  refused(backend_->KvCacheWrite(F32(k_cache_, {kRows, kKvHeads * kHeadDim}), Kv(), batch_,
                                 KCache(), VCache()),
          "k overlaps k_cache");
  refused(backend_->Relu2(Q(), F32(q_, {kRows - 1, kHeads * kHeadDim})), "x's rows");
  refused(backend_->Relu2(Q(), Tensor(q_.data() + 1, DType::kF32, {kRows, kHeads * kHeadDim})),
          "out overlaps x without being x");
  EXPECT_TRUE(backend_->Relu2(Q(), Q()).ok());
}

}  // namespace
}  // namespace coil
