#include "workers/device_sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace coil {

absl::Status DeviceSampler::Reserve(int64_t rows) {
  if (rows <= rows_) return absl::OkStatus();
  COIL_ASSIGN_OR_RETURN(argmax_, backend_.Allocate(static_cast<size_t>(rows) * 8));
  COIL_ASSIGN_OR_RETURN(gumbel_, backend_.Allocate(static_cast<size_t>(rows) * 28));
  rows_ = rows;
  return absl::OkStatus();
}

absl::Status DeviceSampler::Answer(const Tensor& logits, const std::vector<RowSampling>& kinds,
                                   const std::vector<float>& temperatures,
                                   const std::vector<uint64_t>& seeds,
                                   const std::vector<int32_t>& steps, RowAnswers& out) {
  const int64_t sampled = logits.dim(0);
  if (kinds.size() != static_cast<size_t>(sampled)) {
    return absl::InternalError(
        absl::StrCat("the step samples ", sampled, " rows but got ", kinds.size(), " kinds"));
  }
  const auto count = [&](RowSampling kind) { return std::count(kinds.begin(), kinds.end(), kind); };
  const int64_t host_rows = count(RowSampling::kHost);
  const int64_t width = range_.size();
  out.ids.assign(static_cast<size_t>(sampled), -1);
  out.values.assign(static_cast<size_t>(sampled), -std::numeric_limits<float>::infinity());
  out.scores.assign(static_cast<size_t>(sampled), -std::numeric_limits<double>::infinity());
  out.host_logits.resize(static_cast<size_t>(host_rows * width));
  if (sampled == 0) return absl::OkStatus();
  if (host_rows == sampled) {  // one copy of the whole block
    return backend_.CopyToHost(out.host_logits.data(), logits.raw(), out.host_logits.size() * 4);
  }
  if (host_rows > 0) COIL_RETURN_IF_ERROR(GatherHostRows(logits, kinds, host_rows, out));
  // Padded vocabulary ids (>= vocab_size) are never chosen: only the real columns.
  const int64_t valid = std::clamp<int64_t>(vocab_size_ - range_.begin, 0, width);
  if (valid == 0) return absl::OkStatus();
  COIL_RETURN_IF_ERROR(Reserve(sampled));
  // The device answers are taken over every sampled row (a pass over the logits either
  // way) and kept for the rows of their kind.
  if (count(RowSampling::kArgmax) > 0) COIL_RETURN_IF_ERROR(DeviceArgmax(logits, kinds, valid, out));
  if (count(RowSampling::kGumbel) > 0) {
    COIL_RETURN_IF_ERROR(DeviceGumbel(logits, kinds, valid, temperatures, seeds, steps, out));
  }
  return absl::OkStatus();
}

absl::StatusOr<int32_t> DeviceSampler::FirstNonNanId(const Tensor& logits, int64_t r,
                                                     int64_t valid) {
  // Rare (a row without a value above -inf): read the row back.
  std::vector<float> row(static_cast<size_t>(valid));
  COIL_RETURN_IF_ERROR(backend_.CopyToHost(row.data(), logits.data<float>() + r * logits.dim(1),
                                           row.size() * 4));
  for (int64_t i = 0; i < valid; ++i) {
    if (!std::isnan(row[i])) return static_cast<int32_t>(range_.begin + i);
  }
  return -1;
}

absl::Status DeviceSampler::GatherHostRows(const Tensor& logits,
                                           const std::vector<RowSampling>& kinds,
                                           int64_t host_rows, RowAnswers& out) {
  // The rows are gathered on the device (Embedding over the logits as a table: an exact
  // copy of f32 rows) and come back in one copy, however they interleave with the others.
  const int64_t sampled = logits.dim(0);
  const int64_t width = range_.size();
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
  COIL_RETURN_IF_ERROR(backend_.Embedding(Tensor(ids, DType::kI32, {host_rows}, device), logits,
                                          0, Tensor(rows, DType::kF32, {host_rows, width}, device)));
  return backend_.CopyToHost(out.host_logits.data(), rows, out.host_logits.size() * 4);
}

