#include "tests/unit/kernels/op_cases.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "tests/unit/kernels/op_test_util.h"

namespace coil::testing {
namespace {

// ---------------------------------------------------------------- Embedding
class EmbeddingCase : public OpCase {
 public:
  // table_pad > 0: the table is columns [1, 1 + width) of a [vocab, width + table_pad]
  // matrix (strided rows, as when the model gathers rows of an activation tensor).
  EmbeddingCase(DType dtype, int64_t tokens, int64_t vocab, int64_t width, int64_t offset,
                int64_t table_pad = 0)
      : dtype_(dtype), tokens_(tokens), vocab_(vocab), width_(width), offset_(offset),
        table_pad_(table_pad) {}
  std::string Op() const override { return BackendOpName(BackendOp::kEmbedding); }
  std::string Params() const override {
    return absl::StrCat(DTypeName(dtype_), "_t", tokens_, "_v", vocab_, "_d", width_, "_off",
                        offset_, table_pad_ ? absl::StrCat("_tpad", table_pad_) : "");
  }
  void MakeInputs(uint64_t seed) override {
    std::mt19937_64 rng(seed);
    table_ = RandomFloats(rng, vocab_ * (width_ + table_pad_));
    // Ids below (negative too), inside and above this shard's range [offset, offset + vocab).
    std::uniform_int_distribution<int32_t> id(-2, static_cast<int32_t>(offset_ + vocab_ + 3));
    ids_.resize(tokens_);
    for (auto& i : ids_) i = id(rng);
  }
  absl::Status Prepare(Backend& backend) override {
    COIL_ASSIGN_OR_RETURN(d_ids_, DeviceArray::FromInts(backend, ids_));
    COIL_ASSIGN_OR_RETURN(d_table_, DeviceArray::FromFloats(backend, table_, dtype_));
    COIL_ASSIGN_OR_RETURN(d_out_, DeviceArray::FromFloats(
                                      backend, std::vector<float>(tokens_ * width_, -7.0f)));
    return absl::OkStatus();
  }
  absl::Status Launch(Backend& backend) override {
    const Tensor table(d_table_->data(), dtype_, {vocab_, width_ + table_pad_},
                       backend.device());
    return backend.Embedding(Tensor(d_ids_->data(), DType::kI32, {tokens_}, backend.device()),
                             table_pad_ ? table.Columns(1, width_) : table, offset_,
                             Tensor(d_out_->data(), DType::kF32, {tokens_, width_},
                                    backend.device()));
  }
  absl::StatusOr<OpResult> Collect() override {
    OpResult r;
    COIL_ASSIGN_OR_RETURN(auto out, d_out_->ReadFloats());
    r.outputs.emplace_back("out", std::move(out));
    return r;
  }
  double flops() const override { return 0; }
  double bytes() const override {
    return tokens_ * width_ * (4.0 + DTypeSize(dtype_));
  }

 private:
  DType dtype_;
  int64_t tokens_, vocab_, width_, offset_, table_pad_;
  std::vector<float> table_;
  std::vector<int32_t> ids_;
  std::optional<DeviceArray> d_ids_, d_table_, d_out_;
};

// ---------------------------------------------------------------- AddRmsNorm
class AddRmsNormCase : public OpCase {
 public:
  // out_is_x: out aliases x (the model normalizes into the block output it just added).
  // out_dtype kBF16: out rounded to bf16 (a bf16 matmul's input).
  AddRmsNormCase(int64_t rows, int64_t width, bool with_x, bool out_is_x = false,
                 DType out_dtype = DType::kF32)
      : rows_(rows), width_(width), with_x_(with_x), out_is_x_(out_is_x), out_dtype_(out_dtype) {}
  std::string Op() const override { return BackendOpName(BackendOp::kAddRmsNorm); }
  std::string Params() const override {
    return absl::StrCat("f32_t", rows_, "_d", width_, with_x_ ? "_add" : "_first",
                        out_is_x_ ? "_outisx" : "",
                        out_dtype_ == DType::kBF16 ? "_outbf16" : "");
  }
  void MakeInputs(uint64_t seed) override {
    std::mt19937_64 rng(seed);
    x_ = RandomFloats(rng, rows_ * width_, -2.0f, 2.0f);
    residual_ = RandomFloats(rng, rows_ * width_, -2.0f, 2.0f);
    weight_ = RandomFloats(rng, width_, 0.5f, 1.5f);
  }
  absl::Status Prepare(Backend& backend) override {
    COIL_ASSIGN_OR_RETURN(d_x_, DeviceArray::FromFloats(backend, x_));
    COIL_ASSIGN_OR_RETURN(d_res_, DeviceArray::FromFloats(backend, residual_));
    COIL_ASSIGN_OR_RETURN(d_w_, DeviceArray::FromFloats(backend, weight_));
    COIL_ASSIGN_OR_RETURN(d_out_, DeviceArray::FromFloats(backend, residual_, out_dtype_));
    return absl::OkStatus();
  }
  absl::Status Launch(Backend& backend) override {
    const Device dev = backend.device();
    return backend.AddRmsNorm(
        with_x_ ? Tensor(d_x_->data(), DType::kF32, {rows_, width_}, dev) : Tensor(),
        Tensor(d_w_->data(), DType::kF32, {width_}, dev), 1e-5f,
        Tensor(d_res_->data(), DType::kF32, {rows_, width_}, dev),
        Tensor((out_is_x_ ? d_x_ : d_out_)->data(), out_dtype_, {rows_, width_}, dev));
  }
  absl::StatusOr<OpResult> Collect() override {
    OpResult r;
    COIL_ASSIGN_OR_RETURN(auto bytes, (out_is_x_ ? d_x_ : d_out_)->Read());
    std::vector<float> out = Decode(bytes, out_dtype_);
    COIL_ASSIGN_OR_RETURN(auto res, d_res_->ReadFloats());
    r.outputs.emplace_back("out", std::move(out));
    r.outputs.emplace_back("residual", std::move(res));
    return r;
  }
  double flops() const override { return 4.0 * rows_ * width_; }
  double bytes() const override { return 4.0 * rows_ * width_ * 4; }

 private:
  int64_t rows_, width_;
  bool with_x_, out_is_x_;
  DType out_dtype_;
  std::vector<float> x_, residual_, weight_;
  std::optional<DeviceArray> d_x_, d_res_, d_w_, d_out_;
};

// ---------------------------------------------------------------- Matmul
class MatmulCase : public OpCase {
 public:
  // x_stride_pad > 0: x is columns [2, 2 + k) of an [m, k + x_stride_pad] matrix (strided
  // rows starting off any 16-byte boundary, as slices of in_proj's output are).
  // x_dtype kBF16 (with bf16 weights): x comes as bf16 rows.
  MatmulCase(DType dtype, int64_t m, int64_t n, int64_t k, int64_t y_stride_pad = 0,
             int64_t x_stride_pad = 0, DType x_dtype = DType::kF32)
      : dtype_(dtype), x_dtype_(x_dtype), m_(m), n_(n), k_(k), pad_(y_stride_pad),
        xpad_(x_stride_pad) {}
  std::string Op() const override { return BackendOpName(BackendOp::kMatmul); }
  std::string Params() const override {
    return absl::StrCat(DTypeName(dtype_), x_dtype_ == DType::kBF16 ? "_xbf16" : "", "_m", m_,
                        "_n", n_, "_k", k_, pad_ ? absl::StrCat("_ypad", pad_) : "",
                        xpad_ ? absl::StrCat("_xpad", xpad_) : "");
  }
  void MakeInputs(uint64_t seed) override {
    std::mt19937_64 rng(seed);
    x_ = RandomFloats(rng, m_ * (k_ + xpad_));
    w_ = RandomFloats(rng, n_ * k_, -0.1f, 0.1f);
  }
  absl::Status Prepare(Backend& backend) override {
    COIL_ASSIGN_OR_RETURN(d_x_, DeviceArray::FromFloats(backend, x_, x_dtype_));
    COIL_ASSIGN_OR_RETURN(d_w_, DeviceArray::FromFloats(backend, w_, dtype_));
    COIL_ASSIGN_OR_RETURN(d_y_, DeviceArray::FromFloats(
                                    backend, std::vector<float>(m_ * (n_ + pad_), 3.0f)));
    return absl::OkStatus();
  }
  absl::Status Launch(Backend& backend) override {
    const Device dev = backend.device();
    const Tensor x(d_x_->data(), x_dtype_, {m_, k_ + xpad_}, dev);
    return backend.Matmul(xpad_ ? x.Columns(2, k_) : x,
                          Tensor(d_w_->data(), dtype_, {n_, k_}, dev),
                          Tensor(d_y_->data(), DType::kF32, {m_, n_}, {n_ + pad_, 1}, dev));
  }
  absl::StatusOr<OpResult> Collect() override {
    OpResult r;
    COIL_ASSIGN_OR_RETURN(auto y, d_y_->ReadFloats());
    // The padding columns of y's strided rows are guards too.
    for (int64_t i = 0; i < m_; ++i) {
      for (int64_t j = n_; j < n_ + pad_; ++j) {
        if (y[i * (n_ + pad_) + j] != 3.0f) {
          r.guard_violations.push_back(absl::StrCat("y padding (", i, ", ", j, ") changed"));
        }
      }
    }
    r.outputs.emplace_back("y", std::move(y));
    return r;
  }
  double flops() const override { return 2.0 * m_ * n_ * k_; }
  double bytes() const override {
    return static_cast<double>(n_) * k_ * DTypeSize(dtype_) +
           static_cast<double>(m_) * k_ * DTypeSize(x_dtype_) + 4.0 * m_ * n_;
  }

