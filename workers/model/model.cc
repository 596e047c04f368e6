#include "workers/model/model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "workers/model/attention_layer.h"
#include "workers/model/mamba2_layer.h"
#include "workers/model/mlp_layer.h"

namespace coil::model {
namespace {

ScratchWidths Widest(const ScratchWidths& a, const ScratchWidths& b) {
  return {std::max(a.a, b.a), std::max(a.b, b.b), std::max(a.c, b.c), std::max(a.d, b.d),
          std::max(a.rows16, b.rows16)};
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const ModelFiles& files, Backend& backend,
                                                   comm::Communicator& comm,
                                                   const LoadOptions& options) {
  const ModelConfig& config = files.config;
  COIL_ASSIGN_OR_RETURN(ShardLayout layout, MakeShardLayout(config, comm.size(), comm.rank()));
  if (config.bias) {
    return absl::UnimplementedError(
        "in_proj/out_proj biases (bias / use_bias: true) are not supported; Mamba2 "
        "checkpoints normally have none");
  }
  if (!config.rms_norm) {
    return absl::UnimplementedError("rms_norm: false (LayerNorm blocks) is not supported");
  }
  auto model = std::unique_ptr<Model>(new Model(config, layout, backend, comm));
  model->fused_mixer_ = options.fused_mixer;
  COIL_RETURN_IF_ERROR(model->LoadWeights(*files.checkpoint, options));
  COIL_ASSIGN_OR_RETURN(model->agree_, backend.Allocate(sizeof(float)));
  return model;
}

absl::Status Model::LoadWeights(const checkpoint::Checkpoint& checkpoint,
                                const LoadOptions& options) {
  const ModelConfig& c = config_;
  const ShardLayout& s = layout_;
  const int64_t d = c.d_model;
  COIL_ASSIGN_OR_RETURN(weight_dtype_, ChooseWeightDType(checkpoint, c, options.weight_type));
  const bool bf16_rows = weight_dtype_ == ::coil::DType::kBF16;
  WeightLoader loader(checkpoint, backend_, weight_dtype_, weights_);

  // The vocab-parallel embedding (and lm_head): this rank's rows of the padded vocab.
  const checkpoint::RowSegment vocab_rows{s.vocab.begin, s.vocab.size()};
  COIL_ASSIGN_OR_RETURN(embedding_, loader.MatrixRows("embedding.weight", {&vocab_rows, 1}, d));
  if (c.tie_embeddings) {
    lm_head_ = embedding_;
  } else {
    COIL_ASSIGN_OR_RETURN(lm_head_, loader.MatrixRows("lm_head.weight", {&vocab_rows, 1}, d));
  }
  COIL_ASSIGN_OR_RETURN(norm_f_, loader.WholeVector("norm_f.weight", d));

  int64_t mamba_layers = 0, attention_layers = 0;
  widths_ = ScratchWidths{};
  widths_.rows16 = d;  // the block norms' output
  for (int64_t l = 0; l < c.n_layer; ++l) {
    COIL_ASSIGN_OR_RETURN(Tensor norm, loader.WholeVector(LayerTensorName(l, "norm.weight"), d));
    block_norms_.push_back(norm);
    std::unique_ptr<Layer> layer;
    switch (c.layer_kind(l)) {
      case LayerKind::kMamba2: {
        COIL_ASSIGN_OR_RETURN(Mamba2Weights weights, LoadMamba2Weights(loader, c, s, l));
        layer = std::make_unique<Mamba2Layer>(std::move(weights), c, s, mamba_layers++, bf16_rows);
        break;
      }
      case LayerKind::kAttention: {
        COIL_ASSIGN_OR_RETURN(AttentionWeights weights, LoadAttentionWeights(loader, c, s, l));
        layer =
            std::make_unique<AttentionLayer>(std::move(weights), s, attention_layers++, bf16_rows);
        break;
      }
      case LayerKind::kMlp: {
        COIL_ASSIGN_OR_RETURN(MlpWeights weights, LoadMlpWeights(loader, c, s, l));
        layer = std::make_unique<MlpLayer>(std::move(weights), s, bf16_rows);
        break;
      }
    }
    widths_ = Widest(widths_, layer->scratch());
    layers_.push_back(std::move(layer));
    if (options.progress) options.progress(l + 1, c.n_layer);
  }
  return absl::OkStatus();
}

StatePoolShape Model::StateShape(int64_t state_rows, DType ssm_dtype) const {
  return ShardStateShape(config_, layout_, state_rows, ssm_dtype);
}

KvCacheShape Model::KvShape(int64_t pages, int64_t block_size) const {
  return ShardKvShape(config_, layout_, pages, block_size, weight_dtype_);
}

absl::Status Model::EnsureScratch(int64_t rows, int64_t sampled_rows, int64_t meta_words) {
  if (rows <= scratch_rows_ && sampled_rows <= scratch_sampled_ &&
      meta_words <= scratch_meta_words_) {
    return absl::OkStatus();
  }
  const int64_t old_rows = scratch_rows_, old_sampled = scratch_sampled_,
                old_words = scratch_meta_words_;
  const absl::Status grown = GrowScratch(rows, sampled_rows, meta_words);
  if (collectives_.size() == 1) return grown;
  // One float all-reduced: how many ranks failed. A rank that failed to stage it still
  // joins the collective, and counts itself as failed.
  absl::Status local = grown;
  float failed = grown.ok() ? 0.0f : 1.0f;
  float* const flag = static_cast<float*>(agree_.data());  // allocated by Load
  absl::Status staged = backend_.CopyFromHost(flag, &failed, sizeof(float));
  COIL_RETURN_IF_ERROR(collectives_.AllReduce(flag, 1, &staged));
  if (staged.ok()) staged = backend_.CopyToHost(&failed, flag, sizeof(float));
  if (local.ok() && !staged.ok()) local = staged;
  if (local.ok() && failed != 0.0f) {
    local = absl::ResourceExhaustedError(absl::StrCat(
        static_cast<int>(failed), " other rank(s) could not grow the step scratch to ", rows,
        " rows; lower --max-batched-tokens or the state budget"));
  }
  if (!local.ok()) {
    // Every rank forgets this growth, so that all of them grow (and agree) again together.
    scratch_rows_ = std::min(scratch_rows_, old_rows);
    scratch_sampled_ = std::min(scratch_sampled_, old_sampled);
    scratch_meta_words_ = std::min(scratch_meta_words_, old_words);
    ++scratch_generation_;
  }
  return local;
}

absl::Status Model::GrowScratch(int64_t rows, int64_t sampled_rows, int64_t meta_words) {
  auto alloc = [&](Buffer& buffer, int64_t floats) -> absl::Status {
    COIL_ASSIGN_OR_RETURN(buffer, backend_.Allocate(static_cast<size_t>(floats) * 4));
    return absl::OkStatus();
  };
  if (rows > scratch_rows_ || meta_words > scratch_meta_words_) {
    ++scratch_generation_;  // before anything is freed: a partial failure drops the graphs too
    const int64_t words = std::max({MaxPackedWords(std::max(rows, scratch_rows_)), meta_words,
                                    scratch_meta_words_});
    COIL_RETURN_IF_ERROR(alloc(meta_, words));
    scratch_meta_words_ = words;
  }
  if (rows > scratch_rows_) {
    const int64_t d = config_.d_model;
    ++scratch_generation_;
    COIL_RETURN_IF_ERROR(alloc(residual_, rows * d));
    COIL_RETURN_IF_ERROR(alloc(normed_, rows * d));
    COIL_RETURN_IF_ERROR(alloc(block_out_, rows * d));
    COIL_RETURN_IF_ERROR(alloc(scratch_a_, rows * widths_.a));
    COIL_RETURN_IF_ERROR(alloc(scratch_b_, rows * widths_.b));
    COIL_RETURN_IF_ERROR(alloc(scratch_c_, rows * widths_.c));
    COIL_RETURN_IF_ERROR(alloc(scratch_d_, rows * widths_.d));
    if (weight_dtype_ == ::coil::DType::kBF16) {  // bf16 elements, two per float
      COIL_RETURN_IF_ERROR(alloc(rows16_, (rows * widths_.rows16 + 1) / 2));
    }
    scratch_rows_ = rows;
  }
  if (sampled_rows > scratch_sampled_) {
    ++scratch_generation_;
    COIL_ASSIGN_OR_RETURN(sampled_, backend_.Allocate(static_cast<size_t>(sampled_rows) * 4 *
                                                      config_.d_model));
    COIL_ASSIGN_OR_RETURN(logits_, backend_.Allocate(static_cast<size_t>(sampled_rows) * 4 *
                                                     layout_.vocab.size()));
    scratch_sampled_ = sampled_rows;
  }
  return absl::OkStatus();
}

absl::StatusOr<StepBatches> Model::UploadStep(const StepMetadata& meta) {
  PackStepMetadata(meta, packed_);
  if (static_cast<int64_t>(packed_.words.size()) > scratch_meta_words_) {
    return absl::InternalError(absl::StrCat("the step's metadata takes ", packed_.words.size(),
                                            " words but the block holds ", scratch_meta_words_));
  }
  COIL_RETURN_IF_ERROR(
      backend_.CopyFromHost(meta_.data(), packed_.words.data(), packed_.words.size() * 4));
  step_batch_ = meta.batch;  // reuses the vectors' capacity
  StepBatches batches;
  batches.recurrent = &step_batch_;
  const bool kv = meta.kv.block_size > 0;
  if (kv) {
    step_kv_ = meta.kv;
    batches.kv = &step_kv_;
  }
  if (backend_.device() != Device::kCpu) {
    const int32_t* words = static_cast<const int32_t*>(meta_.data());
    step_batch_.device_cu_seqlens = words + packed_.cu_seqlens;
    step_batch_.device_slots = words + packed_.slots;
    step_batch_.device_start_positions = words + packed_.start_positions;
    step_batch_.device_fresh = reinterpret_cast<const uint8_t*>(words + packed_.fresh);
    if (kv) {  // the runs and their starts are the recurrent batch's
      step_kv_.device_cu_seqlens = step_batch_.device_cu_seqlens;
      step_kv_.device_start_positions = step_batch_.device_start_positions;
      step_kv_.device_cu_blocks = words + packed_.cu_blocks;
      step_kv_.device_block_table = words + packed_.block_table;
    }
  }
  return batches;
}

Tensor Model::logits(int64_t sampled) const {
  return Tensor(logits_.data(), ::coil::DType::kF32, {sampled, layout_.vocab.size()},
                backend_.device());
}

void Model::Compute(StepContext& ctx, int64_t rows, int64_t sampled, bool all_rows,
                    const StepBatches& batches, const RankCaches& caches) {
  const RecurrentBatch& batch = *batches.recurrent;
  const Device device = backend_.device();
  const int64_t d = config_.d_model;
  const float eps = static_cast<float>(config_.norm_epsilon);
  int32_t* const words = static_cast<int32_t*>(meta_.data());
  const bool bf16_rows = weight_dtype_ == ::coil::DType::kBF16;

  const Tensor ids(words + packed_.token_ids, ::coil::DType::kI32, {rows}, device);
  const Tensor residual(residual_.data(), ::coil::DType::kF32, {rows, d}, device);
  const Tensor normed(normed_.data(), ::coil::DType::kF32, {rows, d}, device);
  const Tensor block_out(block_out_.data(), ::coil::DType::kF32, {rows, d}, device);
  // With bf16 weights the block norms write bf16 rows (what the layers' first matmuls would
  // round their input to), so no conversion runs between them.
  const Tensor layer_x =
      bf16_rows ? Tensor(rows16_.data(), ::coil::DType::kBF16, {rows, d}, device) : normed;

  LayerStep step;
  step.rows = rows;
  step.batch = &batch;
  step.states = caches.states;
  step.kv = batches.kv;
  step.kv_cache = caches.kv;
  step.fused_mixer = fused_mixer_;
  step.one_token_runs = true;
  for (int s = 0; s < batch.num_seqs() && step.one_token_runs; ++s) {
    step.one_token_runs = batch.run_length(s) == 1;
  }
  step.scratch = LayerScratch{static_cast<float*>(scratch_a_.data()),
                              static_cast<float*>(scratch_b_.data()),
                              static_cast<float*>(scratch_c_.data()),
                              static_cast<float*>(scratch_d_.data()), rows16_.data()};

  ctx.set_layer(kInputLayer);
  ctx.Run([&] { return backend_.Embedding(ids, embedding_, layout_.vocab.begin, residual); });
  ctx.AllReduce(residual.data<float>(), static_cast<size_t>(rows * d));
  for (size_t l = 0; l < layers_.size(); ++l) {
    ctx.set_layer(static_cast<int64_t>(l));
    ctx.Run([&] {
      return backend_.AddRmsNorm(l == 0 ? Tensor() : block_out, block_norms_[l], eps, residual,
                                 layer_x);
    });
    layers_[l]->Forward(ctx, step, layer_x, block_out);
    ctx.AllReduce(block_out.data<float>(), static_cast<size_t>(rows * d));
  }
  ctx.set_layer(kOutputLayer);
  // Every row sampled in order: the final norm feeds lm_head itself, as bf16 rows with bf16
  // weights (the bits the matmul would round it to). Otherwise lm_head takes the sampled
  // rows, gathered by the embedding lookup over `normed`.
  const bool head_bf16 = all_rows && lm_head_.dtype() == ::coil::DType::kBF16;
  Tensor head_in =
      head_bf16 ? Tensor(rows16_.data(), ::coil::DType::kBF16, {rows, d}, device) : normed;
  ctx.Run([&] { return backend_.AddRmsNorm(block_out, norm_f_, eps, residual, head_in); });
  if (sampled == 0) return;
  if (!all_rows) {
    const Tensor sample_ids(words + packed_.sample_rows, ::coil::DType::kI32, {sampled}, device);
    head_in = Tensor(sampled_.data(), ::coil::DType::kF32, {sampled, d}, device);
    ctx.Run([&] { return backend_.Embedding(sample_ids, normed, 0, head_in); });
  }
  ctx.Run([&] { return backend_.Matmul(head_in, lm_head_, logits(sampled)); });
}

absl::StatusOr<int64_t> Model::Run(const StepMetadata& meta, const RankCaches& caches,
                                   bool all_rows) {
  const int64_t rows = meta.num_tokens();
  const int64_t sampled = all_rows ? rows : meta.num_samples();
  all_rows = all_rows || SamplesEveryRow(meta);  // the same rows in the same order
  COIL_RETURN_IF_ERROR(EnsureScratch(rows, sampled, PackedWords(meta)));
  StepContext ctx(backend_, collectives_, /*collectives=*/true);
  absl::StatusOr<StepBatches> uploaded = UploadStep(meta);
  if (!uploaded.ok()) {
    // The ranks still make the step's collectives, on the host's copy of the batches.
    ctx.Fail(Annotate(uploaded.status(), "the step's metadata"));
    uploaded = StepBatches{&meta.batch, meta.kv.block_size > 0 ? &meta.kv : nullptr};
  }
  Compute(ctx, rows, sampled, all_rows, *uploaded, caches);
  COIL_RETURN_IF_ERROR(ctx.status());
  return sampled;
}

absl::Status Model::Forward(const StepMetadata& meta, const RankCaches& caches, bool all_rows,
                            std::vector<float>& logits) {
  if (meta.num_tokens() == 0) {
    logits.clear();
    return absl::OkStatus();
  }
  COIL_ASSIGN_OR_RETURN(const int64_t sampled, Run(meta, caches, all_rows));
  logits.resize(static_cast<size_t>(sampled * layout_.vocab.size()));
  return backend_.CopyToHost(logits.data(), logits_.data(), logits.size() * 4);
}

}  // namespace coil::model
