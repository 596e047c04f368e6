#include "workers/model/mamba2_model.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#if COIL_WITH_CUDA
#include "workers/comm/nccl_communicator.h"
#endif

namespace coil::model {
namespace {

// The checkpoint readers' element type for a kernel dtype.
model::DType ToStoredType(::coil::DType dtype) {
  switch (dtype) {
    case ::coil::DType::kBF16: return model::DType::kBF16;
    case ::coil::DType::kF16: return model::DType::kF16;
    default: return model::DType::kF32;
  }
}

// What an error message names for a failed op: a layer, or the input (ids and embedding).
constexpr int64_t kInputLayer = -1;
constexpr int64_t kOutputLayer = -2;  // the final norm and the lm_head
std::string LayerContext(int64_t layer) {
  if (layer == kInputLayer) return "embedding";
  if (layer == kOutputLayer) return "lm_head";
  return absl::StrCat("layer ", layer);
}

std::string LayerName(int64_t layer, const char* suffix) {
  return absl::StrCat("layers.", layer, ".", suffix);
}

}  // namespace

absl::StatusOr<WeightType> ParseWeightType(absl::string_view text) {
  if (text == "auto") return WeightType::kAuto;
  if (text == "f32") return WeightType::kF32;
  if (text == "bf16") return WeightType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("weight type '", text, "' is not one of auto, f32, bf16"));
}

absl::StatusOr<std::unique_ptr<Mamba2Model>> Mamba2Model::Load(const Checkpoint& checkpoint,
                                                               Backend& backend,
                                                               comm::Communicator& comm,
                                                               const LoadOptions& options) {
  const ModelConfig& config = checkpoint.config();
  COIL_ASSIGN_OR_RETURN(ShardLayout layout, MakeShardLayout(config, comm.size(), comm.rank()));
  if (config.bias) {
    return absl::UnimplementedError(
        "in_proj/out_proj biases (bias / use_bias: true) are not supported; Mamba2 "
        "checkpoints normally have none");
  }
  if (!config.rms_norm) {
    return absl::UnimplementedError("rms_norm: false (LayerNorm blocks) is not supported");
  }
  auto model = std::unique_ptr<Mamba2Model>(new Mamba2Model(config, layout, backend, comm));
  model->mixer_norm_eps_ = config.format == ConfigFormat::kHuggingFace
                               ? static_cast<float>(config.norm_epsilon)
                               : 1e-5f;  // mamba_ssm's RMSNormGated default
  model->cuda_graphs_ = options.cuda_graphs;
  model->fused_mixer_ = options.fused_mixer;
  COIL_RETURN_IF_ERROR(model->LoadWeights(checkpoint, options));
  COIL_ASSIGN_OR_RETURN(model->agree_, backend.Allocate(sizeof(float)));
  return model;
}

absl::StatusOr<Tensor> Mamba2Model::Upload(std::vector<uint8_t> host, ::coil::DType dtype,
                                           std::initializer_list<int64_t> shape) {
  COIL_ASSIGN_OR_RETURN(Buffer buffer, backend_.Allocate(host.size()));
  COIL_RETURN_IF_ERROR(backend_.CopyFromHost(buffer.data(), host.data(), host.size()));
  Tensor tensor(buffer.data(), dtype, shape, backend_.device());
  weight_bytes_ += host.size();
  weight_buffers_.push_back(std::move(buffer));
  return tensor;
}

