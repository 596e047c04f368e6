// A float64 model written straight from the equations, one token at a time, sharing no code
// with coil's kernels or model: the oracle the model tests compare logits against. Reads the
// whole, unsharded weights as f32. Every block is h + mixer(RMSNorm(h)), then norm_f and the
// lm_head, with the mixer of the block's kind:
//   Mamba2 (mamba_ssm's mixer): in_proj -> [z | xBC | dt]; xBC = silu(conv1d(xBC)) with the
//     last d_conv - 1 inputs as history; per head the recurrence state = state * exp(A dt) +
//     dt x (x) B, y = state C + D x; y = rmsnorm(y * silu(z)) per group * w; out_proj(y).
//   Attention (Nemotron-H): q, k, v projections; query head h reads KV head h / (H / KVH);
//     o_h = sum_j softmax_j(q_h . k_j / sqrt(head_dim)) v_j over the positions so far (no
//     positional encoding); o_proj(o).
//   MLP (Nemotron-H): down(max(up(x), 0)^2).
#ifndef COIL_TESTS_UNIT_WORKERS_RUNNER_REFERENCE_MODEL_H_
#define COIL_TESTS_UNIT_WORKERS_RUNNER_REFERENCE_MODEL_H_

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "workers/model/model_files.h"

namespace coil::testing_reference {

class ReferenceModel {
 public:
  explicit ReferenceModel(const model::ModelFiles& files) : c_(files.config) {
    auto read = [&](const std::string& name) {
      auto values = files.checkpoint->ReadF32(name);
      EXPECT_TRUE(values.ok()) << values.status();
      if (!values.ok()) return std::vector<double>();
      return std::vector<double>(values->begin(), values->end());
    };
    embedding_ = read("embedding.weight");
    lm_head_ = c_.tie_embeddings ? embedding_ : read("lm_head.weight");
    norm_f_ = read("norm_f.weight");
    for (int64_t l = 0; l < c_.n_layer; ++l) {
      const std::string p = absl::StrCat("layers.", l, ".");
      Layer layer;
      layer.kind = c_.layer_kind(l);
      layer.norm = read(p + "norm.weight");
      switch (layer.kind) {
        case model::LayerKind::kMamba2:
          layer.in_proj = read(p + "mixer.in_proj.weight");
          layer.conv_w = read(p + "mixer.conv1d.weight");
          layer.conv_b = c_.conv_bias
                             ? read(p + "mixer.conv1d.bias")
                             : std::vector<double>(static_cast<size_t>(c_.conv_dim()), 0.0);
          layer.dt_bias = read(p + "mixer.dt_bias");
          layer.a_log = read(p + "mixer.A_log");
          layer.d = read(p + "mixer.D");
          layer.mnorm = read(p + "mixer.norm.weight");
          layer.out_proj = read(p + "mixer.out_proj.weight");
          break;
        case model::LayerKind::kAttention:
          layer.q = read(p + "mixer.q_proj.weight");
          layer.k = read(p + "mixer.k_proj.weight");
          layer.v = read(p + "mixer.v_proj.weight");
          layer.o = read(p + "mixer.o_proj.weight");
          break;
        case model::LayerKind::kMlp:
          layer.up = read(p + "mixer.up_proj.weight");
          layer.down = read(p + "mixer.down_proj.weight");
          break;
      }
      layers_.push_back(std::move(layer));
    }
    Reset();
  }

  // Forgets every token fed so far (a new sequence).
  void Reset() {
    conv_.assign(static_cast<size_t>(c_.n_layer),
                 std::vector<double>(static_cast<size_t>((c_.d_conv - 1) * c_.conv_dim()), 0.0));
    ssm_.assign(static_cast<size_t>(c_.n_layer),
                std::vector<double>(static_cast<size_t>(c_.nheads() * c_.headdim * c_.d_state), 0.0));
    keys_.assign(static_cast<size_t>(c_.n_layer), {});
    values_.assign(static_cast<size_t>(c_.n_layer), {});
  }