 private:
  DType dtype_, x_dtype_;
  int64_t m_, n_, k_, pad_, xpad_;
  std::vector<float> x_, w_;
  std::optional<DeviceArray> d_x_, d_w_, d_y_;
};

// How a case's batch mixes its sequences (beyond the run lengths).
struct BatchMix {
  // Resuming sequences start at a random position in [0, max_start]: chunk boundaries then
  // fall inside runs and the first chunk of a run is short.
  int32_t max_start = 40;
  // Sequence s is fresh when s % fresh_every == 0 (0: only the first one).
  int fresh_every = 0;
  std::string Name() const {
    return absl::StrCat(max_start != 40 ? absl::StrCat("_pos", max_start) : "",
                        fresh_every != 0 ? absl::StrCat("_fresh", fresh_every) : "");
  }
};

// A batch of `runs` on shuffled slots of a pool of `state_rows` rows, fresh and resuming as
// `mix` says; fresh sequences start at position 0.
// A run of 0 in `runs` stands for a padding entry: one token on the scratch row (slot
// state_rows), fresh, as a CUDA-graph batch pads with.
RecurrentBatch MakeBatch(std::mt19937_64& rng, const std::vector<int32_t>& runs,
                         int state_rows, const BatchMix& mix = {}) {
  RecurrentBatch batch;
  const std::vector<int32_t> slots =
      ShuffledSlots(rng, static_cast<int>(runs.size()), state_rows);
  std::uniform_int_distribution<int32_t> pos(0, mix.max_start);
  for (size_t s = 0; s < runs.size(); ++s) {
    if (runs[s] == 0) {
      batch.Add(1, state_rows, true, 0);
      continue;
    }
    const bool fresh = mix.fresh_every == 0 ? s == 0 : s % mix.fresh_every == 0;
    batch.Add(runs[s], slots[s], fresh, fresh ? 0 : pos(rng));
  }
  return batch;
}

// Compares a read-back state pool [rows + 1, row_floats] with its initial contents:
// rows the batch used go to `outputs`; every other row must be unchanged, bit for bit.
void SplitStateRows(const std::string& name, const std::vector<float>& initial,
                    const std::vector<float>& now, int64_t row_floats,
                    const RecurrentBatch& batch, OpResult& r) {
  const int64_t rows = static_cast<int64_t>(now.size()) / row_floats;
  std::vector<float> used;
  for (int64_t row = 0; row < rows; ++row) {
    const bool listed =
        std::find(batch.slots.begin(), batch.slots.end(), row) != batch.slots.end();
    // The scratch row's contents are unspecified once padding entries used it (a device
    // backend may write it); otherwise it is a guard like any row outside the batch.
    if (listed && row == rows - 1) continue;
    const bool in_batch = listed;
    const float* a = now.data() + row * row_floats;
    const float* b = initial.data() + row * row_floats;
    if (in_batch) {
      used.insert(used.end(), a, a + row_floats);
    } else if (std::memcmp(a, b, row_floats * sizeof(float)) != 0) {
      r.guard_violations.push_back(absl::StrCat(name, " row ", row, row == rows - 1 ? " (scratch)" : "",
                                                " is not in the batch but changed"));
    }
  }
  r.outputs.emplace_back(name, std::move(used));
}

// Long lists (hundreds of sequences) are abbreviated: their first runs, count and sum.
std::string RunsName(const std::vector<int32_t>& runs) {
  if (runs.size() <= 16) return absl::StrJoin(runs, "-");
  int64_t total = 0;
  for (int32_t r : runs) total += r;
  return absl::StrCat(absl::StrJoin(runs.begin(), runs.begin() + 6, "-"), "-etc_n", runs.size(),
                      "_sum", total);
}

// `n` runs repeating `pattern`.
std::vector<int32_t> CycledRuns(int n, const std::vector<int32_t>& pattern) {
  std::vector<int32_t> runs(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) runs[i] = pattern[i % pattern.size()];
  return runs;
}

// ---------------------------------------------------------------- CausalConv1d
class CausalConv1dCase : public OpCase {
 public:
  CausalConv1dCase(int64_t channels, int64_t width, std::vector<int32_t> runs, int state_rows,
                   BatchMix mix = {})
      : channels_(channels),
        width_(width),
        runs_(std::move(runs)),
        state_rows_(state_rows),
        mix_(mix) {}
  std::string Op() const override { return BackendOpName(BackendOp::kCausalConv1d); }
  std::string Params() const override {
    return absl::StrCat("f32_c", channels_, "_w", width_, "_runs", RunsName(runs_), "_rows",
                        state_rows_, mix_.Name());
  }
  void MakeInputs(uint64_t seed) override {
    std::mt19937_64 rng(seed);
    batch_ = MakeBatch(rng, runs_, state_rows_, mix_);
    rows_ = batch_.cu_seqlens.back();
    // x is the middle columns of a wider matrix (in_proj's output), so its rows are strided.
    packed_ = RandomFloats(rng, rows_ * (channels_ + 9), -2.0f, 2.0f);
    weight_ = RandomFloats(rng, channels_ * width_);
    bias_ = RandomFloats(rng, channels_);
    state_ = RandomFloats(rng, (state_rows_ + 1) * (width_ - 1) * channels_);
  }
  absl::Status Prepare(Backend& backend) override {
    COIL_ASSIGN_OR_RETURN(d_x_, DeviceArray::FromFloats(backend, packed_));
    COIL_ASSIGN_OR_RETURN(d_w_, DeviceArray::FromFloats(backend, weight_));
    COIL_ASSIGN_OR_RETURN(d_b_, DeviceArray::FromFloats(backend, bias_));
    COIL_ASSIGN_OR_RETURN(d_state_, DeviceArray::FromFloats(backend, state_));
    COIL_ASSIGN_OR_RETURN(
        d_out_, DeviceArray::FromFloats(backend, std::vector<float>(rows_ * channels_, 5.0f)));
    return absl::OkStatus();
  }
  absl::Status Launch(Backend& backend) override {
    const Device dev = backend.device();
    const Tensor packed(d_x_->data(), DType::kF32, {rows_, channels_ + 9}, dev);
    return backend.CausalConv1d(
        packed.Columns(4, channels_), Tensor(d_w_->data(), DType::kF32, {channels_, width_}, dev),
        Tensor(d_b_->data(), DType::kF32, {channels_}, dev), batch_,
        Tensor(d_state_->data(), DType::kF32, {state_rows_ + 1, width_ - 1, channels_}, dev),
        Tensor(d_out_->data(), DType::kF32, {rows_, channels_}, dev));
  }
  absl::StatusOr<OpResult> Collect() override {
    OpResult r;
    COIL_ASSIGN_OR_RETURN(auto out, d_out_->ReadFloats());
    COIL_ASSIGN_OR_RETURN(auto state, d_state_->ReadFloats());
    r.outputs.emplace_back("out", std::move(out));
    SplitStateRows("conv_state", state_, state, (width_ - 1) * channels_, batch_, r);
    return r;
  }
  double flops() const override { return 2.0 * rows_ * channels_ * width_ + 5.0 * rows_ * channels_; }
  double bytes() const override {
    return 4.0 * (2 * rows_ * channels_ + 2 * runs_.size() * (width_ - 1) * channels_);
  }

 private:
  int64_t channels_, width_;
  std::vector<int32_t> runs_;
  int state_rows_;
  BatchMix mix_;
  RecurrentBatch batch_;
  int64_t rows_ = 0;
  std::vector<float> packed_, weight_, bias_, state_;
  std::optional<DeviceArray> d_x_, d_w_, d_b_, d_state_, d_out_;
};

// ---------------------------------------------------------------- SsmScan
struct SsmShape {
  int64_t heads, headdim, d_state, groups, chunk;
  bool dt_limit = false;
  // SsmScanOptions::heads_per_group / first_head_in_group (0: heads split evenly); groups
  // must then be (first_head + heads - 1) / heads_per_group + 1.
  int64_t heads_per_group = 0, first_head = 0;
  // SsmScanOptions::bf16_products: the CUDA chunked path's tensor-core form.
  bool bf16_products = false;
  // The state pool's type: bf16 (rounded after every piece, fp32 within one) or f32.
  DType state_dtype = DType::kF32;
};

class SsmScanCase : public OpCase {
 public:
  SsmScanCase(SsmShape shape, std::vector<int32_t> runs, int state_rows, BatchMix mix = {})
      : s_(shape), runs_(std::move(runs)), state_rows_(state_rows), mix_(mix) {}
  std::string Op() const override { return BackendOpName(BackendOp::kSsmScan); }
  std::string Params() const override {
    return absl::StrCat(
        s_.bf16_products ? "bf16products_h" : "f32_h", s_.heads, "_p", s_.headdim, "_ds",
        s_.d_state, "_g", s_.groups, s_.state_dtype == DType::kBF16 ? "_statebf16" : "", "_chunk",
        s_.chunk, s_.dt_limit ? "_dtlimit" : "",
        s_.heads_per_group ? absl::StrCat("_hpg", s_.heads_per_group, "_first", s_.first_head)
                           : "",
        "_runs", RunsName(runs_), "_rows", state_rows_, mix_.Name());
  }
  // The chunked form differs from the recurrence by rounding only (exp of cumulative sums
  // against products of exps): NMSE about 1e-12 on these inputs; the default bound holds.
  // With bf16 products every product operand is rounded to bf16 (the host emulation of the
  // tiles measures an NMSE of 2e-6 to 4e-6); a misplaced tile or operand gives about 1.
  // A bf16 state rounded from fp32 values that differ in their last bits (chunked form
  // against the recurrence) lands one bf16 step (2^-8 relative) apart now and then: NMSE
  // about 1e-7 on these inputs.
  double max_nmse() const override {
    if (s_.bf16_products) return 5e-5;
    return s_.state_dtype == DType::kBF16 ? 1e-5 : OpCase::max_nmse();
  }
  void MakeInputs(uint64_t seed) override {
    std::mt19937_64 rng(seed);
    batch_ = MakeBatch(rng, runs_, state_rows_, mix_);
    rows_ = batch_.cu_seqlens.back();
    width_ = s_.heads * s_.headdim + 2 * s_.groups * s_.d_state + s_.heads;
    // One packed row [x | B | C | dt], as the model slices it from conv and in_proj outputs.
    packed_ = RandomFloats(rng, rows_ * width_);
    a_log_ = RandomFloats(rng, s_.heads, 0.0f, 2.5f);
    d_ = RandomFloats(rng, s_.heads);
    dt_bias_ = RandomFloats(rng, s_.heads, -4.0f, -1.0f);
    state_ = RandomFloats(rng, (state_rows_ + 1) * s_.heads * s_.headdim * s_.d_state);
    state_ = Decode(Encode(state_, s_.state_dtype), s_.state_dtype);  // values the pool holds
  }
  absl::Status Prepare(Backend& backend) override {
    COIL_ASSIGN_OR_RETURN(d_packed_, DeviceArray::FromFloats(backend, packed_));
    COIL_ASSIGN_OR_RETURN(d_a_, DeviceArray::FromFloats(backend, a_log_));
    COIL_ASSIGN_OR_RETURN(d_d_, DeviceArray::FromFloats(backend, d_));
    COIL_ASSIGN_OR_RETURN(d_bias_, DeviceArray::FromFloats(backend, dt_bias_));
    COIL_ASSIGN_OR_RETURN(d_state_, DeviceArray::FromFloats(backend, state_, s_.state_dtype));
    // Poisoned: an element the op never writes stays NaN and fails the comparison.
    COIL_ASSIGN_OR_RETURN(
        d_y_, DeviceArray::FromFloats(backend, std::vector<float>(rows_ * s_.heads * s_.headdim,
                                                                  std::nanf(""))));
    return absl::OkStatus();
  }
  absl::Status Launch(Backend& backend) override {
    const Device dev = backend.device();
    const int64_t hp = s_.heads * s_.headdim, gn = s_.groups * s_.d_state;
    const Tensor packed(d_packed_->data(), DType::kF32, {rows_, width_}, dev);
    SsmScanOptions options;
    options.chunk_size = s_.chunk;
    if (s_.dt_limit) {
      options.dt_min = 0.02f;
      options.dt_max = 0.1f;
    }
    options.heads_per_group = s_.heads_per_group;
    options.first_head_in_group = s_.first_head;
    options.bf16_products = s_.bf16_products;
    return backend.SsmScan(
        packed.Columns(0, hp), packed.Columns(hp + 2 * gn, s_.heads),
        Tensor(d_a_->data(), DType::kF32, {s_.heads}, dev), packed.Columns(hp, gn),
        packed.Columns(hp + gn, gn), Tensor(d_d_->data(), DType::kF32, {s_.heads}, dev),
        Tensor(d_bias_->data(), DType::kF32, {s_.heads}, dev), options, batch_,
        Tensor(d_state_->data(), s_.state_dtype,
               {state_rows_ + 1, s_.heads, s_.headdim, s_.d_state}, dev),
        Tensor(d_y_->data(), DType::kF32, {rows_, hp}, dev));
  }
  absl::StatusOr<OpResult> Collect() override {
    OpResult r;
    COIL_ASSIGN_OR_RETURN(auto y, d_y_->ReadFloats());
    COIL_ASSIGN_OR_RETURN(auto state_bytes, d_state_->Read());
    r.outputs.emplace_back("y", std::move(y));
    SplitStateRows("ssm_state", state_, Decode(state_bytes, s_.state_dtype),
                   s_.heads * s_.headdim * s_.d_state, batch_, r);
    return r;
  }
  double flops() const override {
    // The recurrence's count: per token and head, 3 P N (update) + 2 P N (output).
    return 5.0 * rows_ * s_.heads * s_.headdim * s_.d_state;
  }
  double bytes() const override {
    return 2.0 * runs_.size() * s_.heads * s_.headdim * s_.d_state * DTypeSize(s_.state_dtype) +
           4.0 * rows_ * (2 * s_.heads * s_.headdim + 2 * s_.groups * s_.d_state + s_.heads);
  }

 private:
  SsmShape s_;
  std::vector<int32_t> runs_;
  int state_rows_;
  BatchMix mix_;
  RecurrentBatch batch_;
  int64_t rows_ = 0, width_ = 0;
  std::vector<float> packed_, a_log_, d_, dt_bias_, state_;
  std::optional<DeviceArray> d_packed_, d_a_, d_d_, d_bias_, d_state_, d_y_;
};

// ---------------------------------------------------------------- GatedSumSquares
class GatedSumSquaresCase : public OpCase {
 public:
  // views: gated aliases y, and sumsq is columns [1, 1 + groups) of a [rows, groups + 2]
  // matrix (as the model slices one rank's groups out of the all-reduced sums).
  GatedSumSquaresCase(int64_t rows, int64_t width, int64_t groups, bool views = false)
      : rows_(rows), width_(width), groups_(groups), views_(views) {}
  std::string Op() const override { return BackendOpName(BackendOp::kGatedSumSquares); }
  std::string Params() const override {
    return absl::StrCat("f32_t", rows_, "_e", width_, "_g", groups_, views_ ? "_views" : "");
  }
  int64_t sumsq_width() const { return views_ ? groups_ + 2 : groups_; }
  void MakeInputs(uint64_t seed) override {
    std::mt19937_64 rng(seed);
    y_ = RandomFloats(rng, rows_ * width_, -2.0f, 2.0f);
    z_ = RandomFloats(rng, rows_ * (width_ + 3), -4.0f, 4.0f);
  }
  absl::Status Prepare(Backend& backend) override {
    COIL_ASSIGN_OR_RETURN(d_y_, DeviceArray::FromFloats(backend, y_));
    COIL_ASSIGN_OR_RETURN(d_z_, DeviceArray::FromFloats(backend, z_));
    COIL_ASSIGN_OR_RETURN(d_g_, DeviceArray::FromFloats(backend, std::vector<float>(rows_ * width_)));
    COIL_ASSIGN_OR_RETURN(
        d_s_, DeviceArray::FromFloats(backend, std::vector<float>(rows_ * sumsq_width(), -3.0f)));
    return absl::OkStatus();
  }
  absl::Status Launch(Backend& backend) override {
    const Device dev = backend.device();
    const Tensor zp(d_z_->data(), DType::kF32, {rows_, width_ + 3}, dev);
    const Tensor sumsq(d_s_->data(), DType::kF32, {rows_, sumsq_width()}, dev);
    return backend.GatedSumSquares(
        Tensor(d_y_->data(), DType::kF32, {rows_, width_}, dev), zp.Columns(3, width_), groups_,
        Tensor((views_ ? d_y_ : d_g_)->data(), DType::kF32, {rows_, width_}, dev),
        views_ ? sumsq.Columns(1, groups_) : sumsq);
  }
  absl::StatusOr<OpResult> Collect() override {
    OpResult r;
    COIL_ASSIGN_OR_RETURN(auto g, (views_ ? d_y_ : d_g_)->ReadFloats());
    COIL_ASSIGN_OR_RETURN(auto s, d_s_->ReadFloats());
    r.outputs.emplace_back("gated", std::move(g));
    r.outputs.emplace_back("sumsq", std::move(s));
    return r;
  }
  double flops() const override { return 8.0 * rows_ * width_; }
  double bytes() const override { return 12.0 * rows_ * width_; }

