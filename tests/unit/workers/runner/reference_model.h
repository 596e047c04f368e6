// A float64 Mamba2 written straight from the equations (mamba_ssm's Mamba2 mixer, one token
// at a time), sharing no code with coil's kernels or model: the oracle the model tests
// compare logits against. Reads the whole, unsharded weights as f32.
#ifndef COIL_TESTS_UNIT_WORKERS_RUNNER_REFERENCE_MODEL_H_
#define COIL_TESTS_UNIT_WORKERS_RUNNER_REFERENCE_MODEL_H_

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
      return std::vector<double>(values->begin(), values->end());
    };
    embedding_ = read("embedding.weight");
    lm_head_ = c_.tie_embeddings ? embedding_ : read("lm_head.weight");
    norm_f_ = read("norm_f.weight");
    for (int64_t l = 0; l < c_.n_layer; ++l) {
      const std::string p = absl::StrCat("layers.", l, ".");
      Layer layer;
      layer.norm = read(p + "norm.weight");
      layer.in_proj = read(p + "mixer.in_proj.weight");
      layer.conv_w = read(p + "mixer.conv1d.weight");
      layer.conv_b = c_.conv_bias ? read(p + "mixer.conv1d.bias")
                                  : std::vector<double>(static_cast<size_t>(c_.conv_dim()), 0.0);
      layer.dt_bias = read(p + "mixer.dt_bias");
      layer.a_log = read(p + "mixer.A_log");
      layer.d = read(p + "mixer.D");
      layer.mnorm = read(p + "mixer.norm.weight");
      layer.out_proj = read(p + "mixer.out_proj.weight");
      layers_.push_back(std::move(layer));
    }
    Reset();
  }

  void Reset() {
    conv_.assign(static_cast<size_t>(c_.n_layer),
                 std::vector<double>(static_cast<size_t>((c_.d_conv - 1) * c_.conv_dim()), 0.0));
    ssm_.assign(static_cast<size_t>(c_.n_layer),
                std::vector<double>(static_cast<size_t>(c_.nheads() * c_.headdim * c_.d_state), 0.0));
  }

  // Feeds one token; returns the logits row over the padded vocabulary.
  std::vector<double> Step(int32_t token) {
    const int64_t d = c_.d_model, e = c_.d_inner(), h = c_.nheads(), p = c_.headdim;
    const int64_t n = c_.d_state, g = c_.ngroups, w = c_.d_conv, cdim = c_.conv_dim();
    const double eps = c_.norm_epsilon;
    const double mixer_eps = c_.format == model::ConfigFormat::kHuggingFace ? eps : 1e-5;
    std::vector<double> hidden(embedding_.begin() + token * d, embedding_.begin() + (token + 1) * d);
    std::vector<double> residual(static_cast<size_t>(d), 0.0);
    for (int64_t l = 0; l < c_.n_layer; ++l) {
      const Layer& L = layers_[static_cast<size_t>(l)];
      for (int64_t i = 0; i < d; ++i) residual[i] += hidden[i];
      const std::vector<double> x_in = RmsNorm(residual, L.norm, eps);
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
      hidden = MatVec(L.out_proj, y, d, e);
    }
    for (int64_t i = 0; i < d; ++i) residual[i] += hidden[i];
    const std::vector<double> final_norm = RmsNorm(residual, norm_f_, eps);
    return MatVec(lm_head_, final_norm, c_.padded_vocab_size(), d);
  }

 private:
  struct Layer {
    std::vector<double> norm, in_proj, conv_w, conv_b, dt_bias, a_log, d, mnorm, out_proj;
  };

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
};

}  // namespace coil::testing_reference

#endif  // COIL_TESTS_UNIT_WORKERS_RUNNER_REFERENCE_MODEL_H_
