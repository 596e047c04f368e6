// DeviceSampler: what a rank answers about its sampled rows' logits without copying them to
// the host, beside the Sampler that merges the answers across ranks. Per sampled row: the
// argmax over this rank's real-vocabulary columns (ids below the real vocabulary size), its
// global id (the lowest among equal maxima, NaN never chosen) and value; or the Gumbel-max
// (Backend::GumbelArgmax with the row's temperature, seed and step), its global id and f64
// score. Id -1 where this rank holds no real column or the row has no non-NaN value (a row
// of -inf gives its first non-NaN id and -inf). That is what greedy and plain temperature
// sampling merge across ranks (Sampler::SampleGreedy, SampleGumbel): only [rows] pairs
// leave the device. Rows the host sampler needs whole come back alone, gathered on the
// device. Its buffers are its own (never captured in a graph), grown as needed.
#ifndef COIL_WORKERS_DEVICE_SAMPLER_H_
#define COIL_WORKERS_DEVICE_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "kernels/tensor.h"
#include "workers/vocab_partition.h"

namespace coil {

class DeviceSampler {
 public:
  // `range`: this rank's columns of the padded vocabulary; `vocab_size`: the real one.
  DeviceSampler(Backend& backend, VocabRange range, int64_t vocab_size)
      : backend_(backend), range_(range), vocab_size_(vocab_size) {}

  // How one sampled row's token is taken: from its logits on the host, or from this rank's
  // device argmax (greedy) or Gumbel-max (plain temperature) answer.
  enum class RowSampling : uint8_t { kHost, kArgmax, kGumbel };
  // What Answer hands the sampler, per sampled row r (kinds[r] says which fields).
  struct RowAnswers {
    std::vector<float> host_logits;  // [kHost rows, this rank's width], in row order
    std::vector<int32_t> ids;        // kArgmax, kGumbel: the global id, or -1 (none here)
    std::vector<float> values;       // kArgmax: the value
    std::vector<double> scores;      // kGumbel: the f64 score
  };

  // Answers each row of `logits` (f32 [sampled, range.size()], backend memory, after the
  // step that wrote it) as kinds[r] says; temperatures, seeds and steps are read for kGumbel
  // rows only. Only the kHost rows' logits come to the host, so a step mixing greedy, plain
  // and other rows copies the others' rows alone.
  absl::Status Answer(const Tensor& logits, const std::vector<RowSampling>& kinds,
                      const std::vector<float>& temperatures, const std::vector<uint64_t>& seeds,
                      const std::vector<int32_t>& steps, RowAnswers& out);

 private:
  // The global id of the first non-NaN column among the `valid` real ones of row `r`, or -1
  // when all are NaN.
  absl::StatusOr<int32_t> FirstNonNanId(const Tensor& logits, int64_t r, int64_t valid);
  // The host rows' logits, gathered on the device into gather_ and copied at once.
  absl::Status GatherHostRows(const Tensor& logits, const std::vector<RowSampling>& kinds,
                              int64_t host_rows, RowAnswers& out);
  // The device answers over every row, kept for the rows of their kind.
  absl::Status DeviceArgmax(const Tensor& logits, const std::vector<RowSampling>& kinds,
                            int64_t valid, RowAnswers& out);
  absl::Status DeviceGumbel(const Tensor& logits, const std::vector<RowSampling>& kinds,
                            int64_t valid, const std::vector<float>& temperatures,
                            const std::vector<uint64_t>& seeds, const std::vector<int32_t>& steps,
                            RowAnswers& out);
  // Grows the answer buffers to `rows` rows.
  absl::Status Reserve(int64_t rows);

  Backend& backend_;
  VocabRange range_;
  int64_t vocab_size_;
  int64_t rows_ = 0;  // what argmax_ and gumbel_ hold
  // Argmax output: [rows] i32 ids, then [rows] f32 values.
  Buffer argmax_;
  // GumbelArgmax: [rows] f32 temperatures, [rows, 2] i32 seeds, [rows] i32 steps (one
  // upload), then [rows] i32 ids and [rows, 2] i32 score bits (one download).
  Buffer gumbel_;
  // The host rows' gather: [rows] int32 row indices, then [rows, width] floats.
  Buffer gather_;
  int64_t gather_rows_ = 0;
};

}  // namespace coil

#endif  // COIL_WORKERS_DEVICE_SAMPLER_H_