absl::Status Mamba2Model::LoadWeights(const Checkpoint& checkpoint, const LoadOptions& options) {
  const ModelConfig& c = config_;
  const ShardLayout& s = layout_;
  const int64_t d = c.d_model, e_all = c.d_inner(), n = c.d_state, g_all = c.ngroups;

  COIL_ASSIGN_OR_RETURN(TensorInfo in_proj_info,
                        checkpoint.Info(LayerName(0, "mixer.in_proj.weight")));
  switch (options.weight_type) {
    case WeightType::kF32: weight_dtype_ = ::coil::DType::kF32; break;
    case WeightType::kBF16: weight_dtype_ = ::coil::DType::kBF16; break;
    case WeightType::kAuto:
      weight_dtype_ = in_proj_info.dtype == model::DType::kF32 ? ::coil::DType::kF32 : ::coil::DType::kBF16;
      break;
  }
  const size_t wsize = DTypeSize(weight_dtype_);

  auto read_rows = [&](const std::string& name, absl::Span<const RowSegment> segments,
                       int64_t cols, ::coil::DType dtype) -> absl::StatusOr<std::vector<uint8_t>> {
    int64_t rows = 0;
    for (const RowSegment& segment : segments) rows += segment.count;
    std::vector<uint8_t> host(static_cast<size_t>(rows * cols) * DTypeSize(dtype));
    COIL_RETURN_IF_ERROR(
        checkpoint.ReadSegments(name, segments, ToStoredType(dtype), absl::MakeSpan(host)));
    return host;
  };
  auto vector_f32 = [&](const std::string& name, absl::Span<const RowSegment> segments,
                        int64_t count) -> absl::StatusOr<Tensor> {
    COIL_ASSIGN_OR_RETURN(std::vector<uint8_t> host, read_rows(name, segments, 1, ::coil::DType::kF32));
    return Upload(std::move(host), ::coil::DType::kF32, {count});
  };

  // The vocab-parallel embedding (and lm_head): this rank's rows of the padded vocab.
  const RowSegment vocab_rows{s.vocab.begin, s.vocab.size()};
  {
    COIL_ASSIGN_OR_RETURN(std::vector<uint8_t> host,
                          read_rows("embedding.weight", {&vocab_rows, 1}, d, weight_dtype_));
    COIL_ASSIGN_OR_RETURN(embedding_, Upload(std::move(host), weight_dtype_, {s.vocab.size(), d}));
  }
  if (c.tie_embeddings) {
    lm_head_ = embedding_;
  } else {
    COIL_ASSIGN_OR_RETURN(std::vector<uint8_t> host,
                          read_rows("lm_head.weight", {&vocab_rows, 1}, d, weight_dtype_));
    COIL_ASSIGN_OR_RETURN(lm_head_, Upload(std::move(host), weight_dtype_, {s.vocab.size(), d}));
  }
  const RowSegment all_d{0, d};
  COIL_ASSIGN_OR_RETURN(norm_f_, vector_f32("norm_f.weight", {&all_d, 1}, d));

  // in_proj rows and conv channels of this rank: z, x and dt by heads; B and C by groups.
  const int64_t p = c.headdim;
  const RowSegment z_rows{s.head_begin * p, s.d_inner()};
  const RowSegment x_rows{e_all + s.head_begin * p, s.d_inner()};
  const RowSegment b_rows{2 * e_all + s.group_begin * n, s.bc_width()};
  const RowSegment c_rows{2 * e_all + g_all * n + s.group_begin * n, s.bc_width()};
  const RowSegment dt_rows{2 * e_all + 2 * g_all * n + s.head_begin, s.heads()};
  const RowSegment in_proj_segments[] = {z_rows, x_rows, b_rows, c_rows, dt_rows};
  // conv1d convolves [x | B | C] of d_inner + 2 * ngroups * d_state channels.
  const RowSegment conv_segments[] = {{s.head_begin * p, s.d_inner()},
                                      {e_all + s.group_begin * n, s.bc_width()},
                                      {e_all + g_all * n + s.group_begin * n, s.bc_width()}};
  const RowSegment head_rows{s.head_begin, s.heads()};
  const RowSegment inner_rows{s.head_begin * p, s.d_inner()};

  layers_.resize(static_cast<size_t>(c.n_layer));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    Layer& layer = layers_[static_cast<size_t>(l)];
    COIL_ASSIGN_OR_RETURN(layer.norm, vector_f32(LayerName(l, "norm.weight"), {&all_d, 1}, d));
    {
      COIL_ASSIGN_OR_RETURN(std::vector<uint8_t> host,
                            read_rows(LayerName(l, "mixer.in_proj.weight"), in_proj_segments, d,
                                      weight_dtype_));
      COIL_ASSIGN_OR_RETURN(layer.in_proj,
                            Upload(std::move(host), weight_dtype_, {s.in_proj_rows(), d}));
    }
    {
      COIL_ASSIGN_OR_RETURN(std::vector<uint8_t> host,
                            read_rows(LayerName(l, "mixer.conv1d.weight"), conv_segments,
                                      c.d_conv, ::coil::DType::kF32));
      COIL_ASSIGN_OR_RETURN(layer.conv_weight,
                            Upload(std::move(host), ::coil::DType::kF32, {s.conv_channels(), c.d_conv}));
    }
    if (c.conv_bias) {
      COIL_ASSIGN_OR_RETURN(layer.conv_bias, vector_f32(LayerName(l, "mixer.conv1d.bias"),
                                                        conv_segments, s.conv_channels()));
    } else {
      COIL_ASSIGN_OR_RETURN(
          layer.conv_bias,
          Upload(std::vector<uint8_t>(static_cast<size_t>(s.conv_channels()) * 4, 0),
                 ::coil::DType::kF32, {s.conv_channels()}));
    }
    COIL_ASSIGN_OR_RETURN(layer.dt_bias,
                          vector_f32(LayerName(l, "mixer.dt_bias"), {&head_rows, 1}, s.heads()));
    COIL_ASSIGN_OR_RETURN(layer.a_log,
                          vector_f32(LayerName(l, "mixer.A_log"), {&head_rows, 1}, s.heads()));
    COIL_ASSIGN_OR_RETURN(layer.d, vector_f32(LayerName(l, "mixer.D"), {&head_rows, 1}, s.heads()));
    COIL_ASSIGN_OR_RETURN(layer.mixer_norm, vector_f32(LayerName(l, "mixer.norm.weight"),
                                                       {&inner_rows, 1}, s.d_inner()));
    {
      std::vector<uint8_t> host(static_cast<size_t>(d * s.d_inner()) * wsize);
      COIL_RETURN_IF_ERROR(checkpoint.ReadColumns(LayerName(l, "mixer.out_proj.weight"),
                                                  s.head_begin * p, s.d_inner(),
                                                  ToStoredType(weight_dtype_),
                                                  absl::MakeSpan(host)));
      COIL_ASSIGN_OR_RETURN(layer.out_proj,
                            Upload(std::move(host), weight_dtype_, {d, s.d_inner()}));
    }
    if (options.progress) options.progress(l + 1, c.n_layer);
  }
  return absl::OkStatus();
}

StatePoolShape Mamba2Model::StateShape(int64_t state_rows) const {
  return ShardStateShape(config_, layout_, state_rows);
}

absl::Status Mamba2Model::EnsureScratch(int64_t rows, int64_t sampled_rows) {
  if (rows <= scratch_rows_ && sampled_rows <= scratch_sampled_) return absl::OkStatus();
  const int64_t old_rows = scratch_rows_, old_sampled = scratch_sampled_;
  const absl::Status grown = GrowScratch(rows, sampled_rows);
  if (comm_.size() == 1) return grown;
  // One float all-reduced: how many ranks failed. A rank that failed to stage it still
  // joins the collective, and counts itself as failed.
  absl::Status local = grown;
  float failed = grown.ok() ? 0.0f : 1.0f;
  float* const flag = static_cast<float*>(agree_.data());  // allocated by Load
  absl::Status staged = backend_.CopyFromHost(flag, &failed, sizeof(float));
  COIL_RETURN_IF_ERROR(AllReduce(flag, 1, /*collectives=*/true, staged));
  if (staged.ok()) staged = backend_.CopyToHost(&failed, flag, sizeof(float));
  if (local.ok() && !staged.ok()) local = staged;
  if (local.ok() && failed != 0.0f) {
    local = absl::ResourceExhaustedError(absl::StrCat(
        static_cast<int>(failed), " other rank(s) could not grow the step scratch to ", rows,
        " rows; lower --max-batch-tokens or the state budget"));
  }
  if (!local.ok()) {
    // Every rank forgets this growth, so that all of them grow (and agree) again together.
    scratch_rows_ = std::min(scratch_rows_, old_rows);
    scratch_sampled_ = std::min(scratch_sampled_, old_sampled);
    ++scratch_generation_;
  }
  return local;
}