absl::Status DeviceSampler::DeviceArgmax(const Tensor& logits,
                                         const std::vector<RowSampling>& kinds, int64_t valid,
                                         RowAnswers& out) {
  const Device device = backend_.device();
  const int64_t sampled = logits.dim(0);
  int32_t* const out_ids = static_cast<int32_t*>(argmax_.data());
  float* const out_values = reinterpret_cast<float*>(out_ids + sampled);
  COIL_RETURN_IF_ERROR(backend_.Argmax(logits.Columns(0, valid),
                                       Tensor(out_ids, DType::kI32, {sampled}, device),
                                       Tensor(out_values, DType::kF32, {sampled}, device)));
  // ids then values, adjacent: one copy (one wait for the stream) per step.
  std::vector<int32_t> answer(static_cast<size_t>(sampled) * 2);
  COIL_RETURN_IF_ERROR(backend_.CopyToHost(answer.data(), out_ids, answer.size() * 4));
  for (int64_t r = 0; r < sampled; ++r) {
    if (kinds[r] != RowSampling::kArgmax) continue;
    std::memcpy(&out.values[r], &answer[sampled + r], sizeof(float));
    if (out.values[r] != -std::numeric_limits<float>::infinity()) {
      out.ids[r] = answer[r] + static_cast<int32_t>(range_.begin);
      continue;
    }
    // No value above -inf: Argmax answers index 0, but the greedy rule takes the first
    // non-NaN column (a -inf), or nothing when every column is NaN.
    COIL_ASSIGN_OR_RETURN(out.ids[r], FirstNonNanId(logits, r, valid));
  }
  return absl::OkStatus();
}

absl::Status DeviceSampler::DeviceGumbel(const Tensor& logits,
                                         const std::vector<RowSampling>& kinds, int64_t valid,
                                         const std::vector<float>& temperatures,
                                         const std::vector<uint64_t>& seeds,
                                         const std::vector<int32_t>& steps, RowAnswers& out) {
  const int64_t sampled = logits.dim(0);
  if (temperatures.size() != static_cast<size_t>(sampled) || seeds.size() != temperatures.size() ||
      steps.size() != temperatures.size()) {
    return absl::InternalError(absl::StrCat("gumbel sampling got ", temperatures.size(),
                                            " temperatures, ", seeds.size(), " seeds and ",
                                            steps.size(), " steps for ", sampled, " rows"));
  }
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
  int32_t* const answer = base + 4 * sampled;  // ids, then score words
  COIL_RETURN_IF_ERROR(backend_.GumbelArgmax(
      logits.Columns(0, valid), Tensor(base, DType::kF32, {sampled}, device),
      Tensor(base + sampled, DType::kI32, {sampled, 2}, device),
      Tensor(base + 3 * sampled, DType::kI32, {sampled}, device), range_.begin,
      Tensor(answer, DType::kI32, {sampled}, device),
      Tensor(answer + sampled, DType::kI32, {sampled, 2}, device)));
  std::vector<int32_t> result(static_cast<size_t>(sampled) * 3);
  COIL_RETURN_IF_ERROR(backend_.CopyToHost(result.data(), answer, result.size() * 4));
  for (int64_t r = 0; r < sampled; ++r) {
    if (kinds[r] != RowSampling::kGumbel) continue;
    const uint64_t bits = static_cast<uint64_t>(static_cast<uint32_t>(result[sampled + 2 * r])) |
                          (static_cast<uint64_t>(static_cast<uint32_t>(result[sampled + 2 * r + 1])) << 32);
    std::memcpy(&out.scores[r], &bits, sizeof(double));
    if (out.scores[r] != -std::numeric_limits<double>::infinity()) {
      out.ids[r] = result[r] + static_cast<int32_t>(range_.begin);
      continue;
    }
    // No score above -inf: the host sampler's scan keeps the first non-NaN column (a -inf
    // score), or nothing when every column is NaN.
    COIL_ASSIGN_OR_RETURN(out.ids[r], FirstNonNanId(logits, r, valid));
  }
  return absl::OkStatus();
}

}  // namespace coil