 private:
  int64_t rows_, width_, groups_;
  bool views_;
  std::vector<float> y_, z_;
  std::optional<DeviceArray> d_y_, d_z_, d_g_, d_s_;
};

// ---------------------------------------------------------------- GatedNormApply
class GatedNormApplyCase : public OpCase {
 public:
  // views: out aliases gated, and sumsq is columns [2, 2 + groups) of a [rows, groups + 3]
  // matrix.
  // out_dtype kBF16: out rounded to bf16 (out_proj's input), in its own buffer.
  GatedNormApplyCase(int64_t rows, int64_t width, int64_t groups, int64_t group_size,
                     bool views = false, DType out_dtype = DType::kF32)
      : rows_(rows), width_(width), groups_(groups), group_size_(group_size), views_(views),
        out_dtype_(out_dtype) {}
  std::string Op() const override { return BackendOpName(BackendOp::kGatedNormApply); }
  std::string Params() const override {
    return absl::StrCat("f32_t", rows_, "_e", width_, "_g", groups_, "_gs", group_size_,
                        views_ ? "_views" : "", out_dtype_ == DType::kBF16 ? "_outbf16" : "");
  }
  bool out_is_gated() const { return views_ && out_dtype_ == DType::kF32; }
  int64_t sumsq_width() const { return views_ ? groups_ + 3 : groups_; }
  void MakeInputs(uint64_t seed) override {
    std::mt19937_64 rng(seed);
    gated_ = RandomFloats(rng, rows_ * width_, -2.0f, 2.0f);
    sumsq_ = RandomFloats(rng, rows_ * sumsq_width(), 1.0f, 50.0f);
    weight_ = RandomFloats(rng, width_, 0.5f, 1.5f);
  }
  absl::Status Prepare(Backend& backend) override {
    COIL_ASSIGN_OR_RETURN(d_g_, DeviceArray::FromFloats(backend, gated_));
    COIL_ASSIGN_OR_RETURN(d_s_, DeviceArray::FromFloats(backend, sumsq_));
    COIL_ASSIGN_OR_RETURN(d_w_, DeviceArray::FromFloats(backend, weight_));
    COIL_ASSIGN_OR_RETURN(
        d_o_, DeviceArray::FromFloats(backend, std::vector<float>(rows_ * width_), out_dtype_));
    return absl::OkStatus();
  }
  absl::Status Launch(Backend& backend) override {
    const Device dev = backend.device();
    const Tensor sumsq(d_s_->data(), DType::kF32, {rows_, sumsq_width()}, dev);
    return backend.GatedNormApply(
        Tensor(d_g_->data(), DType::kF32, {rows_, width_}, dev),
        views_ ? sumsq.Columns(2, groups_) : sumsq,
        Tensor(d_w_->data(), DType::kF32, {width_}, dev), group_size_, 1e-5f,
        Tensor((out_is_gated() ? d_g_ : d_o_)->data(), out_dtype_, {rows_, width_}, dev));
  }
  absl::StatusOr<OpResult> Collect() override {
    OpResult r;
    COIL_ASSIGN_OR_RETURN(auto bytes, (out_is_gated() ? d_g_ : d_o_)->Read());
    std::vector<float> o = Decode(bytes, out_dtype_);
    r.outputs.emplace_back("out", std::move(o));
    return r;
  }
  double flops() const override { return 2.0 * rows_ * width_; }
  double bytes() const override { return 8.0 * rows_ * width_; }

 private:
  int64_t rows_, width_, groups_, group_size_;
  bool views_;
  DType out_dtype_;
  std::vector<float> gated_, sumsq_, weight_;
  std::optional<DeviceArray> d_g_, d_s_, d_w_, d_o_;
};

// ---------------------------------------------------------------- GatedRmsNorm
class GatedRmsNormCase : public OpCase {
 public:
  // out_is_y: out aliases y (f32); out_dtype kBF16: out_proj's bf16 rows. z is strided.
  GatedRmsNormCase(int64_t rows, int64_t width, int64_t groups, bool out_is_y,
                   DType out_dtype = DType::kF32)
      : rows_(rows), width_(width), groups_(groups), out_is_y_(out_is_y), out_dtype_(out_dtype) {}
  std::string Op() const override { return BackendOpName(BackendOp::kGatedRmsNorm); }
  std::string Params() const override {
    return absl::StrCat("f32_t", rows_, "_e", width_, "_g", groups_, out_is_y_ ? "_outisy" : "",
                        out_dtype_ == DType::kBF16 ? "_outbf16" : "");
  }
  void MakeInputs(uint64_t seed) override {
    std::mt19937_64 rng(seed);
    y_ = RandomFloats(rng, rows_ * width_, -2.0f, 2.0f);
    z_ = RandomFloats(rng, rows_ * (width_ + 3), -4.0f, 4.0f);
    weight_ = RandomFloats(rng, width_, 0.5f, 1.5f);
  }
  absl::Status Prepare(Backend& backend) override {
    COIL_ASSIGN_OR_RETURN(d_y_, DeviceArray::FromFloats(backend, y_));
    COIL_ASSIGN_OR_RETURN(d_z_, DeviceArray::FromFloats(backend, z_));
    COIL_ASSIGN_OR_RETURN(d_w_, DeviceArray::FromFloats(backend, weight_));
    COIL_ASSIGN_OR_RETURN(
        d_o_, DeviceArray::FromFloats(backend, std::vector<float>(rows_ * width_, std::nanf("")),
                                      out_dtype_));
    return absl::OkStatus();
  }
  absl::Status Launch(Backend& backend) override {
    const Device dev = backend.device();
    const Tensor zp(d_z_->data(), DType::kF32, {rows_, width_ + 3}, dev);
    return backend.GatedRmsNorm(
        Tensor(d_y_->data(), DType::kF32, {rows_, width_}, dev), zp.Columns(3, width_),
        Tensor(d_w_->data(), DType::kF32, {width_}, dev), groups_, 1e-5f,
        Tensor((out_is_y_ ? d_y_ : d_o_)->data(), out_dtype_, {rows_, width_}, dev));
  }
  absl::StatusOr<OpResult> Collect() override {
    OpResult r;
    COIL_ASSIGN_OR_RETURN(auto bytes, (out_is_y_ ? d_y_ : d_o_)->Read());
    r.outputs.emplace_back("out", Decode(bytes, out_dtype_));
    return r;
  }
  double flops() const override { return 10.0 * rows_ * width_; }
  double bytes() const override { return 16.0 * rows_ * width_; }