absl::Status Mamba2Model::GrowScratch(int64_t rows, int64_t sampled_rows) {
  if (rows > scratch_rows_) {
    const int64_t d = config_.d_model;
    auto alloc = [&](Buffer& buffer, int64_t floats) -> absl::Status {
      COIL_ASSIGN_OR_RETURN(buffer, backend_.Allocate(static_cast<size_t>(floats) * 4));
      return absl::OkStatus();
    };
    ++scratch_generation_;  // before anything is freed: a partial failure drops the graphs too
    COIL_RETURN_IF_ERROR(alloc(meta_, MaxPackedWords(rows)));
    COIL_RETURN_IF_ERROR(alloc(residual_, rows * d));
    COIL_RETURN_IF_ERROR(alloc(normed_, rows * d));
    COIL_RETURN_IF_ERROR(alloc(mixer_out_, rows * d));
    COIL_RETURN_IF_ERROR(alloc(zxbcdt_, rows * layout_.in_proj_rows()));
    COIL_RETURN_IF_ERROR(alloc(xbc_, rows * layout_.conv_channels()));
    COIL_RETURN_IF_ERROR(alloc(y_, rows * layout_.d_inner()));
    COIL_RETURN_IF_ERROR(alloc(group_sums_, rows * config_.ngroups));
    if (weight_dtype_ == ::coil::DType::kBF16) {  // bf16 elements, two per float
      COIL_RETURN_IF_ERROR(alloc(rows16_, (rows * std::max(d, layout_.d_inner()) + 1) / 2));
    }
    scratch_rows_ = rows;
  }
  if (sampled_rows > scratch_sampled_) {
    ++scratch_generation_;
    COIL_ASSIGN_OR_RETURN(sampled_, backend_.Allocate(static_cast<size_t>(sampled_rows) * 4 *
                                                      config_.d_model));
    COIL_ASSIGN_OR_RETURN(logits_, backend_.Allocate(static_cast<size_t>(sampled_rows) * 4 *
                                                     layout_.vocab.size()));
    // Argmax output: [sampled] i32 ids, then [sampled] f32 values.
    COIL_ASSIGN_OR_RETURN(argmax_, backend_.Allocate(static_cast<size_t>(sampled_rows) * 8));
    // GumbelArgmax: [sampled] f32 temperatures, [sampled, 2] i32 seeds, [sampled] i32 steps
    // (one upload), then [sampled] i32 ids and [sampled, 2] i32 score bits (one download).
    COIL_ASSIGN_OR_RETURN(gumbel_, backend_.Allocate(static_cast<size_t>(sampled_rows) * 28));
    scratch_sampled_ = sampled_rows;
  }
  return absl::OkStatus();
}

bool Mamba2Model::CommReadsBackendMemory() const {
  return comm_.size() == 1 || backend_.device() == Device::kCpu ||
         comm_.memory_space() == comm::MemorySpace::kDevice;
}

bool Mamba2Model::graphs_enabled() const {
  // Only collectives enqueued on the backend's stream (NCCL) can be captured; MPI cannot.
  return cuda_graphs_ && backend_.SupportsGraphs() &&
         (comm_.size() == 1 || comm_.memory_space() == comm::MemorySpace::kDevice);
}

absl::Status Mamba2Model::AllReduce(float* data, size_t count, bool collectives,
                                    absl::Status& status) {
  if (comm_.size() == 1 || !collectives) return absl::OkStatus();
  const auto start = std::chrono::steady_clock::now();
  absl::Status reduced;
  if (CommReadsBackendMemory()) {
    reduced = comm_.AllReduceSum(data, count);
  } else {
    // A host communicator with device activations: through the host. A failed copy still
    // joins the collective (with whatever the buffer holds), so the ranks stay in step.
    host_stage_.resize(count);
    absl::Status copied = backend_.CopyToHost(host_stage_.data(), data, count * 4);
    reduced = comm_.AllReduceSum(host_stage_.data(), count);
    if (copied.ok() && reduced.ok()) copied = backend_.CopyFromHost(data, host_stage_.data(), count * 4);
    if (status.ok() && !copied.ok()) status = copied;
  }
  comm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return reduced;
}

// rmsnorm(y * silu(z)) * w per group. When this rank holds part of a group, the group's
// sum of squares is the sum over the ranks that share it: each rank computes the partial
// sums of each group piece it holds into the group's global column of a [rows, ngroups]
// buffer (group_sums_, backend memory) whose other columns are zeroed, and one all-reduce
// adds them.
// Whether groups are whole is the same on every rank (heads per rank % heads per group),
// so every rank makes the same calls.
absl::Status Mamba2Model::GroupNorm(const Layer& layer, const Tensor& y, const Tensor& z,
                                    const Tensor& out, int64_t rows, bool collectives,
                                    absl::Status& status, int64_t layer_index) {
  auto fail = [&](absl::Status op) {
    if (status.ok() && !op.ok()) status = Annotate(op, LayerContext(layer_index));
  };
  if (layout_.groups_whole()) {  // one pass: the same bits as the two halves
    if (status.ok()) {
      fail(backend_.GatedRmsNorm(y, z, layer.mixer_norm, layout_.groups(), mixer_norm_eps_, out));
    }
    return absl::OkStatus();
  }
  const Tensor sums = GroupSums(rows, status, layer_index);
  for (int64_t g = 0; g < layout_.groups() && status.ok(); ++g) {
    const auto [begin, width] = GroupColumns(g);
    fail(backend_.GatedSumSquares(y.Columns(begin, width), z.Columns(begin, width), 1,
                                  y.Columns(begin, width),
                                  sums.Columns(layout_.group_begin + g, 1)));
  }
  return ApplyGroupNorm(layer, y, sums, out, rows, collectives, status, layer_index);
}