  // Feeds one token; returns the logits row over the padded vocabulary.
  std::vector<double> Step(int32_t token) {
    const int64_t d = c_.d_model;
    const double eps = c_.norm_epsilon;
    std::vector<double> hidden(embedding_.begin() + token * d, embedding_.begin() + (token + 1) * d);
    std::vector<double> residual(static_cast<size_t>(d), 0.0);
    for (int64_t l = 0; l < c_.n_layer; ++l) {
      const Layer& L = layers_[static_cast<size_t>(l)];
      for (int64_t i = 0; i < d; ++i) residual[i] += hidden[i];
      const std::vector<double> x = RmsNorm(residual, L.norm, eps);
      switch (L.kind) {
        case model::LayerKind::kMamba2:
          hidden = Mamba2(L, l, x);
          break;
        case model::LayerKind::kAttention:
          hidden = Attention(L, l, x);
          break;
        case model::LayerKind::kMlp:
          hidden = Mlp(L, x);
          break;
      }
    }
    for (int64_t i = 0; i < d; ++i) residual[i] += hidden[i];
    const std::vector<double> final_norm = RmsNorm(residual, norm_f_, eps);
    return MatVec(lm_head_, final_norm, c_.padded_vocab_size(), d);
  }

 private:
  struct Layer {
    model::LayerKind kind = model::LayerKind::kMamba2;
    std::vector<double> norm;
    std::vector<double> in_proj, conv_w, conv_b, dt_bias, a_log, d, mnorm, out_proj;  // Mamba2
    std::vector<double> q, k, v, o;                                                   // attention
    std::vector<double> up, down;                                                     // MLP
  };

  std::vector<double> Mamba2(const Layer& L, int64_t l, const std::vector<double>& x_in) {
    const int64_t d = c_.d_model, e = c_.d_inner(), h = c_.nheads(), p = c_.headdim;
    const int64_t n = c_.d_state, g = c_.ngroups, w = c_.d_conv, cdim = c_.conv_dim();
    // mamba_ssm's RMSNormGated default; Hugging Face's mixers take layer_norm_epsilon.
    const double mixer_eps = c_.format == model::ConfigFormat::kMambaSsm ? 1e-5 : c_.norm_epsilon;
    std::vector<double> proj = MatVec(L.in_proj, x_in, c_.d_in_proj(), d);
    // conv over [x | B | C] with the last w - 1 inputs as history
    std::vector<double>& hist = conv_[static_cast<size_t>(l)];
    std::vector<double> conv_out(static_cast<size_t>(cdim));
    for (int64_t ch = 0; ch < cdim; ++ch) {
      const double now = proj[e + ch];
      double acc = L.conv_b[ch];
      for (int64_t k = 0; k < w - 1; ++k) acc += L.conv_w[ch * w + k] * hist[k * cdim + ch];
      acc += L.conv_w[ch * w + (w - 1)] * now;
      conv_out[ch] = acc / (1.0 + std::exp(-acc));
      for (int64_t k = 0; k + 1 < w - 1; ++k) hist[k * cdim + ch] = hist[(k + 1) * cdim + ch];
      hist[(w - 2) * cdim + ch] = now;
    }
    std::vector<double> y(static_cast<size_t>(e));
    std::vector<double>& s = ssm_[static_cast<size_t>(l)];
    for (int64_t hh = 0; hh < h; ++hh) {
      const int64_t grp = hh / (h / g);
      const double raw = proj[e + cdim + hh] + L.dt_bias[hh];
      double dt = raw > 20.0 ? raw : std::log1p(std::exp(raw));
      dt = std::min(std::max(dt, c_.time_step_min), c_.time_step_max);
      const double decay = std::exp(-std::exp(L.a_log[hh]) * dt);
      for (int64_t pp = 0; pp < p; ++pp) {
        const double xv = conv_out[hh * p + pp];
        double acc = 0.0;
        for (int64_t nn = 0; nn < n; ++nn) {
          double& st = s[(hh * p + pp) * n + nn];
          st = st * decay + dt * xv * conv_out[e + grp * n + nn];
          acc += st * conv_out[e + g * n + grp * n + nn];
        }
        y[hh * p + pp] = acc + L.d[hh] * xv;
      }
    }
    const int64_t group = e / g;
    for (int64_t grp = 0; grp < g; ++grp) {
      double sumsq = 0.0;
      for (int64_t i = grp * group; i < (grp + 1) * group; ++i) {
        const double z = proj[i];
        y[i] *= z / (1.0 + std::exp(-z));
        sumsq += y[i] * y[i];
      }
      const double scale = 1.0 / std::sqrt(sumsq / static_cast<double>(group) + mixer_eps);
      for (int64_t i = grp * group; i < (grp + 1) * group; ++i) y[i] *= scale * L.mnorm[i];
    }
    return MatVec(L.out_proj, y, d, e);
  }