 private:
  int64_t rows_, width_, groups_;
  bool out_is_y_;
  DType out_dtype_;
  std::vector<float> y_, z_, weight_;
  std::optional<DeviceArray> d_y_, d_z_, d_w_, d_o_;
};

// ---------------------------------------------------------------- MixerDecode(SumSquares)
struct MixerShape {
  int64_t heads, headdim, d_state, groups, width;
  DType state_dtype = DType::kF32;  // the SSM state pool's type
  // The state at about 1e-39 (fp32 and bf16 denormals) and dt = softplus(about -129), 0 on
  // every path: the decay is 1, and the step must keep every denormal as it is, where a
  // rounding that flushes them (vcvtneps2bf16's) would zero them.
  bool denormal_state = false;
};

// MixerDecodeSumSquares in place of MixerDecode when `sums`; heads_per_group and first_head
// as SsmScanOptions takes them (0: the heads hold their groups whole).
struct MixerSums {
  bool sums = false;
  int64_t heads_per_group = 0, first_head = 0;
};

class MixerDecodeCase : public OpCase {
 public:
  // runs: 1 (a decode token) or 0 (a padding entry on the scratch row).
  MixerDecodeCase(MixerShape shape, std::vector<int32_t> runs, int state_rows,
                  DType out_dtype = DType::kF32, BatchMix mix = {}, MixerSums sums = {})
      : s_(shape),
        runs_(std::move(runs)),
        state_rows_(state_rows),
        out_dtype_(out_dtype),
        mix_(mix),
        sums_(sums) {}
  std::string Op() const override {
    return BackendOpName(sums_.sums ? BackendOp::kMixerDecodeSumSquares : BackendOp::kMixerDecode);
  }
  std::string Params() const override {
    return absl::StrCat(out_dtype_ == DType::kBF16 ? "outbf16" : "f32", "_h", s_.heads, "_p",
                        s_.headdim, "_ds", s_.d_state, "_g", s_.groups, "_w", s_.width,
                        s_.state_dtype == DType::kBF16 ? "_statebf16" : "",
                        s_.denormal_state ? "_denormal" : "",
                        sums_.heads_per_group > 0 ? absl::StrCat("_hpg", sums_.heads_per_group,
                                                                 "_first", sums_.first_head)
                                                  : "",
                        "_runs", RunsName(runs_), "_rows", state_rows_, mix_.Name());
  }
  // Both sides round out (or a bf16 state) to bf16 from f32 values that may differ in their
  // last bits (the reference's sums run in another order), which can move an element by
  // one bf16 step.
  double max_nmse() const override {
    return out_dtype_ == DType::kBF16 || s_.state_dtype == DType::kBF16 ? 1e-5
                                                                         : OpCase::max_nmse();
  }
  void MakeInputs(uint64_t seed) override {
    std::mt19937_64 rng(seed);
    batch_ = MakeBatch(rng, runs_, state_rows_, mix_);
    rows_ = batch_.cu_seqlens.back();
    e_ = s_.heads * s_.headdim;
    c_ = e_ + 2 * s_.groups * s_.d_state;
    // One in_proj row [z | xbc | dt] and two columns of padding, as the model slices it.
    row_width_ = e_ + c_ + s_.heads + 2;
    packed_ = RandomFloats(rng, rows_ * row_width_, -2.0f, 2.0f);
    conv_w_ = RandomFloats(rng, c_ * s_.width);
    conv_b_ = RandomFloats(rng, c_);
    a_log_ = RandomFloats(rng, s_.heads, 0.0f, 2.5f);
    d_ = RandomFloats(rng, s_.heads);
    dt_bias_ = s_.denormal_state ? RandomFloats(rng, s_.heads, -130.0f, -128.0f)
                                 : RandomFloats(rng, s_.heads, -4.0f, -1.0f);
    norm_w_ = RandomFloats(rng, e_, 0.5f, 1.5f);
    conv_state_ = RandomFloats(rng, (state_rows_ + 1) * (s_.width - 1) * c_);
    ssm_state_ = RandomFloats(rng, (state_rows_ + 1) * e_ * s_.d_state);
    if (s_.denormal_state) {
      for (float& v : ssm_state_) v *= 2e-39f;
    }
    ssm_state_ = Decode(Encode(ssm_state_, s_.state_dtype), s_.state_dtype);
  }
  absl::Status Prepare(Backend& backend) override {
    COIL_ASSIGN_OR_RETURN(d_packed_, DeviceArray::FromFloats(backend, packed_));
    COIL_ASSIGN_OR_RETURN(d_conv_w_, DeviceArray::FromFloats(backend, conv_w_));
    COIL_ASSIGN_OR_RETURN(d_conv_b_, DeviceArray::FromFloats(backend, conv_b_));
    COIL_ASSIGN_OR_RETURN(d_a_, DeviceArray::FromFloats(backend, a_log_));
    COIL_ASSIGN_OR_RETURN(d_d_, DeviceArray::FromFloats(backend, d_));
    COIL_ASSIGN_OR_RETURN(d_bias_, DeviceArray::FromFloats(backend, dt_bias_));
    COIL_ASSIGN_OR_RETURN(d_norm_w_, DeviceArray::FromFloats(backend, norm_w_));
    COIL_ASSIGN_OR_RETURN(d_conv_state_, DeviceArray::FromFloats(backend, conv_state_));
    COIL_ASSIGN_OR_RETURN(d_ssm_state_, DeviceArray::FromFloats(backend, ssm_state_, s_.state_dtype));
    // Poisoned: xbc and y are scratch, out must be written everywhere.
    const float nan = std::nanf("");
    COIL_ASSIGN_OR_RETURN(d_xbc_, DeviceArray::FromFloats(backend, std::vector<float>(rows_ * c_, nan)));
    COIL_ASSIGN_OR_RETURN(d_y_, DeviceArray::FromFloats(backend, std::vector<float>(rows_ * e_, nan)));
    COIL_ASSIGN_OR_RETURN(
        d_out_, DeviceArray::FromFloats(backend, std::vector<float>(rows_ * e_, nan), out_dtype_));
    // sumsq: the view of columns [1, 1 + groups) of a wider buffer; the two columns outside
    // it must keep their value.
    std::vector<float> sums(rows_ * (s_.groups + 2), nan);
    for (int64_t t = 0; t < rows_; ++t) {
      sums[t * (s_.groups + 2)] = -3.0f;
      sums[t * (s_.groups + 2) + s_.groups + 1] = -5.0f;
    }
    COIL_ASSIGN_OR_RETURN(d_sums_, DeviceArray::FromFloats(backend, sums));
    return absl::OkStatus();
  }
  absl::Status Launch(Backend& backend) override {
    const Device dev = backend.device();
    const Tensor packed(d_packed_->data(), DType::kF32, {rows_, row_width_}, dev);
    const MixerWeights weights{
        Tensor(d_conv_w_->data(), DType::kF32, {c_, s_.width}, dev),
        Tensor(d_conv_b_->data(), DType::kF32, {c_}, dev),
        Tensor(d_a_->data(), DType::kF32, {s_.heads}, dev),
        Tensor(d_d_->data(), DType::kF32, {s_.heads}, dev),
        Tensor(d_bias_->data(), DType::kF32, {s_.heads}, dev),
        Tensor(d_norm_w_->data(), DType::kF32, {e_}, dev)};
    SsmScanOptions options;
    options.chunk_size = 8;
    options.heads_per_group = sums_.heads_per_group;
    options.first_head_in_group = sums_.first_head;
    const Tensor conv_state(d_conv_state_->data(), DType::kF32, {state_rows_ + 1, s_.width - 1, c_},
                            dev);
    const Tensor ssm_state(d_ssm_state_->data(), s_.state_dtype,
                           {state_rows_ + 1, s_.heads, s_.headdim, s_.d_state}, dev);
    const Tensor xbc(d_xbc_->data(), DType::kF32, {rows_, c_}, dev);
    const Tensor y(d_y_->data(), DType::kF32, {rows_, e_}, dev);
    if (sums_.sums) {
      const Tensor sums(d_sums_->data(), DType::kF32, {rows_, s_.groups + 2}, dev);
      return backend.MixerDecodeSumSquares(
          packed.Columns(e_, c_), packed.Columns(e_ + c_, s_.heads), packed.Columns(0, e_), weights,
          options, batch_, conv_state, ssm_state, xbc, y, sums.Columns(1, s_.groups));
    }
    return backend.MixerDecode(packed.Columns(e_, c_), packed.Columns(e_ + c_, s_.heads),
                               packed.Columns(0, e_), weights, options, 1e-5f, batch_, conv_state,
                               ssm_state, xbc, y,
                               Tensor(d_out_->data(), out_dtype_, {rows_, e_}, dev));
  }
  absl::StatusOr<OpResult> Collect() override {
    OpResult r;
    COIL_ASSIGN_OR_RETURN(auto conv_state, d_conv_state_->ReadFloats());
    COIL_ASSIGN_OR_RETURN(auto ssm_state_bytes, d_ssm_state_->Read());
    const std::vector<float> ssm_state = Decode(ssm_state_bytes, s_.state_dtype);
    if (sums_.sums) {  // the gated values over y, and the sums
      COIL_ASSIGN_OR_RETURN(auto gated, d_y_->ReadFloats());
      COIL_ASSIGN_OR_RETURN(auto sums, d_sums_->ReadFloats());
      r.outputs.emplace_back("gated", std::move(gated));
      r.outputs.emplace_back("sumsq", std::move(sums));
    } else {
      COIL_ASSIGN_OR_RETURN(auto out, d_out_->Read());
      r.outputs.emplace_back("out", Decode(out, out_dtype_));
    }
    SplitStateRows("conv_state", conv_state_, conv_state, (s_.width - 1) * c_, batch_, r);
    SplitStateRows("ssm_state", ssm_state_, ssm_state, e_ * s_.d_state, batch_, r);
    return r;
  }
  double flops() const override {
    return rows_ * (2.0 * c_ * s_.width + 5.0 * e_ * s_.d_state + 10.0 * e_);
  }
  double bytes() const override {
    // The states read and written once, the inputs and out read or written once.
    return 2.0 * runs_.size() * e_ * s_.d_state * DTypeSize(s_.state_dtype) +
           4.0 * (2.0 * runs_.size() * (s_.width - 1) * c_ + rows_ * (c_ + s_.heads + 2.0 * e_)) +
           rows_ * e_ * (out_dtype_ == DType::kBF16 ? 2.0 : 4.0);
  }

 private:
  MixerShape s_;
  std::vector<int32_t> runs_;
  int state_rows_;
  DType out_dtype_;
  BatchMix mix_;
  MixerSums sums_;
  RecurrentBatch batch_;
  int64_t rows_ = 0, e_ = 0, c_ = 0, row_width_ = 0;
  std::vector<float> packed_, conv_w_, conv_b_, a_log_, d_, dt_bias_, norm_w_, conv_state_,
      ssm_state_;
  std::optional<DeviceArray> d_packed_, d_conv_w_, d_conv_b_, d_a_, d_d_, d_bias_, d_norm_w_,
      d_conv_state_, d_ssm_state_, d_xbc_, d_y_, d_out_, d_sums_;
};

// ---------------------------------------------------------------- Argmax
class ArgmaxCase : public OpCase {
 public:
  // nans: NaN at column 0 and at random columns of every row (NaN never wins), and in
  // odd rows at the column right after the maximum.
  ArgmaxCase(int64_t rows, int64_t vocab, bool nans = false)
      : rows_(rows), vocab_(vocab), nans_(nans) {}
  std::string Op() const override { return BackendOpName(BackendOp::kArgmax); }
  std::string Params() const override {
    return absl::StrCat("f32_t", rows_, "_v", vocab_, nans_ ? "_nans" : "");
  }
  void MakeInputs(uint64_t seed) override {
    std::mt19937_64 rng(seed);
    logits_ = RandomFloats(rng, rows_ * vocab_, -10.0f, 10.0f);
    // Plant ties of the row maximum at a later index in every other row: the lower index
    // must win.
    std::uniform_int_distribution<int64_t> col(0, vocab_ - 1);
    for (int64_t t = 0; t < rows_; t += 2) {
      const int64_t a = col(rng), b = col(rng);
      logits_[t * vocab_ + a] = 11.0f;
      logits_[t * vocab_ + b] = 11.0f;
    }
    if (!nans_) return;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t t = 0; t < rows_; ++t) {
      float* row = &logits_[t * vocab_];
      const int64_t best = std::max_element(row, row + vocab_) - row;
      for (int i = 0; i < 5; ++i) {
        const int64_t c = col(rng);
        if (c != best) row[c] = nan;
      }
      if (best != 0) row[0] = nan;
      if (t % 2 == 1 && best + 1 < vocab_) row[best + 1] = nan;
    }
  }
  absl::Status Prepare(Backend& backend) override {
    COIL_ASSIGN_OR_RETURN(d_l_, DeviceArray::FromFloats(backend, logits_));
    COIL_ASSIGN_OR_RETURN(d_i_, DeviceArray::FromInts(backend, std::vector<int32_t>(rows_, -1)));
    COIL_ASSIGN_OR_RETURN(d_v_, DeviceArray::FromFloats(backend, std::vector<float>(rows_)));
    return absl::OkStatus();
  }
  absl::Status Launch(Backend& backend) override {
    const Device dev = backend.device();
    return backend.Argmax(Tensor(d_l_->data(), DType::kF32, {rows_, vocab_}, dev),
                          Tensor(d_i_->data(), DType::kI32, {rows_}, dev),
                          Tensor(d_v_->data(), DType::kF32, {rows_}, dev));
  }
  absl::StatusOr<OpResult> Collect() override {
    OpResult r;
    COIL_ASSIGN_OR_RETURN(auto ids, d_i_->ReadInts());
    COIL_ASSIGN_OR_RETURN(auto v, d_v_->ReadFloats());
    r.outputs.emplace_back("ids", std::vector<float>(ids.begin(), ids.end()));
    r.outputs.emplace_back("values", std::move(v));
    return r;
  }
  // Indices must match exactly: NMSE 0.
  double max_nmse() const override { return 0.0; }
  double flops() const override { return 1.0 * rows_ * vocab_; }
  double bytes() const override { return 4.0 * rows_ * vocab_; }

 private:
  int64_t rows_, vocab_;
  bool nans_;
  std::vector<float> logits_;
  std::optional<DeviceArray> d_l_, d_i_, d_v_;
};


// ---------------------------------------------------------------- GumbelArgmax
class GumbelArgmaxCase : public OpCase {
 public:
  // pad: the logits are a column view of a row 3 columns wider (padded vocab ids dropped);
  // nans: NaN at random columns of every row, and row 0 is all -inf (id 0, score -inf).
  GumbelArgmaxCase(int64_t rows, int64_t vocab, int64_t vocab_offset, bool pad, bool nans)
      : rows_(rows), vocab_(vocab), offset_(vocab_offset), pad_(pad), nans_(nans) {}
  std::string Op() const override { return BackendOpName(BackendOp::kGumbelArgmax); }
  std::string Params() const override {
    return absl::StrCat("f32_t", rows_, "_v", vocab_, "_off", offset_, pad_ ? "_pad" : "",
                        nans_ ? "_nans" : "");
  }
  void MakeInputs(uint64_t seed) override {
    std::mt19937_64 rng(seed);
    logits_ = RandomFloats(rng, rows_ * width(), -10.0f, 10.0f);
    temperatures_.resize(rows_);
    seeds_.resize(2 * rows_);
    steps_.resize(rows_);
    std::uniform_real_distribution<float> temperature(0.05f, 3.0f);
    for (int64_t t = 0; t < rows_; ++t) {
      temperatures_[t] = temperature(rng);
      const uint64_t s = rng();
      seeds_[2 * t] = static_cast<int32_t>(static_cast<uint32_t>(s));
      seeds_[2 * t + 1] = static_cast<int32_t>(static_cast<uint32_t>(s >> 32));
      steps_[t] = static_cast<int32_t>(rng() % 100000);
    }
    if (!nans_) return;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::uniform_int_distribution<int64_t> col(0, vocab_ - 1);
    for (int64_t t = 0; t < rows_; ++t) {
      for (int i = 0; i < 7; ++i) logits_[t * width() + col(rng)] = nan;
    }
    for (int64_t j = 0; j < vocab_; ++j) {
      logits_[j] = j % 5 == 0 ? nan : -std::numeric_limits<float>::infinity();
    }
  }
  absl::Status Prepare(Backend& backend) override {
    COIL_ASSIGN_OR_RETURN(d_l_, DeviceArray::FromFloats(backend, logits_));
    COIL_ASSIGN_OR_RETURN(d_t_, DeviceArray::FromFloats(backend, temperatures_));
    COIL_ASSIGN_OR_RETURN(d_s_, DeviceArray::FromInts(backend, seeds_));
    COIL_ASSIGN_OR_RETURN(d_k_, DeviceArray::FromInts(backend, steps_));
    COIL_ASSIGN_OR_RETURN(d_i_, DeviceArray::FromInts(backend, std::vector<int32_t>(rows_, -1)));
    COIL_ASSIGN_OR_RETURN(d_o_,
                          DeviceArray::FromInts(backend, std::vector<int32_t>(2 * rows_, -1)));
    return absl::OkStatus();
  }
  absl::Status Launch(Backend& backend) override {
    const Device dev = backend.device();
    const Tensor logits(d_l_->data(), DType::kF32, {rows_, width()}, dev);
    return backend.GumbelArgmax(pad_ ? logits.Columns(0, vocab_) : logits,
                                Tensor(d_t_->data(), DType::kF32, {rows_}, dev),
                                Tensor(d_s_->data(), DType::kI32, {rows_, 2}, dev),
                                Tensor(d_k_->data(), DType::kI32, {rows_}, dev), offset_,
                                Tensor(d_i_->data(), DType::kI32, {rows_}, dev),
                                Tensor(d_o_->data(), DType::kI32, {rows_, 2}, dev));
  }
  absl::StatusOr<OpResult> Collect() override {
    OpResult r;
    COIL_ASSIGN_OR_RETURN(auto ids, d_i_->ReadInts());
    COIL_ASSIGN_OR_RETURN(auto words, d_o_->ReadInts());
    r.outputs.emplace_back("ids", std::vector<float>(ids.begin(), ids.end()));
    // The scores' bits as 16-bit halves: exact in a float.
    std::vector<float> halves;
    for (int32_t w : words) {
      const uint32_t u = static_cast<uint32_t>(w);
      halves.push_back(static_cast<float>(u & 0xffffu));
      halves.push_back(static_cast<float>(u >> 16));
    }
    r.outputs.emplace_back("score_bits", std::move(halves));
    return r;
  }
  // Ids and score bits must match exactly: NMSE 0.
  double max_nmse() const override { return 0.0; }
  double flops() const override { return 200.0 * rows_ * vocab_; }
  double bytes() const override { return 4.0 * rows_ * vocab_; }