std::pair<int64_t, int64_t> Mamba2Model::GroupColumns(int64_t g) const {
  SsmScanOptions split;  // as Compute passes it when groups are not whole
  split.heads_per_group = layout_.heads_per_group;
  split.first_head_in_group = layout_.first_head_in_group();
  const HeadRange heads = GroupHeads(split, layout_.heads(), layout_.groups(), g);
  return {heads.begin * config_.headdim, (heads.end - heads.begin) * config_.headdim};
}

Tensor Mamba2Model::GroupSums(int64_t rows, absl::Status& status, int64_t layer_index) {
  const int64_t g_all = config_.ngroups;
  const Tensor sums(group_sums_.data(), ::coil::DType::kF32, {rows, g_all}, backend_.device());
  // The columns of groups with no piece here must be zero for the all-reduce. When this
  // rank has a piece of every group (every released Mamba2 has one group, split across the
  // ranks) the sums fill every column, and the zeroing launch is saved.
  const bool every_column_written = layout_.group_begin == 0 && layout_.groups() == g_all;
  if (status.ok() && !every_column_written) {
    const absl::Status zeroed =
        backend_.FillZero(sums.raw(), static_cast<size_t>(rows * g_all) * 4);
    if (!zeroed.ok()) status = Annotate(zeroed, LayerContext(layer_index));
  }
  return sums;
}

absl::Status Mamba2Model::ApplyGroupNorm(const Layer& layer, const Tensor& gated,
                                         const Tensor& sums, const Tensor& out, int64_t rows,
                                         bool collectives, absl::Status& status,
                                         int64_t layer_index) {
  COIL_RETURN_IF_ERROR(AllReduce(sums.data<float>(), static_cast<size_t>(rows * config_.ngroups),
                                 collectives, status));
  const int64_t group_size = layout_.heads_per_group * config_.headdim;
  for (int64_t g = 0; g < layout_.groups() && status.ok(); ++g) {
    const auto [begin, width] = GroupColumns(g);
    const Tensor weight(layer.mixer_norm.data<float>() + begin, ::coil::DType::kF32, {width},
                        backend_.device());
    const absl::Status applied = backend_.GatedNormApply(
        gated.Columns(begin, width), sums.Columns(layout_.group_begin + g, 1), weight, group_size,
        mixer_norm_eps_, out.Columns(begin, width));
    if (!applied.ok()) status = Annotate(applied, LayerContext(layer_index));
  }
  return absl::OkStatus();  // only a failed collective is returned; local errors go in status
}

absl::StatusOr<const RecurrentBatch*> Mamba2Model::UploadStep(const StepMetadata& meta) {
  PackStepMetadata(meta, packed_);
  if (static_cast<int64_t>(packed_.words.size()) > MaxPackedWords(scratch_rows_)) {
    return absl::InternalError(absl::StrCat("the step's metadata takes ", packed_.words.size(),
                                            " words but the block holds ",
                                            MaxPackedWords(scratch_rows_)));
  }
  COIL_RETURN_IF_ERROR(
      backend_.CopyFromHost(meta_.data(), packed_.words.data(), packed_.words.size() * 4));
  step_batch_ = meta.batch;  // reuses the vectors' capacity
  if (backend_.device() != Device::kCpu) {
    const int32_t* words = static_cast<const int32_t*>(meta_.data());
    step_batch_.device_cu_seqlens = words + packed_.cu_seqlens;
    step_batch_.device_slots = words + packed_.slots;
    step_batch_.device_start_positions = words + packed_.start_positions;
    step_batch_.device_fresh = reinterpret_cast<const uint8_t*>(words + packed_.fresh);
  }
  return &step_batch_;
}

