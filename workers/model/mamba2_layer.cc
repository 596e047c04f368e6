#include "workers/model/mamba2_layer.h"

#include <utility>

namespace coil::model {

Mamba2Layer::Mamba2Layer(Mamba2Weights weights, const ModelConfig& config,
                         const ShardLayout& layout, int64_t state_index, bool bf16_rows)
    : w_(std::move(weights)),
      config_(config),
      layout_(layout),
      state_index_(state_index),
      bf16_rows_(bf16_rows),
      norm_eps_(config.format == ConfigFormat::kMambaSsm
                    ? 1e-5f  // mamba_ssm's RMSNormGated default
                    : static_cast<float>(config.norm_epsilon)) {
  scan_.chunk_size = config.chunk_size;
  scan_.dt_min = static_cast<float>(config.time_step_min);
  scan_.dt_max = static_cast<float>(config.time_step_max);
  // A bf16 model's chunked scan takes bf16 products (tensor cores on CUDA), as its matmuls
  // take bf16-rounded activations.
  scan_.bf16_products = bf16_rows;
  if (!layout.groups_whole()) {  // heads may start inside a group (ngroups % tp != 0)
    scan_.heads_per_group = layout.heads_per_group;
    scan_.first_head_in_group = layout.first_head_in_group();
  }
}

ScratchWidths Mamba2Layer::scratch() const {
  ScratchWidths widths;
  widths.a = layout_.in_proj_rows();   // z | xBC | dt
  widths.b = layout_.conv_channels();  // x | B | C after the conv
  widths.c = layout_.d_inner();        // y
  widths.d = config_.ngroups;          // the gated norm's sums of squares, by global group
  widths.rows16 = layout_.d_inner();   // out_proj's input
  return widths;
}

void Mamba2Layer::Forward(StepContext& ctx, const LayerStep& step, const Tensor& x,
                          const Tensor& out) const {
  Backend& backend = ctx.backend();
  const Device device = backend.device();
  const int64_t rows = step.rows;
  const int64_t e = layout_.d_inner(), cc = layout_.conv_channels(), h = layout_.heads();
  const int64_t bc = layout_.bc_width();
  const Tensor zxbcdt(step.scratch.a, ::coil::DType::kF32, {rows, layout_.in_proj_rows()}, device);
  const Tensor xbc(step.scratch.b, ::coil::DType::kF32, {rows, cc}, device);
  const Tensor y(step.scratch.c, ::coil::DType::kF32, {rows, e}, device);
  // With bf16 weights the gated norm writes out_proj's input as bf16 rows (what the matmul
  // would round it to), so no conversion runs between them.
  const Tensor out_proj_x =
      bf16_rows_ ? Tensor(step.scratch.rows16, ::coil::DType::kBF16, {rows, e}, device) : y;
  const Tensor z = zxbcdt.Columns(0, e);
  const Tensor xbc_in = zxbcdt.Columns(e, cc);
  const Tensor dt = zxbcdt.Columns(e + cc, h);
  const Tensor conv_state = step.states->ConvState(state_index_);
  const Tensor ssm_state = step.states->SsmState(state_index_);
  const RecurrentBatch& batch = *step.batch;

  ctx.Run([&] { return backend.Matmul(x, w_.in_proj, zxbcdt); });
  // A step of one-token runs takes the mixer as one op (one launch on CUDA), with the bits
  // of the ops it stands for: up to the norm's output when the heads hold their groups
  // whole, up to the sums of squares the ranks sharing a group all-reduce when they do not.
  const bool fused = step.fused_mixer && step.one_token_runs;
  if (fused && layout_.groups_whole()) {
    const MixerWeights weights{w_.conv_weight, w_.conv_bias, w_.a_log, w_.d, w_.dt_bias, w_.norm};
    ctx.Run([&] {
      return backend.MixerDecode(xbc_in, dt, z, weights, scan_, norm_eps_, batch, conv_state,
                                 ssm_state, xbc, y, out_proj_x);
    });
  } else if (fused) {
    const MixerWeights weights{w_.conv_weight, w_.conv_bias, w_.a_log, w_.d, w_.dt_bias, Tensor()};
    const Tensor sums = GroupSums(ctx, step);
    ctx.Run([&] {
      return backend.MixerDecodeSumSquares(xbc_in, dt, z, weights, scan_, batch, conv_state,
                                           ssm_state, xbc, y,
                                           sums.Columns(layout_.group_begin, layout_.groups()));
    });
    ApplyGroupNorm(ctx, step, y, sums, out_proj_x);
  } else {
    const Tensor xs = xbc.Columns(0, e);
    const Tensor b = xbc.Columns(e, bc);
    const Tensor c = xbc.Columns(e + bc, bc);
    ctx.Run([&] {
      return backend.CausalConv1d(xbc_in, w_.conv_weight, w_.conv_bias, batch, conv_state, xbc);
    });
    ctx.Run([&] {
      return backend.SsmScan(xs, dt, w_.a_log, b, c, w_.d, w_.dt_bias, scan_, batch, ssm_state, y);
    });
    GroupNorm(ctx, step, y, z, out_proj_x);
  }
  ctx.Run([&] { return backend.Matmul(out_proj_x, w_.out_proj, out); });
}

// rmsnorm(y * silu(z)) * w per group. When this rank holds part of a group, the group's
// sum of squares is the sum over the ranks that share it: each rank computes the partial
// sums of each group piece it holds into the group's global column of a [rows, ngroups]
// buffer whose other columns are zeroed, and one all-reduce adds them.
void Mamba2Layer::GroupNorm(StepContext& ctx, const LayerStep& step, const Tensor& y,
                            const Tensor& z, const Tensor& out) const {
  Backend& backend = ctx.backend();
  if (layout_.groups_whole()) {  // one pass: the same bits as the two halves
    ctx.Run([&] { return backend.GatedRmsNorm(y, z, w_.norm, layout_.groups(), norm_eps_, out); });
    return;
  }
  const Tensor sums = GroupSums(ctx, step);
  for (int64_t g = 0; g < layout_.groups(); ++g) {
    const auto [begin, width] = GroupColumns(g);
    ctx.Run([&] {
      return backend.GatedSumSquares(y.Columns(begin, width), z.Columns(begin, width), 1,
                                     y.Columns(begin, width),
                                     sums.Columns(layout_.group_begin + g, 1));
    });
  }
  ApplyGroupNorm(ctx, step, y, sums, out);
}

std::pair<int64_t, int64_t> Mamba2Layer::GroupColumns(int64_t g) const {
  SsmScanOptions split;  // as the scan reads groups when they are not whole
  split.heads_per_group = layout_.heads_per_group;
  split.first_head_in_group = layout_.first_head_in_group();
  const HeadRange heads = GroupHeads(split, layout_.heads(), layout_.groups(), g);
  return {heads.begin * config_.headdim, (heads.end - heads.begin) * config_.headdim};
}

Tensor Mamba2Layer::GroupSums(StepContext& ctx, const LayerStep& step) const {
  const int64_t g_all = config_.ngroups;
  const Tensor sums(step.scratch.d, ::coil::DType::kF32, {step.rows, g_all},
                    ctx.backend().device());
  // The columns of groups with no piece here must be zero for the all-reduce. When this
  // rank has a piece of every group (every released Mamba2 has one group, split across the
  // ranks) the sums fill every column, and the zeroing launch is saved.
  const bool every_column_written = layout_.group_begin == 0 && layout_.groups() == g_all;
  if (!every_column_written) {
    ctx.Run([&] {
      return ctx.backend().FillZero(sums.raw(), static_cast<size_t>(step.rows * g_all) * 4);
    });
  }
  return sums;
}

void Mamba2Layer::ApplyGroupNorm(StepContext& ctx, const LayerStep& step, const Tensor& gated,
                                 const Tensor& sums, const Tensor& out) const {
  ctx.AllReduce(sums.data<float>(), static_cast<size_t>(step.rows * config_.ngroups));
  const int64_t group_size = layout_.heads_per_group * config_.headdim;
  for (int64_t g = 0; g < layout_.groups(); ++g) {
    const auto [begin, width] = GroupColumns(g);
    const Tensor weight(w_.norm.data<float>() + begin, ::coil::DType::kF32, {width},
                        ctx.backend().device());
    ctx.Run([&] {
      return ctx.backend().GatedNormApply(gated.Columns(begin, width),
                                          sums.Columns(layout_.group_begin + g, 1), weight,
                                          group_size, norm_eps_, out.Columns(begin, width));
    });
  }
}

}  // namespace coil::model