 private:
  int64_t width() const { return pad_ ? vocab_ + 3 : vocab_; }

  int64_t rows_, vocab_, offset_;
  bool pad_, nans_;
  std::vector<float> logits_, temperatures_;
  std::vector<int32_t> seeds_, steps_;
  std::optional<DeviceArray> d_l_, d_t_, d_s_, d_k_, d_i_, d_o_;
};

// ---------------------------------------------------------------- attention (paged K/V)
// The cases below carry their own float64 references (Expected()), worked out from the
// ops' equations with this file's own page arithmetic and bf16 rounding: none of it is
// kernel code.

// x rounded to the nearest bf16, ties to even (8 significant bits), from frexp: the
// reference's own rounding. Inputs here are far from bf16's subnormals and its range limits.
double RoundBf16(double x) {
  if (x == 0.0 || !std::isfinite(x)) return x;
  int e;
  const double m = std::frexp(x, &e);  // x = m 2^e, |m| in [0.5, 1)
  return std::ldexp(std::nearbyint(m * 256.0), e - 8);
}

// A step's sequences over a paged cache: runs[s] rows from start position starts[s] on
// shuffled pages of a pool with spare pages; a run of 0 stands for a padding entry (one row
// at position 0 on the scratch page), as a CUDA-graph batch pads. Tables may hold a page
// more than the context needs (a sequence that will grow), never fewer.
struct KvLayout {
  PagedKvBatch batch;
  int64_t pages = 0;  // usable pages; the cache holds pages + 1

  // The cache slot (page * block_size + offset) of position p of sequence s.
  int64_t Slot(int s, int64_t p) const {
    const int64_t page = batch.block_table[batch.cu_blocks[s] + p / batch.block_size];
    return page * batch.block_size + p % batch.block_size;
  }
};

KvLayout MakeKvLayout(std::mt19937_64& rng, const std::vector<int32_t>& runs,
                      const std::vector<int32_t>& starts, int32_t block_size) {
  KvLayout layout;
  std::vector<int64_t> need(runs.size(), 0);
  for (size_t s = 0; s < runs.size(); ++s) {
    if (runs[s] == 0) continue;
    need[s] = (starts[s] + runs[s] + block_size - 1) / block_size + (s % 2);  // one spare
    layout.pages += need[s];
  }
  layout.pages += 3;  // pages nobody holds: they must stay as they are
  const std::vector<int32_t> order =
      ShuffledSlots(rng, static_cast<int>(layout.pages), static_cast<int>(layout.pages));
  layout.batch.block_size = block_size;
  size_t next = 0;
  for (size_t s = 0; s < runs.size(); ++s) {
    if (runs[s] == 0) {
      layout.batch.Add(1, 0, {static_cast<int32_t>(layout.pages)});
      continue;
    }
    std::vector<int32_t> pages(order.begin() + next, order.begin() + next + need[s]);
    next += need[s];
    layout.batch.Add(runs[s], starts[s], pages);
  }
  return layout;
}

// Start positions for `runs`: decode rows (run 1) resume after up to max_start positions;
// longer runs alternate fresh prompts (0) and chunks resuming at any position.
std::vector<int32_t> MakeStarts(std::mt19937_64& rng, const std::vector<int32_t>& runs,
                                int32_t max_start) {
  std::uniform_int_distribution<int32_t> pos(0, max_start);
  std::vector<int32_t> starts(runs.size(), 0);
  for (size_t s = 0; s < runs.size(); ++s) {
    if (runs[s] == 0) continue;
    starts[s] = runs[s] > 1 && s % 3 == 0 ? 0 : pos(rng);
  }
  return starts;
}

// Host values as a cache of `dtype` holds them (bf16-rounded), and their bytes.
std::vector<float> AsStored(std::vector<float> v, DType dtype) {
  if (dtype == DType::kBF16) {
    for (float& x : v) x = static_cast<float>(RoundBf16(x));
  }
  return v;
}

struct AttentionShape {
  int64_t heads, kv_heads, head_dim;
  int32_t block_size;
  DType cache_dtype = DType::kF32;
};

std::string AttentionShapeName(const AttentionShape& a) {
  return absl::StrCat(DTypeName(a.cache_dtype), "cache_h", a.heads, "_kvh", a.kv_heads, "_d",
                      a.head_dim, "_bs", a.block_size);
}

// ---------------------------------------------------------------- KvCacheWrite
class KvCacheWriteCase : public OpCase {
 public:
  // k and v are column views of one fused qkv row [q | k | v | 3 pad], as the model has them.
  KvCacheWriteCase(AttentionShape shape, std::vector<int32_t> runs, int32_t max_start = 40)
      : a_(shape), runs_(std::move(runs)), max_start_(max_start) {}
  std::string Op() const override { return BackendOpName(BackendOp::kKvCacheWrite); }
  std::string Params() const override {
    return absl::StrCat(AttentionShapeName(a_), "_runs", RunsName(runs_), "_pos", max_start_);
  }
  void MakeInputs(uint64_t seed) override {
    std::mt19937_64 rng(seed);
    layout_ = MakeKvLayout(rng, runs_, MakeStarts(rng, runs_, max_start_), a_.block_size);
    rows_ = layout_.batch.cu_seqlens.back();
    width_ = a_.kv_heads * a_.head_dim;
    row_width_ = a_.heads * a_.head_dim + 2 * width_ + 3;
    qkv_ = RandomFloats(rng, rows_ * row_width_, -2.0f, 2.0f);
    const int64_t cache = (layout_.pages + 1) * a_.block_size * width_;
    k_cache_ = AsStored(RandomFloats(rng, cache), a_.cache_dtype);  // stale contents
    v_cache_ = AsStored(RandomFloats(rng, cache), a_.cache_dtype);
  }
  absl::Status Prepare(Backend& backend) override {
    COIL_ASSIGN_OR_RETURN(d_qkv_, DeviceArray::FromFloats(backend, qkv_));
    COIL_ASSIGN_OR_RETURN(d_k_cache_, DeviceArray::FromFloats(backend, k_cache_, a_.cache_dtype));
    COIL_ASSIGN_OR_RETURN(d_v_cache_, DeviceArray::FromFloats(backend, v_cache_, a_.cache_dtype));
    return absl::OkStatus();
  }
  absl::Status Launch(Backend& backend) override {
    const Device dev = backend.device();
    const Tensor qkv(d_qkv_->data(), DType::kF32, {rows_, row_width_}, dev);
    const int64_t q_width = a_.heads * a_.head_dim;
    return backend.KvCacheWrite(qkv.Columns(q_width, width_), qkv.Columns(q_width + width_, width_),
                                layout_.batch, CacheTensor(*d_k_cache_, dev),
                                CacheTensor(*d_v_cache_, dev));
  }
  absl::StatusOr<OpResult> Collect() override {
    OpResult r;
    for (const auto& [name, array, initial] :
         {std::tuple{"k_cache", &*d_k_cache_, &k_cache_},
          std::tuple{"v_cache", &*d_v_cache_, &v_cache_}}) {
      COIL_ASSIGN_OR_RETURN(auto bytes, array->Read());
      std::vector<float> now = Decode(bytes, a_.cache_dtype);
      // Pages nobody writes must keep their bits; the scratch page's contents are
      // unspecified once padding entries wrote it.
      const int64_t page_floats = a_.block_size * width_;
      const std::vector<bool> written = WrittenPages();
      for (int64_t page = 0; page < layout_.pages; ++page) {
        if (!written[page] &&
            std::memcmp(now.data() + page * page_floats, initial->data() + page * page_floats,
                        page_floats * sizeof(float)) != 0) {
          r.guard_violations.push_back(absl::StrCat(name, " page ", page, " is not written but changed"));
        }
      }
      now.resize(layout_.pages * page_floats);
      r.outputs.emplace_back(name, std::move(now));
    }
    return r;
  }
  std::vector<std::pair<std::string, std::vector<float>>> Expected() const override {
    std::vector<float> k = k_cache_, v = v_cache_;
    const int64_t q_width = a_.heads * a_.head_dim;
    const PagedKvBatch& b = layout_.batch;
    for (int s = 0; s < b.num_seqs(); ++s) {
      for (int32_t t = b.cu_seqlens[s]; t < b.cu_seqlens[s + 1]; ++t) {
        const int64_t slot = layout_.Slot(s, b.start_positions[s] + (t - b.cu_seqlens[s]));
        for (int64_t i = 0; i < width_; ++i) {
          const float* row = &qkv_[t * row_width_ + q_width];
          k[slot * width_ + i] = static_cast<float>(a_.cache_dtype == DType::kBF16 ? RoundBf16(row[i]) : row[i]);
          v[slot * width_ + i] = static_cast<float>(
              a_.cache_dtype == DType::kBF16 ? RoundBf16(row[width_ + i]) : row[width_ + i]);
        }
      }
    }
    k.resize(layout_.pages * a_.block_size * width_);
    v.resize(layout_.pages * a_.block_size * width_);
    return {{"k_cache", std::move(k)}, {"v_cache", std::move(v)}};
  }
  double flops() const override { return 0; }
  double bytes() const override {
    return rows_ * width_ * 2.0 * (4.0 + DTypeSize(a_.cache_dtype));
  }

 private:
  Tensor CacheTensor(const DeviceArray& a, Device dev) const {
    return Tensor(a.data(), a_.cache_dtype,
                  {layout_.pages + 1, a_.block_size, a_.kv_heads, a_.head_dim}, dev);
  }
  // Pages (scratch excluded) that hold a position some run writes.
  std::vector<bool> WrittenPages() const {
    std::vector<bool> written(layout_.pages + 1, false);
    const PagedKvBatch& b = layout_.batch;
    for (int s = 0; s < b.num_seqs(); ++s) {
      for (int32_t i = 0; i < b.run_length(s); ++i) {
        written[layout_.Slot(s, b.start_positions[s] + i) / a_.block_size] = true;
      }
    }
    return written;
  }

