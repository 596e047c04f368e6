// Mamba2Model: one rank's shard of a Mamba2 language model and its forward pass.
//
//   embedding -> for each layer: residual += mixer_out; h = rmsnorm(residual) -> mixer(h)
//   -> residual += mixer_out; rmsnorm_f(residual) -> lm_head (sampled rows only)
//   mixer: in_proj -> [z | xBC | dt]; xBC = silu(conv1d(xBC)) -> [x | B | C];
//          y = ssm_scan(x, dt, B, C); y = rmsnorm_grouped(y * silu(z)) * w; out_proj(y)
//
// The residual stream stays fp32. Weights are this rank's slices (ShardLayout), read from
// the memory-mapped checkpoint once; the collectives of tensor parallelism are: the
// embedding and every out_proj output all-reduced, and the gated norm's per-group sums of
// squares all-reduced when a group spans ranks. Activations are step scratch, grown to the
// largest step seen and reused.
//
// Each step's metadata (token ids, the RecurrentBatch, the sample rows) is packed and uploaded in
// one copy; the RecurrentBatch's device mirrors point into that block, so no op uploads anything.
// On a backend with graphs (CUDA), a decode-only step of n sequences is padded to its power-of-two
// bucket with scratch-row entries and replays the bucket's graph, captured on first use on a batch
// of scratch-row entries only (docs/ARCHITECTURE.md §4). Every address a graph reads (weights, step
// scratch, metadata block, state pool) is fixed while it is current; growing the scratch or
// changing the pool drops the graphs.
#ifndef COIL_WORKERS_MODEL_MAMBA2_MODEL_H_
#define COIL_WORKERS_MODEL_MAMBA2_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "kernels/state_pool.h"
#include "kernels/tensor.h"
#include "workers/comm/communicator.h"
#include "workers/model/checkpoint.h"
#include "workers/model/model_config.h"
#include "workers/model/shard_layout.h"
#include "workers/step_metadata.h"

namespace coil::model {

// The element type of the big matrices (in_proj, out_proj, embedding, lm_head). Vectors
// (norms, conv, A_log, D, dt_bias) are always f32.
enum class WeightType {
  kAuto,  // bf16 when the checkpoint stores them in 16 bits (f16 is converted), else f32
  kF32,
  kBF16,
};
absl::StatusOr<WeightType> ParseWeightType(absl::string_view text);  // auto|f32|bf16

struct LoadOptions {
  WeightType weight_type = WeightType::kAuto;
  // Called after each layer loads with (layers done, layers in all), e.g. for progress.
  std::function<void(int64_t, int64_t)> progress;
  // Replay decode-only steps as graphs where the backend records them (CUDA) and the
  // communicator can be captured (one rank, or device memory: NCCL). False runs every
  // step op by op (for debugging: --cuda-graphs=false).
  bool cuda_graphs = true;
  // Run a decode step's mixer as one op (MixerDecode, or MixerDecodeSumSquares where ranks
  // share a group: one launch on CUDA); false runs the ops it stands for (the same bits: for
  // measuring what the fusion saves).
  bool fused_mixer = true;
};

class Mamba2Model {
 public:
  // Reads this rank's slices from `checkpoint` into `backend` memory. `comm` decides the
  // rank and TP size and must outlive the model, as must `backend`.
  static absl::StatusOr<std::unique_ptr<Mamba2Model>> Load(const Checkpoint& checkpoint,
                                                           Backend& backend,
                                                           comm::Communicator& comm,
                                                           const LoadOptions& options);

  const ModelConfig& config() const { return config_; }
  const ShardLayout& layout() const { return layout_; }
  ::coil::DType weight_dtype() const { return weight_dtype_; }
  // Bytes of weights this rank holds.
  size_t weight_bytes() const { return weight_bytes_; }
  // Seconds spent in this model's collectives since it was loaded (for benchmarks: the
  // communication share of a step).
  double comm_seconds() const { return comm_seconds_; }
  // The state pool shape this rank needs for `state_rows` sequences.
  StatePoolShape StateShape(int64_t state_rows) const;

  // Runs one step over `meta`'s packed tokens, reading and writing `pool`, and writes this
  // rank's logits columns [rows, layout().vocab.size()] to `logits` (host memory): for the
  // sampled rows (meta.sample_rows), or every row when `all_rows`.
  absl::Status Forward(const StepMetadata& meta, StatePool& pool, bool all_rows,
                       std::vector<float>& logits);

  // Device answers (ForwardRows): per sampled row, the argmax over this rank's
  // real-vocabulary columns (ids below config().vocab_size), the global id (lowest among
  // equal maxima, NaN never chosen) and its value; or the Gumbel-max (Backend::GumbelArgmax
  // with the row's temperature, seed and step), the global id and its f64 score. Id -1
  // where this rank holds no real column or the row has no non-NaN value (a row of -inf
  // gives its first non-NaN id and -inf). What greedy and plain temperature sampling merge
  // across ranks; only [rows] pairs leave the device. The Gumbel parameters are uploaded
  // after the step (a decode graph replays unchanged).
  // How one sampled row's token is taken: from its logits on the host, or from this rank's
  // device argmax (greedy) or Gumbel-max (plain temperature) answer.
  enum class RowSampling : uint8_t { kHost, kArgmax, kGumbel };
  // What ForwardRows hands the sampler, per sampled row r (kinds[r] says which fields).
  struct RowAnswers {
    std::vector<float> host_logits;  // [kHost rows, this rank's width], in row order
    std::vector<int32_t> ids;        // kArgmax, kGumbel: the global id, or -1 (none here)
    std::vector<float> values;       // kArgmax: the value
    std::vector<double> scores;      // kGumbel: the f64 score
  };