absl::Status Mamba2Model::Compute(int64_t rows, int64_t sampled, bool all_rows,
                                  const RecurrentBatch& batch, StatePool& pool, bool collectives,
                                  absl::Status& status) {
  // Every rank must make the same collective calls whatever happens locally, or the
  // others would wait forever: after a local error the remaining ops are skipped but the
  // collectives still run, and the error is returned at the end (the runner then reports
  // it in the step-status exchange). A failed collective returns at once: the job is
  // broken and MPI ends it.
  // The context string is built only when an op fails: this runs for every layer of every
  // step.
  auto run = [&status](absl::Status op_status, int64_t layer_index) {
    if (status.ok() && !op_status.ok()) status = Annotate(op_status, LayerContext(layer_index));
  };
  const Device device = backend_.device();
  const int64_t d = config_.d_model;
  const int64_t e = layout_.d_inner(), cc = layout_.conv_channels(), h = layout_.heads();
  const int64_t bc = layout_.bc_width();
  const float eps = static_cast<float>(config_.norm_epsilon);
  int32_t* const words = static_cast<int32_t*>(meta_.data());

  const Tensor ids(words + packed_.token_ids, ::coil::DType::kI32, {rows}, device);
  const Tensor residual(residual_.data(), ::coil::DType::kF32, {rows, d}, device);
  const Tensor normed(normed_.data(), ::coil::DType::kF32, {rows, d}, device);
  const Tensor mixer_out(mixer_out_.data(), ::coil::DType::kF32, {rows, d}, device);
  const Tensor zxbcdt(zxbcdt_.data(), ::coil::DType::kF32, {rows, layout_.in_proj_rows()}, device);
  const Tensor xbc(xbc_.data(), ::coil::DType::kF32, {rows, cc}, device);
  const Tensor y(y_.data(), ::coil::DType::kF32, {rows, e}, device);
  // With bf16 weights the norms before in_proj and out_proj write bf16 rows (what the
  // matmuls would round their input to), so no conversion runs between them.
  const bool bf16_rows = weight_dtype_ == ::coil::DType::kBF16;
  const Tensor in_proj_x =
      bf16_rows ? Tensor(rows16_.data(), ::coil::DType::kBF16, {rows, d}, device) : normed;
  const Tensor out_proj_x =
      bf16_rows ? Tensor(rows16_.data(), ::coil::DType::kBF16, {rows, e}, device) : y;
  const Tensor z = zxbcdt.Columns(0, e);
  const Tensor xbc_in = zxbcdt.Columns(e, cc);
  const Tensor dt = zxbcdt.Columns(e + cc, h);
  const Tensor x = xbc.Columns(0, e);
  const Tensor b = xbc.Columns(e, bc);
  const Tensor c = xbc.Columns(e + bc, bc);

  SsmScanOptions scan;
  scan.chunk_size = config_.chunk_size;
  scan.dt_min = static_cast<float>(config_.time_step_min);
  scan.dt_max = static_cast<float>(config_.time_step_max);
  // A bf16 model's chunked scan takes bf16 products (tensor cores on CUDA), as its matmuls
  // take bf16-rounded activations.
  scan.bf16_products = weight_dtype_ == ::coil::DType::kBF16;
  if (!layout_.groups_whole()) {  // heads may start inside a group (ngroups % tp != 0)
    scan.heads_per_group = layout_.heads_per_group;
    scan.first_head_in_group = layout_.first_head_in_group();
  }

  // A decode step takes the mixer as one op (one launch on CUDA), with the bits of the ops it
  // stands for: up to the norm's output when the heads hold their groups whole, up to the
  // sums of squares the ranks sharing a group all-reduce when they do not.
  bool decode_only = fused_mixer_;
  for (int s = 0; s < batch.num_seqs() && decode_only; ++s) {
    decode_only = batch.run_length(s) == 1;
  }
  const bool mixer_decode = decode_only && layout_.groups_whole();
  const bool mixer_decode_sums = decode_only && !layout_.groups_whole();

  if (status.ok()) run(backend_.Embedding(ids, embedding_, layout_.vocab.begin, residual), kInputLayer);
  COIL_RETURN_IF_ERROR(
      AllReduce(residual.data<float>(), static_cast<size_t>(rows * d), collectives, status));
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    const int64_t layer_index = static_cast<int64_t>(l);
    if (status.ok()) {
      run(backend_.AddRmsNorm(l == 0 ? Tensor() : mixer_out, layer.norm, eps, residual,
                              in_proj_x),
          layer_index);
    }
    if (status.ok()) run(backend_.Matmul(in_proj_x, layer.in_proj, zxbcdt), layer_index);
    if (mixer_decode) {
      const MixerWeights weights{layer.conv_weight, layer.conv_bias, layer.a_log,
                                 layer.d,           layer.dt_bias,   layer.mixer_norm};
      if (status.ok()) {
        run(backend_.MixerDecode(xbc_in, dt, z, weights, scan, mixer_norm_eps_, batch,
                                 pool.ConvState(static_cast<int64_t>(l)),
                                 pool.SsmState(static_cast<int64_t>(l)), xbc, y, out_proj_x),
            layer_index);
      }
    } else if (mixer_decode_sums) {
      const MixerWeights weights{layer.conv_weight, layer.conv_bias, layer.a_log,
                                 layer.d,           layer.dt_bias,   Tensor()};
      const Tensor sums = GroupSums(rows, status, layer_index);
      if (status.ok()) {
        run(backend_.MixerDecodeSumSquares(xbc_in, dt, z, weights, scan, batch,
                                           pool.ConvState(static_cast<int64_t>(l)),
                                           pool.SsmState(static_cast<int64_t>(l)), xbc, y,
                                           sums.Columns(layout_.group_begin, layout_.groups())),
            layer_index);
      }
      COIL_RETURN_IF_ERROR(
          ApplyGroupNorm(layer, y, sums, out_proj_x, rows, collectives, status, layer_index));
    } else {
      if (status.ok()) {
        run(backend_.CausalConv1d(xbc_in, layer.conv_weight, layer.conv_bias, batch,
                                  pool.ConvState(static_cast<int64_t>(l)), xbc),
            layer_index);
      }
      if (status.ok()) {
        run(backend_.SsmScan(x, dt, layer.a_log, b, c, layer.d, layer.dt_bias, scan, batch,
                             pool.SsmState(static_cast<int64_t>(l)), y),
            layer_index);
      }
      COIL_RETURN_IF_ERROR(
          GroupNorm(layer, y, z, out_proj_x, rows, collectives, status, layer_index));
    }
    if (status.ok()) run(backend_.Matmul(out_proj_x, layer.out_proj, mixer_out), layer_index);
    COIL_RETURN_IF_ERROR(
        AllReduce(mixer_out.data<float>(), static_cast<size_t>(rows * d), collectives, status));
  }
  if (!status.ok()) return absl::OkStatus();
  const int64_t last = kOutputLayer;
  // Every row sampled in order: the final norm feeds lm_head itself, as bf16 rows with bf16
  // weights (the bits the matmul would round it to). Otherwise lm_head takes the sampled
  // rows, gathered by the embedding lookup over `normed`.
  const bool head_bf16 = all_rows && lm_head_.dtype() == ::coil::DType::kBF16;
  Tensor head_in =
      head_bf16 ? Tensor(rows16_.data(), ::coil::DType::kBF16, {rows, d}, device) : normed;
  run(backend_.AddRmsNorm(mixer_out, norm_f_, eps, residual, head_in), last);
  if (!status.ok() || sampled == 0) return absl::OkStatus();
  if (!all_rows) {
    const Tensor sample_ids(words + packed_.sample_rows, ::coil::DType::kI32, {sampled}, device);
    head_in = Tensor(sampled_.data(), ::coil::DType::kF32, {sampled, d}, device);
    run(backend_.Embedding(sample_ids, normed, 0, head_in), last);
  }
  const Tensor out(logits_.data(), ::coil::DType::kF32, {sampled, layout_.vocab.size()}, device);
  if (status.ok()) run(backend_.Matmul(head_in, lm_head_, out), last);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Mamba2Model::RunStep(const StepMetadata& meta, StatePool& pool,
                                             bool all_rows) {
  const int64_t rows = meta.num_tokens();
  if (!all_rows && graphs_enabled() && IsDecodeOnly(meta)) return RunDecodeGraph(meta, pool);
  const int64_t sampled = all_rows ? rows : meta.num_samples();
  all_rows = all_rows || SamplesEveryRow(meta);  // the same rows in the same order
  COIL_RETURN_IF_ERROR(EnsureScratch(rows, sampled));
  absl::Status status = absl::OkStatus();
  const RecurrentBatch* batch = &meta.batch;
  auto uploaded = UploadStep(meta);
  if (uploaded.ok()) {
    batch = *uploaded;
  } else {
    status = Annotate(uploaded.status(), "the step's metadata");
  }
  COIL_RETURN_IF_ERROR(Compute(rows, sampled, all_rows, *batch, pool, /*collectives=*/true, status));
  if (!status.ok()) return status;
  return sampled;
}