  AttentionShape a_;
  std::vector<int32_t> runs_;
  int32_t max_start_;
  KvLayout layout_;
  int64_t rows_ = 0, width_ = 0, row_width_ = 0;
  std::vector<float> qkv_, k_cache_, v_cache_;
  std::optional<DeviceArray> d_qkv_, d_k_cache_, d_v_cache_;
};

// ---------------------------------------------------------------- PagedAttention
class PagedAttentionCase : public OpCase {
 public:
  // The caches hold random history and the runs' own keys (KvCacheWrite's work) on shuffled
  // pages; q is a column view of a fused qkv row; out is a column view of a wider matrix
  // (f32) or its own bf16 rows. starts: the runs' start positions (0 for padding entries),
  // else drawn as MakeStarts does with max_start.
  PagedAttentionCase(AttentionShape shape, std::vector<int32_t> runs, int32_t max_start = 40,
                     DType out_dtype = DType::kF32, std::vector<int32_t> starts = {})
      : a_(shape),
        runs_(std::move(runs)),
        max_start_(max_start),
        out_dtype_(out_dtype),
        fixed_starts_(std::move(starts)) {}
  std::string Op() const override { return BackendOpName(BackendOp::kPagedAttention); }
  std::string Params() const override {
    return absl::StrCat(AttentionShapeName(a_), out_dtype_ == DType::kBF16 ? "_outbf16" : "",
                        "_runs", RunsName(runs_),
                        fixed_starts_.empty() ? absl::StrCat("_pos", max_start_)
                                              : absl::StrCat("_from", RunsName(fixed_starts_)));
  }
  // A bf16 out rounds values that differ in their last bits between the two sides, which
  // can move an element by one bf16 step.
  double max_nmse() const override { return out_dtype_ == DType::kBF16 ? 1e-5 : OpCase::max_nmse(); }
  // Over a bf16 cache the CUDA kernels take tensor-core products of q and the softmax weights
  // rounded to bf16, as a bf16 model's matmuls do (their host emulation measures NMSE up to
  // 8e-6 against the reference); a misplaced key or head gives about 1.
  double max_nmse_for(BackendKind kind) const override {
    return kind == BackendKind::kCuda && a_.cache_dtype == DType::kBF16 ? 5e-5 : max_nmse();
  }
  void MakeInputs(uint64_t seed) override {
    std::mt19937_64 rng(seed);
    layout_ = MakeKvLayout(rng, runs_,
                           fixed_starts_.empty() ? MakeStarts(rng, runs_, max_start_) : fixed_starts_,
                           a_.block_size);
    rows_ = layout_.batch.cu_seqlens.back();
    q_width_ = a_.heads * a_.head_dim;
    row_width_ = q_width_ + 2 * a_.kv_heads * a_.head_dim + 3;
    // Scores of a few units: the softmax neither flat nor one-hot.
    qkv_ = RandomFloats(rng, rows_ * row_width_, -2.0f, 2.0f);
    const int64_t cache = (layout_.pages + 1) * a_.block_size * a_.kv_heads * a_.head_dim;
    k_cache_ = Encode(RandomFloats(rng, cache, -1.5f, 1.5f), a_.cache_dtype);
    v_cache_ = Encode(RandomFloats(rng, cache), a_.cache_dtype);
    scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(a_.head_dim)));
  }
  absl::Status Prepare(Backend& backend) override {
    COIL_ASSIGN_OR_RETURN(d_qkv_, DeviceArray::FromFloats(backend, qkv_));
    COIL_ASSIGN_OR_RETURN(d_k_cache_, DeviceArray::Create(backend, k_cache_));
    COIL_ASSIGN_OR_RETURN(d_v_cache_, DeviceArray::Create(backend, v_cache_));
    // Poisoned: an element the op never writes stays NaN; the f32 out's padding columns
    // must keep their value.
    COIL_ASSIGN_OR_RETURN(d_out_, DeviceArray::FromFloats(
                                      backend, std::vector<float>(rows_ * out_width(), std::nanf("")),
                                      out_dtype_));
    return absl::OkStatus();
  }
  absl::Status Launch(Backend& backend) override {
    const Device dev = backend.device();
    const Tensor qkv(d_qkv_->data(), DType::kF32, {rows_, row_width_}, dev);
    const Tensor out(d_out_->data(), out_dtype_, {rows_, out_width()}, dev);
    return backend.PagedAttention(qkv.Columns(0, q_width_), CacheTensor(*d_k_cache_, dev),
                                  CacheTensor(*d_v_cache_, dev), layout_.batch, scale_,
                                  out.Columns(0, q_width_));
  }
  absl::StatusOr<OpResult> Collect() override {
    OpResult r;
    COIL_ASSIGN_OR_RETURN(auto bytes, d_out_->Read());
    const std::vector<float> all = Decode(bytes, out_dtype_);
    std::vector<float> out;
    for (int64_t t = 0; t < rows_; ++t) {
      out.insert(out.end(), all.begin() + t * out_width(), all.begin() + t * out_width() + q_width_);
      for (int64_t c = q_width_; c < out_width(); ++c) {
        if (!std::isnan(all[t * out_width() + c])) {
          r.guard_violations.push_back(absl::StrCat("out padding (", t, ", ", c, ") changed"));
        }
      }
    }
    r.outputs.emplace_back("out", std::move(out));
    return r;
  }
  // Per row and head, in double from the equation: softmax over the row's positions
  // [0, p] of scale * q . K[j] (K, V read at the slots this case's own page arithmetic
  // gives), times V; rounded to bf16 for a bf16 out.
  std::vector<std::pair<std::string, std::vector<float>>> Expected() const override {
    const std::vector<float> k = StoredValues(k_cache_), v = StoredValues(v_cache_);
    const PagedKvBatch& b = layout_.batch;
    const int64_t dh = a_.head_dim, group = a_.heads / a_.kv_heads;
    std::vector<float> out(rows_ * q_width_);
    std::vector<double> w;
    for (int s = 0; s < b.num_seqs(); ++s) {
      for (int32_t t = b.cu_seqlens[s]; t < b.cu_seqlens[s + 1]; ++t) {
        const int64_t p = b.start_positions[s] + (t - b.cu_seqlens[s]);
        w.assign(p + 1, 0.0);
        for (int64_t h = 0; h < a_.heads; ++h) {
          const int64_t g = h / group;
          const float* q = &qkv_[t * row_width_ + h * dh];
          double max = -std::numeric_limits<double>::infinity();
          for (int64_t j = 0; j <= p; ++j) {
            const float* kj = &k[(layout_.Slot(s, j) * a_.kv_heads + g) * dh];
            double dot = 0.0;
            for (int64_t d = 0; d < dh; ++d) dot += static_cast<double>(q[d]) * kj[d];
            w[j] = dot * scale_;
            max = std::max(max, w[j]);
          }
          double sum = 0.0;
          for (double& x : w) sum += (x = std::exp(x - max));
          for (int64_t d = 0; d < dh; ++d) {
            double o = 0.0;
            for (int64_t j = 0; j <= p; ++j) o += w[j] * v[(layout_.Slot(s, j) * a_.kv_heads + g) * dh + d];
            o /= sum;
            out[t * q_width_ + h * dh + d] =
                static_cast<float>(out_dtype_ == DType::kBF16 ? RoundBf16(o) : o);
          }
        }
      }
    }
    return {{"out", std::move(out)}};
  }
  // 2 H Dh multiply-adds per (row, key): q . k and p v.
  double flops() const override {
    double keys = 0;
    const PagedKvBatch& b = layout_.batch;
    for (int s = 0; s < b.num_seqs(); ++s) {
      for (int32_t i = 0; i < b.run_length(s); ++i) keys += b.start_positions[s] + i + 1;
    }
    return 4.0 * a_.heads * a_.head_dim * keys;
  }
  // What the op must read at least: each sequence's K and V once, q, and out written.
  double bytes() const override {
    double positions = 0;
    const PagedKvBatch& b = layout_.batch;
    for (int s = 0; s < b.num_seqs(); ++s) positions += b.context_length(s);
    return positions * 2.0 * a_.kv_heads * a_.head_dim * DTypeSize(a_.cache_dtype) +
           rows_ * q_width_ * (4.0 + DTypeSize(out_dtype_));
  }

 private:
  int64_t out_width() const { return out_dtype_ == DType::kF32 ? q_width_ + 5 : q_width_; }
  // The values of a cache's bytes: f32 as they are, bf16 as the high half of an f32.
  std::vector<float> StoredValues(const std::vector<uint8_t>& bytes) const {
    const size_t size = DTypeSize(a_.cache_dtype), n = bytes.size() / size;
    std::vector<float> values(n);
    for (size_t i = 0; i < n; ++i) {
      uint32_t bits = 0;
      if (size == 2) {
        uint16_t half;
        std::memcpy(&half, bytes.data() + 2 * i, 2);
        bits = static_cast<uint32_t>(half) << 16;
      } else {
        std::memcpy(&bits, bytes.data() + 4 * i, 4);
      }
      std::memcpy(&values[i], &bits, 4);
    }
    return values;
  }
  Tensor CacheTensor(const DeviceArray& a, Device dev) const {
    return Tensor(a.data(), a_.cache_dtype,
                  {layout_.pages + 1, a_.block_size, a_.kv_heads, a_.head_dim}, dev);
  }

  AttentionShape a_;
  std::vector<int32_t> runs_;
  int32_t max_start_;
  DType out_dtype_;
  std::vector<int32_t> fixed_starts_;
  KvLayout layout_;
  int64_t rows_ = 0, q_width_ = 0, row_width_ = 0;
  float scale_ = 1.0f;
  std::vector<float> qkv_;
  std::vector<uint8_t> k_cache_, v_cache_;  // as stored
  std::optional<DeviceArray> d_qkv_, d_k_cache_, d_v_cache_, d_out_;
};

// ---------------------------------------------------------------- Relu2
class Relu2Case : public OpCase {
 public:
  // x is columns [2, 2 + width) of up_proj's output, one row wider by 5 (strided rows);
  // in_place: out is x itself (f32); out_dtype kBF16: down_proj's bf16 rows.
  Relu2Case(int64_t rows, int64_t width, bool in_place, DType out_dtype = DType::kF32)
      : rows_(rows), width_(width), in_place_(in_place), out_dtype_(out_dtype) {}
  std::string Op() const override { return BackendOpName(BackendOp::kRelu2); }
  std::string Params() const override {
    return absl::StrCat("f32_t", rows_, "_n", width_, in_place_ ? "_inplace" : "",
                        out_dtype_ == DType::kBF16 ? "_outbf16" : "");
  }
  void MakeInputs(uint64_t seed) override {
    std::mt19937_64 rng(seed);
    x_ = RandomFloats(rng, rows_ * (width_ + 5), -3.0f, 3.0f);
  }
  absl::Status Prepare(Backend& backend) override {
    COIL_ASSIGN_OR_RETURN(d_x_, DeviceArray::FromFloats(backend, x_));
    COIL_ASSIGN_OR_RETURN(d_out_, DeviceArray::FromFloats(
                                      backend, std::vector<float>(rows_ * width_, std::nanf("")),
                                      out_dtype_));
    return absl::OkStatus();
  }
  absl::Status Launch(Backend& backend) override {
    const Device dev = backend.device();
    const Tensor x = Tensor(d_x_->data(), DType::kF32, {rows_, width_ + 5}, dev).Columns(2, width_);
    return backend.Relu2(x, in_place_ ? x : Tensor(d_out_->data(), out_dtype_, {rows_, width_}, dev));
  }
  absl::StatusOr<OpResult> Collect() override {
    OpResult r;
    if (in_place_) {
      COIL_ASSIGN_OR_RETURN(auto all, d_x_->ReadFloats());
      std::vector<float> out;
      for (int64_t t = 0; t < rows_; ++t) {
        out.insert(out.end(), all.begin() + t * (width_ + 5) + 2,
                   all.begin() + t * (width_ + 5) + 2 + width_);
      }
      r.outputs.emplace_back("out", std::move(out));
    } else {
      COIL_ASSIGN_OR_RETURN(auto bytes, d_out_->Read());
      r.outputs.emplace_back("out", Decode(bytes, out_dtype_));
    }
    return r;
  }
  std::vector<std::pair<std::string, std::vector<float>>> Expected() const override {
    std::vector<float> out;
    for (int64_t t = 0; t < rows_; ++t) {
      for (int64_t i = 0; i < width_; ++i) {
        const double x = x_[t * (width_ + 5) + 2 + i];
        const double y = x > 0 ? x * x : 0.0;
        out.push_back(static_cast<float>(out_dtype_ == DType::kBF16 ? RoundBf16(y) : y));
      }
    }
    return {{"out", std::move(out)}};
  }
  double flops() const override { return 2.0 * rows_ * width_; }
  double bytes() const override { return rows_ * width_ * (4.0 + DTypeSize(out_dtype_)); }

 private:
  int64_t rows_, width_;
  bool in_place_;
  DType out_dtype_;
  std::vector<float> x_;
  std::optional<DeviceArray> d_x_, d_out_;
};

}  // namespace