  // Runs the step like Forward, then answers each sampled row as kinds[r] says: the device
  // argmax or Gumbel-max above (temperatures, seeds and steps are read for kGumbel rows
  // only), and only the kHost rows' logits come to the host. A step mixing greedy, plain
  // and other rows thus copies the others' rows alone.
  absl::Status ForwardRows(const StepMetadata& meta, StatePool& pool,
                           const std::vector<RowSampling>& kinds,
                           const std::vector<float>& temperatures,
                           const std::vector<uint64_t>& seeds, const std::vector<int32_t>& steps,
                           RowAnswers& out);

  // Whether decode-only steps are padded to a bucket and replayed as graphs (the backend
  // and communicator allow it and LoadOptions::cuda_graphs is set). The same on every rank.
  bool graphs_enabled() const;
  void set_cuda_graphs(bool enabled) { cuda_graphs_ = enabled; }
  void set_fused_mixer(bool enabled) { fused_mixer_ = enabled; }
  int64_t graph_captures() const { return graph_captures_; }
  int64_t graph_replays() const { return graph_replays_; }
  // The operations the decode graph of `num_seqs` sequences' bucket launches per replay, or
  // 0 while that bucket has no graph.
  int64_t graph_nodes(int64_t num_seqs) const;

 private:
  // The global id of the first non-NaN column among the `valid` real ones of sampled row
  // `r` of the logits buffer (rows `width` wide), or -1 when all are NaN.
  absl::StatusOr<int32_t> FirstNonNanId(int64_t r, int64_t width, int64_t valid);
  // ForwardRows' host rows' logits, gathered on the device into gather_ and copied at once.
  absl::Status GatherHostRows(int64_t sampled, const std::vector<RowSampling>& kinds,
                              int64_t host_rows, RowAnswers& out);
  // ForwardRows' device answers, over every sampled row, kept for the rows of their kind.
  absl::Status DeviceArgmax(int64_t sampled, const std::vector<RowSampling>& kinds,
                            int64_t valid, RowAnswers& out);
  absl::Status DeviceGumbel(int64_t sampled, const std::vector<RowSampling>& kinds,
                            int64_t valid, const std::vector<float>& temperatures,
                            const std::vector<uint64_t>& seeds, const std::vector<int32_t>& steps,
                            RowAnswers& out);

  struct Layer {
    Tensor norm;         // f32 [D]
    Tensor in_proj;      // [in_proj_rows, D]: z | x | B | C | dt of this rank
    Tensor conv_weight;  // f32 [conv_channels, d_conv]: x | B | C channels
    Tensor conv_bias;    // f32 [conv_channels]
    Tensor dt_bias;      // f32 [heads]
    Tensor a_log;        // f32 [heads]
    Tensor d;            // f32 [heads]
    Tensor mixer_norm;   // f32 [d_inner]
    Tensor out_proj;     // [D, d_inner]
  };

  Mamba2Model(const ModelConfig& config, const ShardLayout& layout, Backend& backend,
              comm::Communicator& comm)
      : config_(config), layout_(layout), backend_(backend), comm_(comm) {}