  std::vector<double> Attention(const Layer& L, int64_t l, const std::vector<double>& x) {
    const int64_t d = c_.d_model, heads = c_.attention_heads, kv_heads = c_.kv_heads;
    const int64_t dh = c_.attention_head_dim;
    const std::vector<double> q = MatVec(L.q, x, heads * dh, d);
    std::vector<std::vector<double>>& keys = keys_[static_cast<size_t>(l)];
    std::vector<std::vector<double>>& values = values_[static_cast<size_t>(l)];
    keys.push_back(MatVec(L.k, x, kv_heads * dh, d));  // this position's, then attended
    values.push_back(MatVec(L.v, x, kv_heads * dh, d));
    const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
    std::vector<double> o(static_cast<size_t>(heads * dh), 0.0);
    for (int64_t hh = 0; hh < heads; ++hh) {
      const int64_t g = hh / (heads / kv_heads);
      std::vector<double> scores(keys.size());
      double top = -INFINITY;
      for (size_t j = 0; j < keys.size(); ++j) {
        double dot = 0.0;
        for (int64_t i = 0; i < dh; ++i) dot += q[hh * dh + i] * keys[j][g * dh + i];
        scores[j] = dot * scale;
        top = std::max(top, scores[j]);
      }
      double total = 0.0;
      for (double& score : scores) total += (score = std::exp(score - top));
      for (size_t j = 0; j < keys.size(); ++j) {
        for (int64_t i = 0; i < dh; ++i)
          o[hh * dh + i] += scores[j] / total * values[j][g * dh + i];
      }
    }
    return MatVec(L.o, o, d, heads * dh);
  }

  std::vector<double> Mlp(const Layer& L, const std::vector<double>& x) {
    const int64_t d = c_.d_model, inter = c_.intermediate_size;
    std::vector<double> up = MatVec(L.up, x, inter, d);
    for (double& u : up) u = u > 0.0 ? u * u : 0.0;
    return MatVec(L.down, up, d, inter);
  }

  static std::vector<double> RmsNorm(const std::vector<double>& x, const std::vector<double>& w,
                                     double eps) {
    double sumsq = 0.0;
    for (double v : x) sumsq += v * v;
    const double scale = 1.0 / std::sqrt(sumsq / static_cast<double>(x.size()) + eps);
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * scale * w[i];
    return out;
  }

  static std::vector<double> MatVec(const std::vector<double>& m, const std::vector<double>& v,
                                    int64_t rows, int64_t cols) {
    std::vector<double> out(static_cast<size_t>(rows), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0.0;
      for (int64_t k = 0; k < cols; ++k) acc += m[r * cols + k] * v[k];
      out[r] = acc;
    }
    return out;
  }

  model::ModelConfig c_;
  std::vector<double> embedding_, lm_head_, norm_f_;
  std::vector<Layer> layers_;
  std::vector<std::vector<double>> conv_, ssm_;
  // Per attention layer, every position's K and V rows so far.
  std::vector<std::vector<std::vector<double>>> keys_, values_;
};

}  // namespace coil::testing_reference

#endif  // COIL_TESTS_UNIT_WORKERS_RUNNER_REFERENCE_MODEL_H_