absl::Status Mamba2Model::CaptureDecodeGraph(int64_t bucket, StatePool& pool) {
  const StepMetadata scratch = ScratchDecodeBatch(bucket, static_cast<int32_t>(pool.scratch_row()));
  COIL_ASSIGN_OR_RETURN(const RecurrentBatch* batch, UploadStep(scratch));
  // The warm-up makes every lazy allocation (op scratch, algorithm choices) happen outside
  // the capture; without collectives it is local, so ranks may capture at different steps.
  absl::Status status = absl::OkStatus();
  // The graphs take every bucket row in order (a scratch batch samples rows 0..bucket-1),
  // so their lm_head reads the final norm's rows without a gather.
  COIL_RETURN_IF_ERROR(Compute(bucket, bucket, true, *batch, pool, /*collectives=*/false, status));
  COIL_RETURN_IF_ERROR(status);
#if COIL_WITH_CUDA
  // NCCL with more than two ranks gathers into a scratch buffer that it grows on demand:
  // sized here for the largest all-reduce the scratch allows, so it never moves while the
  // graphs live (a larger step grows the scratch, which drops the graphs).
  if (auto* nccl = dynamic_cast<comm::NcclCommunicator*>(&comm_); nccl != nullptr) {
    COIL_RETURN_IF_ERROR(nccl->ReserveAllReduce(
        static_cast<size_t>(scratch_rows_ * std::max<int64_t>(config_.d_model, config_.ngroups))));
  }
#endif
  COIL_RETURN_IF_ERROR(backend_.Synchronize());
  COIL_RETURN_IF_ERROR(backend_.BeginCapture());
  const absl::Status collective =
      Compute(bucket, bucket, true, *batch, pool, /*collectives=*/true, status);
  auto graph = backend_.EndCapture();  // always ends the capture, whatever failed inside
  COIL_RETURN_IF_ERROR(collective);
  COIL_RETURN_IF_ERROR(status);
  COIL_RETURN_IF_ERROR(graph.status());
  DecodeGraph& slot = graphs_[static_cast<size_t>(std::countr_zero(static_cast<uint64_t>(bucket)))];
  slot.graph = std::move(graph).value();
  slot.scratch_generation = scratch_generation_;
  ++graph_captures_;
  return absl::OkStatus();
}

int64_t Mamba2Model::graph_nodes(int64_t num_seqs) const {
  const size_t index =
      static_cast<size_t>(std::countr_zero(static_cast<uint64_t>(DecodeBucket(num_seqs))));
  if (index >= graphs_.size() || graphs_[index].graph == nullptr) return 0;
  return graphs_[index].graph->nodes();
}

absl::StatusOr<int64_t> Mamba2Model::RunDecodeGraph(const StepMetadata& meta, StatePool& pool) {
  // Every rank pads the same way, so the collectives match whether a rank replays its
  // graph or runs the padded batch op by op.
  const int64_t bucket = DecodeBucket(meta.batch.num_seqs());
  const int64_t largest = DecodeBucket(pool.state_rows());
  COIL_RETURN_IF_ERROR(EnsureScratch(std::max(largest, bucket), std::max(largest, bucket)));
  const PoolIdentity pool_identity{pool.ConvState(0).raw(), pool.SsmState(0).raw(),
                                   pool.state_rows()};
  if (!(graph_pool_ == pool_identity)) {
    graphs_.clear();
    graph_pool_ = pool_identity;
  }
  const size_t index = static_cast<size_t>(std::countr_zero(static_cast<uint64_t>(bucket)));
  if (graphs_.size() <= index) graphs_.resize(index + 1);
  DecodeGraph& slot = graphs_[index];
  const bool current = slot.graph != nullptr &&
                       slot.scratch_generation == scratch_generation_ &&
                       backend_.IsGraphCurrent(*slot.graph);
  if (!current && !capture_failed_) {
    slot.graph.reset();
    const absl::Status captured = CaptureDecodeGraph(bucket, pool);
    if (!captured.ok()) {
      capture_failed_ = true;
      std::fprintf(stderr, "coil: decode graphs off on this rank, steps run op by op: %s\n",
                   captured.ToString().c_str());
    }
  }
  const StepMetadata padded = PadDecodeBatch(meta, bucket, static_cast<int32_t>(pool.scratch_row()));
  absl::Status status = absl::OkStatus();
  const RecurrentBatch* batch = &padded.batch;
  auto uploaded = UploadStep(padded);
  if (uploaded.ok()) {
    batch = *uploaded;
  } else {
    status = Annotate(uploaded.status(), "the step's metadata");
  }
  // A step whose padded sample rows are not 0..bucket-1 (a resumed prompt's one-token chunk
  // that samples nothing, ahead of a row that does) runs op by op, with the gather.
  const bool every_row = SamplesEveryRow(padded);
  bool replayed = false;
  if (status.ok() && every_row && slot.graph != nullptr && !capture_failed_) {
    replayed = backend_.Replay(*slot.graph).ok();
    if (replayed) ++graph_replays_;
  }
  if (!replayed) {
    COIL_RETURN_IF_ERROR(
        Compute(bucket, bucket, every_row, *batch, pool, /*collectives=*/true, status));
  }
  if (!status.ok()) return status;
  return static_cast<int64_t>(meta.num_samples());
}