std::vector<std::unique_ptr<OpCase>> TestOpCases() {
  std::vector<std::unique_ptr<OpCase>> cases;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    cases.push_back(std::make_unique<EmbeddingCase>(dt, 9, 50, 40, 0));
    cases.push_back(std::make_unique<EmbeddingCase>(dt, 9, 30, 33, 20));
    cases.push_back(std::make_unique<MatmulCase>(dt, 1, 37, 70));
    cases.push_back(std::make_unique<MatmulCase>(dt, 9, 64, 128));
    cases.push_back(std::make_unique<MatmulCase>(dt, 33, 50, 96, 5));
    cases.push_back(std::make_unique<MatmulCase>(dt, 70, 21, 40));
    // Strided table rows: the model gathers rows of activations (f32) this way.
    cases.push_back(std::make_unique<EmbeddingCase>(dt, 7, 20, 37, 3, 5));
  }
  // The M a device matmul must treat alike (decode batches to prefill chunks), with odd K
  // and N, strided x rows off 16-byte boundaries and strided y rows.
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (int64_t m : {1, 3, 64, 300}) {
      cases.push_back(std::make_unique<MatmulCase>(dt, m, 45, 77, 3, 3));
    }
  }
  cases.push_back(std::make_unique<MatmulCase>(DType::kF16, 3, 45, 77, 3, 3));
  // Rows long enough for the AVX2 lane-major form (K from 1024, M from 48), with partial x
  // tiles and W panels, a K that is not a multiple of 16, strided rows and (300 rows) two x
  // blocks; and the same K at a decode batch's M, which keeps the split tiles.
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    cases.push_back(std::make_unique<MatmulCase>(dt, 13, 37, 1100, 3, 3));
    cases.push_back(std::make_unique<MatmulCase>(dt, 49, 37, 1100, 3, 3));
  }
  cases.push_back(std::make_unique<MatmulCase>(DType::kBF16, 300, 40, 1040));
  cases.push_back(std::make_unique<AddRmsNormCase>(5, 100, true));
  cases.push_back(std::make_unique<AddRmsNormCase>(3, 64, false));
  // Wider than a block of threads and not a multiple of the warp size; out aliasing x.
  cases.push_back(std::make_unique<AddRmsNormCase>(4, 333, true, true));
  cases.push_back(std::make_unique<AddRmsNormCase>(2, 1031, false));
  // bf16 outs and bf16 rows: what a bf16 model passes from its norms to its matmuls.
  cases.push_back(std::make_unique<AddRmsNormCase>(5, 333, true, false, DType::kBF16));
  cases.push_back(std::make_unique<AddRmsNormCase>(3, 768, false, false, DType::kBF16));
  cases.push_back(std::make_unique<MatmulCase>(DType::kBF16, 9, 64, 128, 0, 0, DType::kBF16));
  cases.push_back(std::make_unique<MatmulCase>(DType::kBF16, 33, 50, 96, 5, 0, DType::kBF16));
  cases.push_back(std::make_unique<MatmulCase>(DType::kBF16, 1, 37, 70, 0, 0, DType::kBF16));
  // bf16 rows at an odd stride, 4 bytes into a row: not 16-byte aligned, so copied.
  cases.push_back(std::make_unique<MatmulCase>(DType::kBF16, 7, 40, 64, 0, 3, DType::kBF16));
  cases.push_back(std::make_unique<MatmulCase>(DType::kBF16, 20, 33, 1030, 0, 0, DType::kBF16));
  cases.push_back(std::make_unique<MatmulCase>(DType::kBF16, 50, 33, 1030, 0, 0, DType::kBF16));
  cases.push_back(std::make_unique<CausalConv1dCase>(40, 4, std::vector<int32_t>{1, 2, 7}, 6));
  cases.push_back(std::make_unique<CausalConv1dCase>(300, 4, std::vector<int32_t>{1, 1, 1, 1}, 8));
  cases.push_back(std::make_unique<CausalConv1dCase>(17, 2, std::vector<int32_t>{3, 1}, 2));
  // Two padding entries on the scratch row (run 0 in the list).
  cases.push_back(
      std::make_unique<CausalConv1dCase>(40, 4, std::vector<int32_t>{5, 1, 0, 0}, 4));
  cases.push_back(
      std::make_unique<SsmScanCase>(SsmShape{4, 8, 16, 2, 8}, std::vector<int32_t>{20, 1, 3, 9}, 7));
  cases.push_back(
      std::make_unique<SsmScanCase>(SsmShape{4, 8, 16, 2, 8}, std::vector<int32_t>{1, 1, 1}, 5));
  cases.push_back(std::make_unique<SsmScanCase>(SsmShape{6, 16, 24, 3, 5, true},
                                                std::vector<int32_t>{13, 2}, 3));
  cases.push_back(
      std::make_unique<SsmScanCase>(SsmShape{3, 4, 8, 1, 16}, std::vector<int32_t>{40}, 2));
  // headdim and d_state multiples of 16 (the AVX-512 forms), with remainder blocks.
  cases.push_back(std::make_unique<SsmScanCase>(SsmShape{4, 16, 32, 2, 8},
                                                std::vector<int32_t>{20, 1, 3, 9}, 7));
  cases.push_back(std::make_unique<SsmScanCase>(SsmShape{2, 80, 144, 1, 16},
                                                std::vector<int32_t>{37, 2, 1}, 4));
  cases.push_back(std::make_unique<SsmScanCase>(SsmShape{2, 64, 128, 2, 256},
                                                std::vector<int32_t>{300}, 1));
  cases.push_back(std::make_unique<SsmScanCase>(SsmShape{4, 16, 32, 2, 8},
                                                std::vector<int32_t>{1, 12, 0, 0}, 5));
  // Varlen batches for the device kernels: fresh and resuming sequences of 1 to 3000
  // tokens on shuffled slots, resuming at positions that are not chunk multiples (so
  // chunks start inside runs and a run's first chunk is short), padding entries sharing
  // the scratch row, and runs shorter than the conv history mixed with longer ones.
  // Small widths keep the reference's token-by-token loops fast.
  const BatchMix resume_far{.max_start = 5000, .fresh_every = 3};
  cases.push_back(std::make_unique<CausalConv1dCase>(
      40, 4, std::vector<int32_t>{3000, 1, 2, 700, 1, 3}, 10, resume_far));
  cases.push_back(std::make_unique<CausalConv1dCase>(
      300, 4, std::vector<int32_t>{1, 0, 1, 0, 0, 1}, 6));  // decode only, scratch thrice
  cases.push_back(std::make_unique<CausalConv1dCase>(
      70, 5, std::vector<int32_t>{2, 1, 3, 2, 0}, 5, BatchMix{.fresh_every = 2}));
  cases.push_back(std::make_unique<SsmScanCase>(
      SsmShape{4, 8, 16, 2, 64}, std::vector<int32_t>{3000, 1, 257, 2, 1, 64, 1000, 3}, 12,
      resume_far));
  cases.push_back(std::make_unique<SsmScanCase>(
      SsmShape{2, 16, 32, 1, 256}, std::vector<int32_t>{1000, 300, 1, 2, 600, 0}, 8,
      BatchMix{.max_start = 3000, .fresh_every = 2}));
  // Decode only, the scratch row three times; d_state a multiple of 4 (vector loads), not
  // (scalar loads), and wider than one 512-column span (two spans).
  cases.push_back(std::make_unique<SsmScanCase>(SsmShape{4, 16, 32, 2, 8},
                                                std::vector<int32_t>{1, 0, 1, 0, 0, 1}, 6));
  cases.push_back(std::make_unique<SsmScanCase>(SsmShape{3, 20, 40, 1, 8, true},
                                                std::vector<int32_t>{1, 1, 1, 1}, 5));
  cases.push_back(std::make_unique<SsmScanCase>(SsmShape{1, 4, 600, 1, 8},
                                                std::vector<int32_t>{1, 1, 0, 30}, 4));
  cases.push_back(std::make_unique<SsmScanCase>(SsmShape{2, 80, 144, 1, 16},
                                                std::vector<int32_t>{1, 1, 0}, 3));
  // Heads that start inside a group (a tensor-parallel rank's share): 6 heads from head 2
  // of groups of 4 touch 2 groups; 5 heads from head 2 of groups of 3 touch 3.
  cases.push_back(std::make_unique<SsmScanCase>(SsmShape{6, 8, 16, 2, 16, false, 4, 2},
                                                std::vector<int32_t>{50, 1, 7, 1}, 6,
                                                BatchMix{.max_start = 100}));
  cases.push_back(std::make_unique<SsmScanCase>(SsmShape{5, 8, 16, 3, 8, false, 3, 2},
                                                std::vector<int32_t>{1, 19, 1, 0}, 4,
                                                BatchMix{.max_start = 100, .fresh_every = 2}));
  // Chunks longer than the 256 rows whose sums the CUDA phase 1 keeps in registers
  // (chunk_size 300: whole chunks of 300, short first chunks of resuming runs), and more
  // heads than one phase-1 block's 8 warps.
  cases.push_back(std::make_unique<SsmScanCase>(SsmShape{9, 8, 16, 3, 300},
                                                std::vector<int32_t>{700, 1, 2, 301, 299}, 6,
                                                BatchMix{.max_start = 1000, .fresh_every = 2}));
  // Chunks of one token (chunk_size 1) through the chunked path.
  cases.push_back(std::make_unique<SsmScanCase>(SsmShape{2, 8, 16, 1, 1},
                                                std::vector<int32_t>{5, 3}, 2));
  // 600 sequences: the CUDA chunk list is built by one block in tiles of 256 sequences, so
  // chunk indices and C B^T offsets carry across two tile boundaries; decode runs, padding
  // and short prompts interleaved (and the conv's row-to-sequence search over many runs).
  const std::vector<int32_t> many = CycledRuns(600, {2, 1, 3, 0, 9, 1, 5});
  cases.push_back(std::make_unique<SsmScanCase>(SsmShape{2, 4, 8, 1, 4}, many, 600,
                                                BatchMix{.fresh_every = 5}));
  cases.push_back(std::make_unique<CausalConv1dCase>(6, 4, many, 600, BatchMix{.fresh_every = 5}));
  // The tensor-core form of the chunked path: mamba2's head shape (whole 64x64 tiles, a
  // chunk of 256 in four t-tiles) over fresh and resuming runs, a varlen mix of small
  // tiles, and heads starting inside a group.
  cases.push_back(std::make_unique<SsmScanCase>(
      SsmShape{.heads = 4, .headdim = 64, .d_state = 128, .groups = 1, .chunk = 256,
               .bf16_products = true},
      std::vector<int32_t>{600, 1, 300, 2, 0}, 6, BatchMix{.max_start = 1000, .fresh_every = 2}));
  cases.push_back(std::make_unique<SsmScanCase>(
      SsmShape{.heads = 4, .headdim = 8, .d_state = 16, .groups = 2, .chunk = 64,
               .bf16_products = true},
      std::vector<int32_t>{3000, 1, 257, 2, 1, 64, 1000, 3}, 12, resume_far));
  cases.push_back(std::make_unique<SsmScanCase>(
      SsmShape{.heads = 6, .headdim = 8, .d_state = 16, .groups = 2, .chunk = 16,
               .heads_per_group = 4, .first_head = 2, .bf16_products = true},
      std::vector<int32_t>{50, 1, 7, 1}, 6, BatchMix{.max_start = 100}));
  // A bf16 state pool: mamba2's head shape through the chunked form (both kinds of
  // products) and decode runs; small heads through the portable forms; the fused mixer.
  for (bool bf16_products : {false, true}) {
    cases.push_back(std::make_unique<SsmScanCase>(
        SsmShape{.heads = 2, .headdim = 64, .d_state = 128, .groups = 1, .chunk = 64,
                 .bf16_products = bf16_products, .state_dtype = DType::kBF16},
        std::vector<int32_t>{150, 1, 70, 1, 2}, 6, BatchMix{.max_start = 200, .fresh_every = 2}));
  }
  cases.push_back(std::make_unique<SsmScanCase>(
      SsmShape{.heads = 5, .headdim = 8, .d_state = 16, .groups = 1, .chunk = 8,
               .state_dtype = DType::kBF16},
      std::vector<int32_t>{1, 19, 1, 0}, 4, BatchMix{.max_start = 100, .fresh_every = 2}));
  cases.push_back(std::make_unique<MixerDecodeCase>(
      MixerShape{4, 64, 128, 1, 4, DType::kBF16}, std::vector<int32_t>{1, 1, 1, 0, 1}, 7,
      DType::kBF16, BatchMix{.fresh_every = 2}));
  cases.push_back(std::make_unique<MixerDecodeCase>(
      MixerShape{2, 64, 128, 1, 4, DType::kBF16, /*denormal_state=*/true},
      std::vector<int32_t>{1, 1, 0, 1}, 4));
  cases.push_back(std::make_unique<GatedSumSquaresCase>(5, 96, 2));
  cases.push_back(std::make_unique<GatedSumSquaresCase>(3, 50, 1));
  cases.push_back(std::make_unique<GatedSumSquaresCase>(4, 999, 3, true));
  cases.push_back(std::make_unique<GatedSumSquaresCase>(2, 37, 1, true));
  cases.push_back(std::make_unique<GatedNormApplyCase>(5, 96, 2, 48));
  cases.push_back(std::make_unique<GatedNormApplyCase>(4, 40, 1, 80));
  cases.push_back(std::make_unique<GatedNormApplyCase>(3, 999, 3, 333, true));
  cases.push_back(std::make_unique<GatedNormApplyCase>(2, 37, 1, 74, true));
  cases.push_back(std::make_unique<GatedNormApplyCase>(5, 96, 2, 48, false, DType::kBF16));
  cases.push_back(std::make_unique<GatedRmsNormCase>(5, 96, 2, false));
  cases.push_back(std::make_unique<GatedRmsNormCase>(3, 999, 3, true));
  cases.push_back(std::make_unique<GatedRmsNormCase>(4, 1536, 1, false, DType::kBF16));
  cases.push_back(std::make_unique<GatedNormApplyCase>(3, 999, 3, 333, true, DType::kBF16));
  // The fused decode mixer: headdims that leave a partial tile (24; 40 = 32 + 8), vector and
  // scalar state loads (d_state 20, 18), two and three groups, fresh and resuming sequences,
  // padding entries sharing the scratch row; mamba2's head shape with bf16 out; and many
  // sequences (tickets for each of them).
  cases.push_back(std::make_unique<MixerDecodeCase>(MixerShape{4, 24, 20, 2, 4},
                                                    std::vector<int32_t>{1, 1, 0, 1, 0, 1}, 6,
                                                    DType::kF32, BatchMix{.fresh_every = 3}));
  cases.push_back(std::make_unique<MixerDecodeCase>(MixerShape{6, 16, 18, 3, 3},
                                                    std::vector<int32_t>{1, 1, 1}, 4));
  cases.push_back(std::make_unique<MixerDecodeCase>(MixerShape{2, 40, 16, 1, 3},
                                                    std::vector<int32_t>{1, 0, 1}, 3));
  cases.push_back(std::make_unique<MixerDecodeCase>(MixerShape{4, 64, 128, 1, 4},
                                                    std::vector<int32_t>{1, 0, 1, 1}, 5,
                                                    DType::kBF16));
  cases.push_back(std::make_unique<MixerDecodeCase>(
      MixerShape{2, 8, 16, 1, 4}, CycledRuns(300, {1, 1, 0, 1}), 300, DType::kF32,
      BatchMix{.fresh_every = 7}));
  // Up to the sums of squares: heads starting inside a group (one head of the first group,
  // four of the second; two then four, with partial tiles), whole groups, each TP2 rank's
  // half of mamba2's one group, 1 + 3 + 2 heads over three groups, and many sequences.
  cases.push_back(std::make_unique<MixerDecodeCase>(
      MixerShape{5, 24, 20, 2, 4}, std::vector<int32_t>{1, 1, 0, 1, 0, 1}, 6, DType::kF32,
      BatchMix{.fresh_every = 3}, MixerSums{true, 4, 3}));
  cases.push_back(std::make_unique<MixerDecodeCase>(MixerShape{6, 40, 18, 2, 3},
                                                    std::vector<int32_t>{1, 0, 1}, 3, DType::kF32,
                                                    BatchMix{}, MixerSums{true, 4, 2}));
  cases.push_back(std::make_unique<MixerDecodeCase>(MixerShape{4, 24, 20, 2, 4},
                                                    std::vector<int32_t>{1, 1, 1}, 4, DType::kF32,
                                                    BatchMix{}, MixerSums{true}));
  cases.push_back(std::make_unique<MixerDecodeCase>(
      MixerShape{12, 64, 128, 1, 4}, std::vector<int32_t>{1, 0, 1, 1}, 5, DType::kF32, BatchMix{},
      MixerSums{true, 24, 12}));
  cases.push_back(std::make_unique<MixerDecodeCase>(
      MixerShape{12, 64, 128, 1, 4}, std::vector<int32_t>{1, 1, 0, 1}, 5, DType::kF32, BatchMix{},
      MixerSums{true, 24, 0}));
  cases.push_back(std::make_unique<MixerDecodeCase>(
      MixerShape{6, 16, 16, 3, 4}, std::vector<int32_t>{1, 1, 1, 0}, 4, DType::kF32, BatchMix{},
      MixerSums{true, 3, 2}));
  cases.push_back(std::make_unique<MixerDecodeCase>(
      MixerShape{3, 8, 16, 2, 4}, CycledRuns(300, {1, 1, 0, 1}), 300, DType::kF32,
      BatchMix{.fresh_every = 7}, MixerSums{true, 2, 1}));
  cases.push_back(std::make_unique<ArgmaxCase>(6, 1000));
  cases.push_back(std::make_unique<ArgmaxCase>(3, 37));
  cases.push_back(std::make_unique<ArgmaxCase>(4, 1000, true));
  // A vocabulary row as wide as mamba2's (many columns per thread of a wide block).
  cases.push_back(std::make_unique<ArgmaxCase>(2, 50288, true));
  cases.push_back(std::make_unique<GumbelArgmaxCase>(5, 1000, 0, false, false));
  cases.push_back(std::make_unique<GumbelArgmaxCase>(3, 37, 1000, true, true));
  // A second rank's shard of mamba2's vocabulary, padded ids dropped by the view.
  cases.push_back(std::make_unique<GumbelArgmaxCase>(2, 25141, 25144, true, true));
  // K/V into pages: page sizes 16, 5 (dividing neither a tile of keys nor the runs) and 1,
  // head_dim 16 and 24, f32 and bf16 caches, decode rows, prompts and resuming chunks that
  // start inside a page and cross several, padding entries on the scratch page.
  cases.push_back(std::make_unique<KvCacheWriteCase>(AttentionShape{4, 2, 16, 16},
                                                     std::vector<int32_t>{5, 1, 1, 20}));
  cases.push_back(std::make_unique<KvCacheWriteCase>(
      AttentionShape{4, 2, 24, 5, DType::kBF16}, std::vector<int32_t>{1, 17, 0, 3, 0}));
  cases.push_back(std::make_unique<KvCacheWriteCase>(AttentionShape{8, 1, 16, 1},
                                                     std::vector<int32_t>{4, 1, 0}));
  // Attention: GQA ratios 1, 2, 3 and 8; page sizes 16, 5 and 1; head_dim 16, 24, 40
  // (partial 16-lane blocks), 64 and 128; f32 and bf16 caches and outs; decode rows,
  // prompts, chunks resuming at any position, padding entries (one row on the scratch
  // page), runs of more rows than one work item (16) and contexts of many key tiles.
  cases.push_back(std::make_unique<PagedAttentionCase>(AttentionShape{4, 4, 16, 16},
                                                       std::vector<int32_t>{1, 1, 20, 3}));
  cases.push_back(std::make_unique<PagedAttentionCase>(
      AttentionShape{4, 2, 24, 5, DType::kBF16}, std::vector<int32_t>{17, 1, 0, 40, 1}));
  cases.push_back(std::make_unique<PagedAttentionCase>(AttentionShape{8, 1, 32, 1},
                                                       std::vector<int32_t>{1, 9, 1}));
  cases.push_back(std::make_unique<PagedAttentionCase>(
      AttentionShape{6, 2, 64, 16, DType::kBF16}, std::vector<int32_t>{1, 33, 1, 0}, 40,
      DType::kBF16));
  cases.push_back(std::make_unique<PagedAttentionCase>(AttentionShape{2, 1, 40, 16},
                                                       std::vector<int32_t>{300, 1, 2}, 500));
  cases.push_back(std::make_unique<PagedAttentionCase>(AttentionShape{2, 2, 128, 7},
                                                       std::vector<int32_t>{5, 1}, 60));
  // Contexts of 1, 15, 16, 17 and 33 tokens: one key, a tile short of full, full, one key
  // into the next tile, two tiles and one.
  cases.push_back(std::make_unique<PagedAttentionCase>(
      AttentionShape{4, 2, 16, 16}, std::vector<int32_t>{1, 1, 1, 1, 1}, 0, DType::kF32,
      std::vector<int32_t>{0, 14, 15, 16, 32}));
  // Many sequences on small pages, padding among them.
  cases.push_back(std::make_unique<PagedAttentionCase>(
      AttentionShape{4, 2, 16, 4}, CycledRuns(100, {1, 1, 3, 0, 1, 6}), 70));
  cases.push_back(std::make_unique<Relu2Case>(5, 100, false));
  cases.push_back(std::make_unique<Relu2Case>(3, 333, true));
  cases.push_back(std::make_unique<Relu2Case>(4, 3072, false, DType::kBF16));
  return cases;
}

