// Causal depthwise conv1d with bias and SiLU over varlen packed runs (causal_conv1d_fn
// with a conv state, as mamba_ssm's Mamba2 uses it). Each output element sums
// bias + w[0] in[t-W+1] + ... + w[W-1] in[t] in that order, whatever the batch.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vec_math.h"

namespace coil {
namespace {

// One output row over channels [0, n): acc = bias, then each tap in order, then SiLU.
// rows[k] points at the input row of tap k (already offset to this channel block).
COIL_VECTORIZE void ConvRow(const float* const* rows, const float* weight_t, int64_t stride_w,
                            int width, const float* bias, float* out, int64_t n) {
  for (int64_t c = 0; c < n; ++c) out[c] = bias[c];
  for (int k = 0; k < width; ++k) {
    const float* in = rows[k];
    const float* w = weight_t + k * stride_w;
    for (int64_t c = 0; c < n; ++c) out[c] = out[c] + w[c] * in[c];
  }
  for (int64_t c = 0; c < n; ++c) out[c] = SiluF(out[c]);
}

// ConvRow for width 4 (Mamba2's d_conv) in one pass: the same sums in the same order, with
// no partial sums stored between the taps.
COIL_VECTORIZE void ConvRow4(const float* const* rows, const float* weight_t, int64_t stride_w,
                             const float* bias, float* out, int64_t n) {
  const float *in0 = rows[0], *in1 = rows[1], *in2 = rows[2], *in3 = rows[3];
  const float *w0 = weight_t, *w1 = w0 + stride_w, *w2 = w1 + stride_w, *w3 = w2 + stride_w;
  for (int64_t c = 0; c < n; ++c) {
    float acc = bias[c];
    acc = acc + w0[c] * in0[c];
    acc = acc + w1[c] * in1[c];
    acc = acc + w2[c] * in2[c];
    acc = acc + w3[c] * in3[c];
    out[c] = SiluF(acc);
  }
}

}  // namespace

void CpuCausalConv1d(const CpuContext& ctx, const Tensor& x, const Tensor& weight,
                     const Tensor& bias, const RecurrentBatch& batch, const Tensor& conv_state,
                     const Tensor& out) {
  const int64_t channels = x.dim(1);
  const int width = static_cast<int>(weight.dim(1));
  const int hist = width - 1;
  const int64_t state_rows = conv_state.dim(0) - 1;
  // Taps laid out [W, C] so the inner loops run over channels.
  std::vector<float> weight_t(static_cast<size_t>(width * channels));
  for (int64_t c = 0; c < channels; ++c) {
    for (int k = 0; k < width; ++k)
      weight_t[k * channels + c] = weight.data<float>()[c * width + k];
  }
  const float* bias_p = bias.data<float>();
  constexpr int64_t kBlock = 128;  // channels per task: taps and history stay in L1
  ctx.pool->ParallelFor(channels, kBlock, [&](int64_t c_begin, int64_t c_end) {
    std::vector<float> history(static_cast<size_t>(hist * kBlock));
    std::vector<const float*> rows(width);
    for (int64_t c0 = c_begin; c0 < c_end; c0 += kBlock) {
      const int64_t n = std::min(kBlock, c_end - c0);
      for (int s = 0; s < batch.num_seqs(); ++s) {
        const int64_t begin = batch.run_begin(s), length = batch.run_length(s);
        const int32_t slot = batch.slots[s];
        // The scratch row is never read (and, on the CPU, never written).
        const bool zero_history = batch.fresh[s] != 0 || slot == state_rows;
        float* state = conv_state.data<float>() + slot * hist * channels;
        // Copy the history first: the state is overwritten below.
        for (int j = 0; j < hist; ++j) {
          for (int64_t c = 0; c < n; ++c) {
            history[j * kBlock + c] = zero_history ? 0.0f : state[j * channels + c0 + c];
          }
        }
        // Input row i of the window [history (hist rows) | run (length rows)].
        auto window_row = [&](int64_t i) -> const float* {
          return i < hist ? history.data() + i * kBlock : RowF32(x, begin + i - hist) + c0;
        };
        for (int64_t t = 0; t < length; ++t) {
          for (int k = 0; k < width; ++k) rows[k] = window_row(t + k);
          if (ctx.use_ref) {
            float* o = RowF32(out, begin + t) + c0;
            for (int64_t c = 0; c < n; ++c) {
              float acc = bias_p[c0 + c];
              for (int k = 0; k < width; ++k) {
                acc = acc + weight.data<float>()[(c0 + c) * width + k] * rows[k][c];
              }
              o[c] = acc / (1.0f + std::exp(-acc));
            }
          } else if (width == 4) {
            ConvRow4(rows.data(), weight_t.data() + c0, channels, bias_p + c0,
                     RowF32(out, begin + t) + c0, n);
          } else {
            ConvRow(rows.data(), weight_t.data() + c0, channels, width, bias_p + c0,
                    RowF32(out, begin + t) + c0, n);
          }
        }
        if (slot == state_rows) continue;
        // The new history: the last `hist` rows of the window.
        for (int j = 0; j < hist; ++j) {
          const float* src = window_row(length + j);
          for (int64_t c = 0; c < n; ++c) state[j * channels + c0 + c] = src[c];
        }
      }
    }
  });
}

}  // namespace coil