absl::Status Mamba2Model::Forward(const StepMetadata& meta, StatePool& pool, bool all_rows,
                                  std::vector<float>& logits) {
  if (meta.num_tokens() == 0) {
    logits.clear();
    return absl::OkStatus();
  }
  COIL_ASSIGN_OR_RETURN(const int64_t sampled, RunStep(meta, pool, all_rows));
  logits.resize(static_cast<size_t>(sampled * layout_.vocab.size()));
  return backend_.CopyToHost(logits.data(), logits_.data(), logits.size() * 4);
}

absl::StatusOr<int32_t> Mamba2Model::FirstNonNanId(int64_t r, int64_t width,
                                                   int64_t valid) {
  // Rare (a row without a value above -inf): read the row back.
  std::vector<float> row(static_cast<size_t>(valid));
  COIL_RETURN_IF_ERROR(backend_.CopyToHost(
      row.data(), static_cast<const float*>(logits_.data()) + r * width, row.size() * 4));
  for (int64_t i = 0; i < valid; ++i) {
    if (!std::isnan(row[i])) return static_cast<int32_t>(layout_.vocab.begin + i);
  }
  return -1;
}

absl::Status Mamba2Model::ForwardRows(const StepMetadata& meta, StatePool& pool,
                                      const std::vector<RowSampling>& kinds,
                                      const std::vector<float>& temperatures,
                                      const std::vector<uint64_t>& seeds,
                                      const std::vector<int32_t>& steps, RowAnswers& out) {
  out.host_logits.clear();
  out.ids.clear();
  out.values.clear();
  out.scores.clear();
  if (meta.num_tokens() == 0) return absl::OkStatus();
  COIL_ASSIGN_OR_RETURN(const int64_t sampled, RunStep(meta, pool, /*all_rows=*/false));
  if (kinds.size() != static_cast<size_t>(sampled)) {
    return absl::InternalError(
        absl::StrCat("the step samples ", sampled, " rows but got ", kinds.size(), " kinds"));
  }
  const auto count = [&](RowSampling kind) { return std::count(kinds.begin(), kinds.end(), kind); };
  const int64_t host_rows = count(RowSampling::kHost);
  const int64_t width = layout_.vocab.size();
  out.ids.assign(static_cast<size_t>(sampled), -1);
  out.values.assign(static_cast<size_t>(sampled), -std::numeric_limits<float>::infinity());
  out.scores.assign(static_cast<size_t>(sampled), -std::numeric_limits<double>::infinity());
  out.host_logits.resize(static_cast<size_t>(host_rows * width));
  const float* const logits = static_cast<const float*>(logits_.data());
  if (sampled == 0) return absl::OkStatus();
  if (host_rows == sampled) {  // one copy of the whole block
    return backend_.CopyToHost(out.host_logits.data(), logits, out.host_logits.size() * 4);
  }
  if (host_rows > 0) COIL_RETURN_IF_ERROR(GatherHostRows(sampled, kinds, host_rows, out));
  // Padded vocabulary ids (>= vocab_size) are never chosen: only the real columns.
  const int64_t valid = std::clamp<int64_t>(config_.vocab_size - layout_.vocab.begin, 0, width);
  if (valid == 0) return absl::OkStatus();
  // The device answers are taken over every sampled row (a pass over the logits either
  // way) and kept for the rows of their kind.
  if (count(RowSampling::kArgmax) > 0) COIL_RETURN_IF_ERROR(DeviceArgmax(sampled, kinds, valid, out));
  if (count(RowSampling::kGumbel) > 0) {
    COIL_RETURN_IF_ERROR(DeviceGumbel(sampled, kinds, valid, temperatures, seeds, steps, out));
  }
  return absl::OkStatus();
}

absl::Status Mamba2Model::GatherHostRows(int64_t sampled, const std::vector<RowSampling>& kinds,
                                         int64_t host_rows, RowAnswers& out) {
  // The rows are gathered on the device (Embedding over the logits as a table: an exact
  // copy of f32 rows) and come back in one copy, however they interleave with the others.
  const int64_t width = layout_.vocab.size();
  const int64_t index_floats = (host_rows + 15) / 16 * 16;  // keeps the rows 64-byte aligned
  if (host_rows > gather_rows_) {
    const int64_t rows = std::max(host_rows, 2 * gather_rows_);
    COIL_ASSIGN_OR_RETURN(gather_, backend_.Allocate(static_cast<size_t>(
                                       ((rows + 15) / 16 * 16 + rows * width) * 4)));
    gather_rows_ = rows;
  }
  std::vector<int32_t> indices;
  indices.reserve(static_cast<size_t>(host_rows));
  for (int64_t r = 0; r < sampled; ++r) {
    if (kinds[r] == RowSampling::kHost) indices.push_back(static_cast<int32_t>(r));
  }
  int32_t* const ids = static_cast<int32_t*>(gather_.data());
  float* const rows = static_cast<float*>(gather_.data()) + index_floats;
  COIL_RETURN_IF_ERROR(backend_.CopyFromHost(ids, indices.data(), indices.size() * 4));
  const Device device = backend_.device();
  COIL_RETURN_IF_ERROR(backend_.Embedding(
      Tensor(ids, ::coil::DType::kI32, {host_rows}, device),
      Tensor(logits_.data(), ::coil::DType::kF32, {sampled, width}, device), 0,
      Tensor(rows, ::coil::DType::kF32, {host_rows, width}, device)));
  return backend_.CopyToHost(out.host_logits.data(), rows, out.host_logits.size() * 4);
}