std::vector<std::unique_ptr<OpCase>> PerfOpCases(int rows, bool decode, int context) {
  // mamba2-130m: d_model 768, d_inner 1536, 24 heads of 64, d_state 128, 1 group,
  // in_proj 768 -> 3352, out_proj 1536 -> 768, conv over 1792 channels, vocab 50288.
  std::vector<std::unique_ptr<OpCase>> cases;
  for (DType dt : {DType::kBF16, DType::kF32}) {
    cases.push_back(std::make_unique<MatmulCase>(dt, rows, 3352, 768));
    cases.push_back(std::make_unique<MatmulCase>(dt, rows, 768, 1536));
    cases.push_back(std::make_unique<MatmulCase>(dt, rows, 50288, 768));
  }
  // What a bf16 model runs for in_proj and out_proj: the norms' bf16 rows, no conversion.
  cases.push_back(std::make_unique<MatmulCase>(DType::kBF16, rows, 3352, 768, 0, 0, DType::kBF16));
  cases.push_back(std::make_unique<MatmulCase>(DType::kBF16, rows, 768, 1536, 0, 0, DType::kBF16));
  cases.push_back(std::make_unique<EmbeddingCase>(DType::kBF16, rows, 50288, 768, 0));
  cases.push_back(std::make_unique<AddRmsNormCase>(rows, 768, true));
  const std::vector<int32_t> runs =
      decode ? std::vector<int32_t>(rows, 1) : std::vector<int32_t>{rows};
  const int state_rows = static_cast<int>(runs.size());
  cases.push_back(std::make_unique<CausalConv1dCase>(1792, 4, runs, state_rows));
  cases.push_back(
      std::make_unique<SsmScanCase>(SsmShape{24, 64, 128, 1, 256}, runs, state_rows));
  cases.push_back(std::make_unique<SsmScanCase>(
      SsmShape{.heads = 24, .headdim = 64, .d_state = 128, .groups = 1, .chunk = 256,
               .state_dtype = DType::kBF16},
      runs, state_rows));
  if (!decode) {  // the bf16 model's chunked path (decode runs never take it)
    cases.push_back(std::make_unique<SsmScanCase>(
        SsmShape{.heads = 24, .headdim = 64, .d_state = 128, .groups = 1, .chunk = 256,
                 .bf16_products = true},
        runs, state_rows));
  }
  cases.push_back(std::make_unique<GatedSumSquaresCase>(rows, 1536, 1));
  cases.push_back(std::make_unique<GatedNormApplyCase>(rows, 1536, 1, 1536));
  cases.push_back(std::make_unique<GatedRmsNormCase>(rows, 1536, 1, false, DType::kBF16));
  if (decode) {  // what a decode step of a bf16 model runs between in_proj and out_proj
    cases.push_back(std::make_unique<MixerDecodeCase>(MixerShape{24, 64, 128, 1, 4}, runs,
                                                      state_rows, DType::kBF16));
    // The same with a bf16 state pool (half the state's bytes).
    cases.push_back(std::make_unique<MixerDecodeCase>(MixerShape{24, 64, 128, 1, 4, DType::kBF16},
                                                      runs, state_rows, DType::kBF16));
    // A TP2 rank's half of it: 12 heads of the one group of 24.
    cases.push_back(std::make_unique<MixerDecodeCase>(MixerShape{12, 64, 128, 1, 4}, runs,
                                                      state_rows, DType::kF32, BatchMix{},
                                                      MixerSums{true, 24, 12}));
  }
  cases.push_back(std::make_unique<ArgmaxCase>(rows, 50288));
  cases.push_back(std::make_unique<GumbelArgmaxCase>(rows, 50277, 0, true, false));
  // nemotron-130m's attention and MLP: 12 query heads and 4 KV heads of 64, bf16 K/V in
  // pages of 16, bf16 out (o_proj's and down_proj's input), intermediate size 3072. Decode:
  // each sequence's one row at position context - 1; prefill: prompts of up to `context`
  // rows, each ending at position context - 1.
  const AttentionShape attention{12, 4, 64, 16, DType::kBF16};
  std::vector<int32_t> starts;
  std::vector<int32_t> attention_runs;
  if (decode) {
    attention_runs.assign(rows, 1);
    starts.assign(rows, context - 1);
  } else {
    for (int left = rows; left > 0; left -= context) {
      attention_runs.push_back(std::min(left, context));
      starts.push_back(context - attention_runs.back());
    }
  }
  cases.push_back(std::make_unique<KvCacheWriteCase>(attention, attention_runs, 0));
  cases.push_back(std::make_unique<PagedAttentionCase>(attention, attention_runs, 0, DType::kBF16,
                                                       starts));
  cases.push_back(std::make_unique<Relu2Case>(rows, 3072, false, DType::kBF16));
  return cases;
}

}  // namespace coil::testing