  absl::Status LoadWeights(const Checkpoint& checkpoint, const LoadOptions& options);
  absl::StatusOr<Tensor> Upload(std::vector<uint8_t> host, ::coil::DType dtype,
                                std::initializer_list<int64_t> shape);
  // Grows the step scratch for `rows` tokens and `sampled_rows` sampled rows. Every rank
  // grows at the same steps (the same plans), and with more than one rank they agree on
  // the outcome before any step collective, so that a rank that cannot allocate fails the
  // step on every rank instead of leaving the others waiting in a collective it skips.
  absl::Status EnsureScratch(int64_t rows, int64_t sampled_rows);
  absl::Status GrowScratch(int64_t rows, int64_t sampled_rows);
  // Whether the communicator can take this backend's memory directly (else AllReduce
  // stages through the host: an MPI communicator with a GPU backend).
  bool CommReadsBackendMemory() const;
  // Sums `count` floats of backend memory over the ranks. Returns a failed collective; a
  // failed staging copy is stored in `status`. Does nothing when !collectives (warm-up).
  absl::Status AllReduce(float* data, size_t count, bool collectives, absl::Status& status);
  // rmsnorm(y * silu(z)) * w into `out` (y itself, or the bf16 rows of out_proj's input).
  // Returns a failed collective; a local error is stored in `status` (see Forward).
  absl::Status GroupNorm(const Layer& layer, const Tensor& y, const Tensor& z, const Tensor& out,
                         int64_t rows, bool collectives, absl::Status& status,
                         int64_t layer_index);
  // For groups that span ranks: the [rows, ngroups] sums buffer, the columns of groups with
  // no piece on this rank zeroed (a launch saved when there are none), local group g's
  // column at group_begin + g.
  Tensor GroupSums(int64_t rows, absl::Status& status, int64_t layer_index);
  // Local group g's columns here: [first, first + count) of y.
  std::pair<int64_t, int64_t> GroupColumns(int64_t g) const;
  // All-reduces the sums and applies the norm to each local group's gated columns.
  absl::Status ApplyGroupNorm(const Layer& layer, const Tensor& gated, const Tensor& sums,
                              const Tensor& out, int64_t rows, bool collectives,
                              absl::Status& status, int64_t layer_index);
  // Packs and uploads `meta` into the metadata block (one copy) and returns its batch with
  // the device mirrors set (left null on the CPU).
  absl::StatusOr<const RecurrentBatch*> UploadStep(const StepMetadata& meta);
  // The forward pass from the embedding to the lm_head, on the uploaded step: `rows`
  // tokens, logits for `sampled` rows (the packed sample rows, or every row when
  // all_rows) into logits_. Enqueues only (no host copy, no synchronization), so that it
  // can be captured. Returns a failed collective; local errors go in `status`.
  absl::Status Compute(int64_t rows, int64_t sampled, bool all_rows, const RecurrentBatch& batch,
                       StatePool& pool, bool collectives, absl::Status& status);
  // Runs a step (eagerly, or padded and replayed as a graph) and returns how many rows of
  // logits_ hold the sampled rows' logits, in meta's order.
  absl::StatusOr<int64_t> RunStep(const StepMetadata& meta, StatePool& pool, bool all_rows);
  // A decode-only step through its bucket's graph (captured here when missing or stale).
  absl::StatusOr<int64_t> RunDecodeGraph(const StepMetadata& meta, StatePool& pool);
  // Captures the graph of `bucket` on scratch-row entries, after an eager warm-up run
  // without collectives. A failure leaves this rank running padded steps eagerly.
  absl::Status CaptureDecodeGraph(int64_t bucket, StatePool& pool);

  ModelConfig config_;
  ShardLayout layout_;
  Backend& backend_;
  comm::Communicator& comm_;
  ::coil::DType weight_dtype_ = ::coil::DType::kF32;
  size_t weight_bytes_ = 0;
  float mixer_norm_eps_ = 1e-5f;
  double comm_seconds_ = 0.0;

  std::vector<Buffer> weight_buffers_;  // own the memory the tensors below view
  Tensor embedding_;                    // [vocab.size(), D]
  Tensor lm_head_;                      // [vocab.size(), D]; the embedding when tied
  Tensor norm_f_;                       // f32 [D]
  std::vector<Layer> layers_;

  // Step scratch, sized for scratch_rows_ tokens.
  int64_t scratch_rows_ = 0;
  int64_t scratch_sampled_ = 0;
  Buffer residual_, normed_, mixer_out_, zxbcdt_, xbc_, y_, group_sums_, sampled_,
      logits_, argmax_, gumbel_;
  // bf16 weights only: the in_proj and out_proj inputs as bf16 rows, written rounded by the
  // norms before them (in turn: the one buffer serves both), so the matmuls convert nothing.
  Buffer rows16_;
  Buffer meta_;  // the step's packed metadata (PackStepMetadata), token ids first
  // ForwardRows' gather of the host rows' logits when other rows stay on the device:
  // [rows] int32 row indices, then [rows, width] floats; grown as needed, never captured.
  Buffer gather_;
  int64_t gather_rows_ = 0;
  Buffer agree_;  // one float: the ranks' all-reduced count of failed scratch growths
  // Incremented whenever a scratch buffer is reallocated: graphs of older generations
  // hold freed addresses.
  uint64_t scratch_generation_ = 0;
  PackedStepMetadata packed_;
  RecurrentBatch step_batch_;      // the uploaded step's batch with its device mirrors
  std::vector<float> host_stage_;  // AllReduce through the host (MPI with a GPU backend)

  // Decode graphs by log2(bucket), valid for graph_pool_'s memory and the generations
  // they were captured at.
  struct DecodeGraph {
    std::unique_ptr<Backend::Graph> graph;
    uint64_t scratch_generation = 0;
  };
  bool cuda_graphs_ = true;
  bool fused_mixer_ = true;
  bool capture_failed_ = false;  // this rank runs padded decode steps eagerly from then on
  // The pool the graphs were captured on: its two state buffers and its row count fix
  // every per-layer state address a graph reads (a new pool may reuse one base address).
  struct PoolIdentity {
    const void* conv = nullptr;
    const void* ssm = nullptr;
    int64_t state_rows = -1;
    bool operator==(const PoolIdentity&) const = default;
  };
  PoolIdentity graph_pool_;
  std::vector<DecodeGraph> graphs_;
  int64_t graph_captures_ = 0;
  int64_t graph_replays_ = 0;
};

}  // namespace coil::model

#endif  // COIL_WORKERS_MODEL_MAMBA2_MODEL_H_