absl::Status Mamba2Model::DeviceArgmax(int64_t sampled, const std::vector<RowSampling>& kinds,
                                       int64_t valid, RowAnswers& out) {
  const Device device = backend_.device();
  const int64_t width = layout_.vocab.size();
  const Tensor logits(logits_.data(), ::coil::DType::kF32, {sampled, width}, device);
  int32_t* const out_ids = static_cast<int32_t*>(argmax_.data());
  float* const out_values = reinterpret_cast<float*>(out_ids + sampled);
  COIL_RETURN_IF_ERROR(backend_.Argmax(logits.Columns(0, valid),
                                       Tensor(out_ids, ::coil::DType::kI32, {sampled}, device),
                                       Tensor(out_values, ::coil::DType::kF32, {sampled}, device)));
  // ids then values, adjacent: one copy (one wait for the stream) per step.
  std::vector<int32_t> answer(static_cast<size_t>(sampled) * 2);
  COIL_RETURN_IF_ERROR(backend_.CopyToHost(answer.data(), out_ids, answer.size() * 4));
  for (int64_t r = 0; r < sampled; ++r) {
    if (kinds[r] != RowSampling::kArgmax) continue;
    std::memcpy(&out.values[r], &answer[sampled + r], sizeof(float));
    if (out.values[r] != -std::numeric_limits<float>::infinity()) {
      out.ids[r] = answer[r] + static_cast<int32_t>(layout_.vocab.begin);
      continue;
    }
    // No value above -inf: Argmax answers index 0, but the greedy rule takes the first
    // non-NaN column (a -inf), or nothing when every column is NaN.
    COIL_ASSIGN_OR_RETURN(out.ids[r], FirstNonNanId(r, width, valid));
  }
  return absl::OkStatus();
}

absl::Status Mamba2Model::DeviceGumbel(int64_t sampled, const std::vector<RowSampling>& kinds,
                                       int64_t valid, const std::vector<float>& temperatures,
                                       const std::vector<uint64_t>& seeds,
                                       const std::vector<int32_t>& steps, RowAnswers& out) {
  if (temperatures.size() != static_cast<size_t>(sampled) || seeds.size() != temperatures.size() ||
      steps.size() != temperatures.size()) {
    return absl::InternalError(absl::StrCat("gumbel sampling got ", temperatures.size(),
                                            " temperatures, ", seeds.size(), " seeds and ",
                                            steps.size(), " steps for ", sampled, " rows"));
  }
  const int64_t width = layout_.vocab.size();
  // The parameters, in the buffer's order: temperatures, seed words, steps. Rows of other
  // kinds get a valid placeholder (temperature 1); their answers are dropped.
  std::vector<int32_t> params(static_cast<size_t>(sampled) * 4);
  for (int64_t r = 0; r < sampled; ++r) {
    const bool gumbel = kinds[r] == RowSampling::kGumbel;
    const float temperature = gumbel ? temperatures[r] : 1.0f;
    const uint64_t seed = gumbel ? seeds[r] : 0;
    std::memcpy(&params[r], &temperature, 4);
    params[sampled + 2 * r] = static_cast<int32_t>(static_cast<uint32_t>(seed));
    params[sampled + 2 * r + 1] = static_cast<int32_t>(static_cast<uint32_t>(seed >> 32));
    params[3 * sampled + r] = gumbel ? steps[r] : 0;
  }
  int32_t* const base = static_cast<int32_t*>(gumbel_.data());
  COIL_RETURN_IF_ERROR(backend_.CopyFromHost(base, params.data(), params.size() * 4));
  const Device device = backend_.device();
  const Tensor logits(logits_.data(), ::coil::DType::kF32, {sampled, width}, device);
  int32_t* const answer = base + 4 * sampled;  // ids, then score words
  COIL_RETURN_IF_ERROR(backend_.GumbelArgmax(
      logits.Columns(0, valid), Tensor(base, ::coil::DType::kF32, {sampled}, device),
      Tensor(base + sampled, ::coil::DType::kI32, {sampled, 2}, device),
      Tensor(base + 3 * sampled, ::coil::DType::kI32, {sampled}, device), layout_.vocab.begin,
      Tensor(answer, ::coil::DType::kI32, {sampled}, device),
      Tensor(answer + sampled, ::coil::DType::kI32, {sampled, 2}, device)));
  std::vector<int32_t> result(static_cast<size_t>(sampled) * 3);
  COIL_RETURN_IF_ERROR(backend_.CopyToHost(result.data(), answer, result.size() * 4));
  for (int64_t r = 0; r < sampled; ++r) {
    if (kinds[r] != RowSampling::kGumbel) continue;
    const uint64_t bits = static_cast<uint64_t>(static_cast<uint32_t>(result[sampled + 2 * r])) |
                          (static_cast<uint64_t>(static_cast<uint32_t>(result[sampled + 2 * r + 1])) << 32);
    std::memcpy(&out.scores[r], &bits, sizeof(double));
    if (out.scores[r] != -std::numeric_limits<double>::infinity()) {
      out.ids[r] = result[r] + static_cast<int32_t>(layout_.vocab.begin);
      continue;
    }
    // No score above -inf: the host sampler's scan keeps the first non-NaN column (a -inf
    // score), or nothing when every column is NaN.
    COIL_ASSIGN_OR_RETURN(out.ids[r], FirstNonNanId(r, width, valid));
  }
  return absl::OkStatus();
}

}  // namespace coil::model
