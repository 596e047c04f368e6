// Backend: the op interface every device implements (the CPU and CUDA backends), in
// non-virtual-interface style: each public op checks its shapes and its RecurrentBatch
// once, here, returns a Status, and only then calls the private Do*() of the device, so
// every backend rejects exactly the same inputs before touching memory.
// Tensors are views of the backend's own memory (device pointers on a GPU); a backend owns
// its execution context (thread pool, stream, handles) and its workspace.
#ifndef COIL_KERNELS_BACKEND_H_
#define COIL_KERNELS_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/buffer.h"
#include "kernels/op_timing.h"
#include "kernels/paged_kv_batch.h"
#include "kernels/recurrent_batch.h"
#include "kernels/tensor.h"

namespace coil {

enum class BackendKind { kCpu, kCuda };

// The SSM scan's static parameters (mamba_ssm Mamba2: chunk_size, dt_limit).
struct SsmScanOptions {
  // The chunked (SSD) scan's chunk length; chunks start at multiples of it of the
  // sequence's absolute position.
  int64_t chunk_size = 256;
  // time_step_limit: dt' = clamp(softplus(dt + dt_bias), dt_min, dt_max). The default
  // (0, inf) is "no limit", as in mamba_ssm.
  float dt_min = 0.0f;
  float dt_max = std::numeric_limits<float>::infinity();
  // Which B/C group each head reads. By default (heads_per_group 0) the heads divide evenly
  // into the groups of b and c: head h reads group h / (heads / groups). Tensor parallelism
  // can give a rank heads that start inside a group and reach into the next ones; b and c
  // then hold every group those heads touch, and local head h reads local group
  // (first_head_in_group + h) / heads_per_group.
  int64_t heads_per_group = 0;
  int64_t first_head_in_group = 0;
  // The chunked form's matrix products take bf16-rounded operands with fp32 accumulation,
  // as mamba_ssm's kernels do for bf16 activations: a bf16 model sets it, and the CUDA
  // backend then runs them on tensor cores (sm_80 and newer), the CPU on AMX or AVX-512
  // BF16 (headdim a multiple of 16, d_state of 32). Recurrent states, the cumulative
  // decays and every sum stay fp32. Where a backend has no such products it computes in
  // fp32, within bf16 tolerance of the rounded form.
  bool bf16_products = false;
};

// A Mamba2 mixer's per-layer weights that MixerDecode reads (the model's layer, as views).
struct MixerWeights {
  Tensor conv_weight, conv_bias;  // f32 [C, W], [C]
  Tensor a_log, d, dt_bias;       // f32 [H]
  Tensor norm_weight;             // f32 [E], the gated RMSNorm's
};

class Backend {
 public:
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  virtual BackendKind kind() const = 0;
  virtual Device device() const = 0;
  virtual std::string Name() const = 0;
  // What the backend chose on its own that decides its speed (on CUDA, the cuBLASLt
  // algorithm pinned for each matmul shape so far), one line each, for logs and
  // benchmarks; empty where there is nothing to report.
  virtual std::vector<std::string> Diagnostics() const { return {}; }

  // ---- memory ----
  // `bytes` of device memory, 64-byte aligned, zero-filled.
  absl::StatusOr<Buffer> Allocate(size_t bytes);
  // Host -> device and device -> host copies (plain memcpy on the CPU); ordered with the
  // backend's ops, and CopyToHost returns when the data is on the host.
  absl::Status CopyFromHost(void* device_dst, const void* host_src, size_t bytes);
  absl::Status CopyToHost(void* host_dst, const void* device_src, size_t bytes);
  // Waits for every op issued so far (a no-op on the CPU, whose ops are synchronous).
  absl::Status Synchronize() { return DoSynchronize(); }
  // Sets `bytes` of device memory to zero, ordered with the ops (and recorded by a graph
  // capture, unlike the copies, which are never captured).
  absl::Status FillZero(void* device_dst, size_t bytes);
  // Copies `count` blocks of `block_bytes` within the backend's memory, block i from
  // src + i * src_stride to dst + i * dst_stride (strides in bytes, at least block_bytes
  // when count > 1), ordered with the ops (and recorded by a graph capture). A destination
  // block that overlaps a source block is refused (INVALID_ARGUMENT). What the state pool
  // copies one sequence's row of every layer to another row with.
  absl::Status CopyOnDevice(void* dst, size_t dst_stride, const void* src, size_t src_stride,
                            size_t block_bytes, size_t count);

  // ---- graphs (optional): record a fixed sequence of ops once, replay it many times ----
  // Only a backend whose SupportsGraphs() is true implements them (CUDA graphs); the others
  // answer UNIMPLEMENTED. Between BeginCapture and EndCapture the ops (and any collective
  // enqueued on the backend's stream) are recorded, not run, and nothing may copy to or
  // from the host or synchronize. A replay reads and writes the very addresses the capture
  // saw, with the launch shapes the capture's host arguments gave.
  class Graph {
   public:
    virtual ~Graph() = default;
    // The operations a replay launches (kernels, memsets, collectives' kernels): what a
    // decode step's launch overhead scales with.
    virtual int64_t nodes() const = 0;
  };
  virtual bool SupportsGraphs() const { return false; }
  absl::Status BeginCapture();
  absl::StatusOr<std::unique_ptr<Graph>> EndCapture();
  // Enqueues a captured graph; ordered with the ops before and after it.
  absl::Status Replay(const Graph& graph);
  // False once backend-owned memory the graph refers to (op scratch) has been reallocated
  // since its capture: the graph must then be captured again.
  virtual bool IsGraphCurrent(const Graph& /*graph*/) const { return false; }

  // ---- per-op timing (off by default): where a step's time goes ----
  // While on, every op, copy and graph replay is timed, except while a graph is being
  // captured: on CUDA between events on the stream (the op's kernels, and any wait for the
  // host to launch them), on the CPU by the clock around the call. Turning it on or off
  // drops the times not yet taken.
  void SetOpTiming(bool on);
  bool op_timing() const { return timer_ != nullptr; }
  // The times since timing went on or since the last call, per op name (a matmul per
  // N x K, and on CUDA the chunked scan's phases beside the whole scan), slowest first.
  // Waits for the work up to the last timed op. Empty when timing is off; the clock's
  // error when it failed (timing is then off, and the ops ran as usual).
  absl::StatusOr<std::vector<OpTime>> TakeOpTimes();

  // ---- ops: inputs first, then outputs; activations are f32, rows are tokens ----

  // out[t, :] = table[ids[t] - vocab_offset, :] as f32, or zeros when ids[t] is outside
  // [vocab_offset, vocab_offset + V) (vocab-parallel shards; the caller all-reduces).
  // ids: i32 [T]; table: f32/bf16/f16 [V, D]; out: f32 [T, D].
  absl::Status Embedding(const Tensor& ids, const Tensor& table, int64_t vocab_offset,
                         const Tensor& out);

  // residual += x (skipped when x is empty: the first layer), then
  // out = residual * rsqrt(mean(residual^2) + eps) * weight. The residual stays f32.
  // x, residual: f32 [T, D]; weight: f32 [D]; out: f32 [T, D], or bf16 (rounded to nearest
  // even) when it only feeds a matmul with bf16 weights. An f32 out may alias x.
  absl::Status AddRmsNorm(const Tensor& x, const Tensor& weight, float eps,
                          const Tensor& residual, const Tensor& out);

  // y = x W^T with fp32 accumulation (PyTorch Linear layout). x: f32 [M, K] (rows may be
  // strided), or bf16 with bf16 weights (the rows a bf16 matmul rounds x to anyway, so the
  // same y as their f32 values; it saves the backend that rounding); w: f32/bf16/f16
  // [N, K] contiguous; y: f32 [M, N] (rows may be strided).
  // Row m of y depends only on row m of x and on W, never on M.
  absl::Status Matmul(const Tensor& x, const Tensor& w, const Tensor& y);

  // Causal depthwise conv1d over each sequence's run, with bias and SiLU:
  // out[t, c] = silu(bias[c] + sum_k weight[c, k] * in[t - (W-1) + k, c]) where inputs
  // before the run come from the sequence's conv state (zeros when fresh); afterwards the
  // slot holds the last W-1 inputs. x: f32 [T, C] (rows may be strided); weight: f32
  // [C, W]; bias: f32 [C]; conv_state: f32 [state_rows + 1, W - 1, C]; out: f32 [T, C].
  absl::Status CausalConv1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                            const RecurrentBatch& batch, const Tensor& conv_state,
                            const Tensor& out);

  // The Mamba2 selective scan. Per head h (group g = h / (H / G)) and token t:
  //   dt' = clamp(softplus(dt[t, h] + dt_bias[h])), A = -exp(a_log[h]),
  //   state = state * exp(A dt') + dt' x[t, h, :] (x) b[t, g, :],
  //   y[t, h, :] = state c[t, g, :] + d[h] x[t, h, :].
  // Runs of one token take the recurrence; longer runs the chunked SSD form (or the
  // recurrence everywhere in the CPU reference mode). x: f32 [T, H*P]; dt: f32 [T, H];
  // a_log, d, dt_bias: f32 [H]; b, c: f32 [T, G*N] (all rows may be strided);
  // ssm_state: f32 or bf16 [state_rows + 1, H, P, N]; y: f32 [T, H*P]. A bf16 state is
  // widened on the read and computed in fp32, and rounded to nearest even after every
  // chunk-aligned piece (so at each multiple of chunk_size and at the run's end): a prompt
  // split at chunk multiples rounds where the whole prompt does.
  absl::Status SsmScan(const Tensor& x, const Tensor& dt, const Tensor& a_log, const Tensor& b,
                       const Tensor& c, const Tensor& d, const Tensor& dt_bias,
                       const SsmScanOptions& options, const RecurrentBatch& batch,
                       const Tensor& ssm_state, const Tensor& y);

  // First half of the gated grouped RMSNorm rmsnorm(y * silu(z)) * w: gated = y * silu(z)
  // and, per row and group of E / ngroups columns, sumsq = sum(gated^2). A caller whose
  // group spans ranks all-reduces sumsq before GatedNormApply. y, z, gated: f32 [T, E]
  // (z may be strided; gated may alias y); sumsq: f32 [T, ngroups].
  absl::Status GatedSumSquares(const Tensor& y, const Tensor& z, int64_t ngroups,
                               const Tensor& gated, const Tensor& sumsq);

  // Second half: out = gated * rsqrt(sumsq / group_size + eps) * weight, where group_size
  // is the group's full width (across ranks). out: f32 (may alias gated), or bf16 when it
  // only feeds a matmul with bf16 weights.
  absl::Status GatedNormApply(const Tensor& gated, const Tensor& sumsq, const Tensor& weight,
                              int64_t group_size, float eps, const Tensor& out);

  // Both halves at once, for groups the caller holds whole: out = rmsnorm(y * silu(z)) *
  // weight per group of E / ngroups columns, the same bits as GatedSumSquares then
  // GatedNormApply with group_size E / ngroups on the same backend, in one pass and
  // without writing the gated values. y, z: f32 [T, E] (z may be strided); weight: f32
  // [E]; out: f32 [T, E] (may alias y), or bf16 when it only feeds a bf16 matmul.
  absl::Status GatedRmsNorm(const Tensor& y, const Tensor& z, const Tensor& weight,
                            int64_t ngroups, float eps, const Tensor& out);

  // The mixer between in_proj and out_proj for a decode step (every run one token) whose
  // heads hold their B/C groups whole (options.heads_per_group 0):
  //   CausalConv1d(xbc_in) into xbc = [x (E) | b (G*N) | c (G*N)],
  //   SsmScan(x, dt, b, c) into y, then GatedRmsNorm(y, z) with G groups into out,
  // with the same bits as those three ops on the same backend. A backend may fuse them (the
  // CUDA backend does, in one launch); xbc and y are then scratch, unspecified afterwards.
  // xbc_in: f32 [T, E + 2 G N] (rows may be strided); dt: f32 [T, H]; z: f32 [T, E];
  // conv_state, ssm_state as for CausalConv1d and SsmScan; xbc: f32 [T, E + 2 G N];
  // y: f32 [T, E]; out: f32 [T, E] (may alias y), or bf16 when it only feeds a bf16 matmul.
  // Outputs must not overlap the inputs, nor xbc the other outputs (INVALID_ARGUMENT).
  absl::Status MixerDecode(const Tensor& xbc_in, const Tensor& dt, const Tensor& z,
                           const MixerWeights& weights, const SsmScanOptions& options,
                           float norm_eps, const RecurrentBatch& batch, const Tensor& conv_state,
                           const Tensor& ssm_state, const Tensor& xbc, const Tensor& y,
                           const Tensor& out);

  // MixerDecode up to the norm's cross-rank sum, for heads that may start inside a B/C group
  // (tensor-parallel ranks sharing a group; whole groups are taken too):
  //   CausalConv1d(xbc_in) into xbc, SsmScan(x, dt, b, c) into y, then for each local group
  //   g, over the columns of its heads here (heads [max(0, g hpg - first), min(H, (g + 1)
  //   hpg - first)), hpg and first as SsmScan reads options), GatedSumSquares with one group:
  //   the gated values y * silu(z) written over y, their sum of squares into sumsq[:, g],
  // with the same bits as those ops in turn on the same backend (the CUDA backend fuses them
  // into one launch; xbc is then scratch). The caller all-reduces sumsq and runs
  // GatedNormApply over each group's columns. Arguments as for MixerDecode (the weights'
  // norm_weight is not read); sumsq: f32 [T, G] (may be a column view of a wider buffer).
  absl::Status MixerDecodeSumSquares(const Tensor& xbc_in, const Tensor& dt, const Tensor& z,
                                     const MixerWeights& weights, const SsmScanOptions& options,
                                     const RecurrentBatch& batch, const Tensor& conv_state,
                                     const Tensor& ssm_state, const Tensor& xbc, const Tensor& y,
                                     const Tensor& sumsq);

  // ---- attention (hybrid models): K/V in pages of a KvCache (kernels/kv_cache.h) ----

  // Writes each row's K and V into its sequence's pages: row i of sequence s, position
  // p = start_positions[s] + i, goes to page block_table[cu_blocks[s] + p / block_size],
  // slot p % block_size (rounded to nearest even for a bf16 cache). k, v: f32 [T, KVH * Dh]
  // (rows may be strided: views of one fused qkv output); k_cache, v_cache: one dtype, f32
  // or bf16, [pages + 1, block_size, KVH, Dh], contiguous, apart from k and v.
  absl::Status KvCacheWrite(const Tensor& k, const Tensor& v, const PagedKvBatch& batch,
                            const Tensor& k_cache, const Tensor& v_cache);

  // Causal grouped-query attention over the paged cache (no positional encoding): row i of
  // sequence s, position p = start_positions[s] + i, attends to the sequence's positions
  // [0, p], its own run's keys included (KvCacheWrite wrote them before):
  //   out[t, h] = sum_{j <= p} softmax_j(scale * q[t, h] . K[j, g]) V[j, g],  g = h / (H / KVH).
  // Runs of one row (decode) and longer runs (prefill chunks) mix freely in one batch.
  // Batch-invariant: each (row, head) reduces over its keys in a fixed order by absolute key
  // position (tiles of keys aligned to absolute positions), so its bits depend on neither
  // the batch, the rows T, block_size, nor how the prompt was split into chunks: a decode row
  // and the same row inside a prefill chunk give the same bits. q: f32 [T, H * Dh] (rows may
  // be strided); k_cache, v_cache as for KvCacheWrite (H a multiple of KVH); out: f32
  // [T, H * Dh] (rows may be strided) or bf16 when it only feeds o_proj, apart from the
  // inputs.
  absl::Status PagedAttention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                              const PagedKvBatch& batch, float scale, const Tensor& out);

  // out = max(x, 0)^2, the squared ReLU of Nemotron-H's MLP. x: f32 [T, N] (rows may be
  // strided); out: f32 [T, N] (may be x itself, not a partial overlap) or bf16 when it only
  // feeds down_proj.
  absl::Status Relu2(const Tensor& x, const Tensor& out);

  // Per row: the index of the largest value (the lowest index among equals; NaN never
  // wins) and the value. logits: f32 [T, V]; ids: i32 [T]; values: f32 [T].
  absl::Status Argmax(const Tensor& logits, const Tensor& ids, const Tensor& values);

  // Gumbel-max sampling per row, without leaving the device: the column j maximising
  // score(j) = double(logits[t, j]) / double(temperatures[t]) + Gumbel(seed, step, id) in
  // double precision, where id = vocab_offset + j and Gumbel is kernels/philox.h's draw; the
  // lowest j among equal scores, NaN never wins, a row without a score above -inf gives
  // j = 0 and -inf. The host sampler computes the same scores, so the tokens agree bit for
  // bit. logits: f32 [T, V] (rows may be strided: a column view drops padded ids);
  // temperatures: f32 [T], each finite and > 0 (not checked: they live on the device);
  // seeds: i32 [T, 2], the u64 seed's low then high word; steps: i32 [T], the u32 rng step;
  // ids: i32 [T], the local column j; scores: i32 [T, 2], the f64 score's bits, low word
  // first (what a cross-rank merge compares).
  absl::Status GumbelArgmax(const Tensor& logits, const Tensor& temperatures,
                            const Tensor& seeds, const Tensor& steps, int64_t vocab_offset,
                            const Tensor& ids, const Tensor& scores);

 protected:
  Backend() = default;

  // The clock SetOpTiming(true) times with: the wall clock, unless the backend's ops only
  // enqueue their work (then it must override this).
  virtual std::unique_ptr<OpClock> MakeOpClock() { return std::make_unique<HostOpClock>(); }
  // Told of the timer when timing goes on, and of null when it goes off: for intervals
  // inside an op (phases of one), which a backend adds while not capturing a graph.
  virtual void OnOpTimer(OpTimer* /*timer*/) {}

 private:
  // One slot per public op; the arguments have been checked.
  virtual absl::StatusOr<Buffer> DoAllocate(size_t bytes) = 0;
  virtual absl::Status DoCopy(void* dst, const void* src, size_t bytes, bool to_host) = 0;
  virtual absl::Status DoSynchronize() = 0;
  virtual absl::Status DoFillZero(void* dst, size_t bytes) = 0;
  virtual absl::Status DoCopyOnDevice(void* dst, size_t dst_stride, const void* src,
                                      size_t src_stride, size_t block_bytes, size_t count) = 0;
  virtual absl::Status DoBeginCapture();
  virtual absl::StatusOr<std::unique_ptr<Graph>> DoEndCapture();
  virtual absl::Status DoReplay(const Graph& graph);
  virtual absl::Status DoEmbedding(const Tensor& ids, const Tensor& table, int64_t vocab_offset,
                                   const Tensor& out) = 0;
  virtual absl::Status DoAddRmsNorm(const Tensor& x, const Tensor& weight, float eps,
                                    const Tensor& residual, const Tensor& out) = 0;
  virtual absl::Status DoMatmul(const Tensor& x, const Tensor& w, const Tensor& y) = 0;
  virtual absl::Status DoCausalConv1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                      const RecurrentBatch& batch, const Tensor& conv_state,
                                      const Tensor& out) = 0;
  virtual absl::Status DoSsmScan(const Tensor& x, const Tensor& dt, const Tensor& a_log,
                                 const Tensor& b, const Tensor& c, const Tensor& d,
                                 const Tensor& dt_bias, const SsmScanOptions& options,
                                 const RecurrentBatch& batch, const Tensor& ssm_state,
                                 const Tensor& y) = 0;
  virtual absl::Status DoGatedSumSquares(const Tensor& y, const Tensor& z, int64_t ngroups,
                                         const Tensor& gated, const Tensor& sumsq) = 0;
  virtual absl::Status DoGatedNormApply(const Tensor& gated, const Tensor& sumsq,
                                        const Tensor& weight, int64_t group_size, float eps,
                                        const Tensor& out) = 0;
  virtual absl::Status DoGatedRmsNorm(const Tensor& y, const Tensor& z, const Tensor& weight,
                                      int64_t ngroups, float eps, const Tensor& out) = 0;
  // By default the three ops' own Do*() in turn.
  virtual absl::Status DoMixerDecode(const Tensor& xbc_in, const Tensor& dt, const Tensor& z,
                                     const MixerWeights& weights, const SsmScanOptions& options,
                                     float norm_eps, const RecurrentBatch& batch,
                                     const Tensor& conv_state, const Tensor& ssm_state,
                                     const Tensor& xbc, const Tensor& y, const Tensor& out);
  // By default the ops' own Do*() in turn.
  virtual absl::Status DoMixerDecodeSumSquares(
      const Tensor& xbc_in, const Tensor& dt, const Tensor& z, const MixerWeights& weights,
      const SsmScanOptions& options, const RecurrentBatch& batch, const Tensor& conv_state,
      const Tensor& ssm_state, const Tensor& xbc, const Tensor& y, const Tensor& sumsq);
  virtual absl::Status DoKvCacheWrite(const Tensor& k, const Tensor& v,
                                      const PagedKvBatch& batch, const Tensor& k_cache,
                                      const Tensor& v_cache) = 0;
  virtual absl::Status DoPagedAttention(const Tensor& q, const Tensor& k_cache,
                                        const Tensor& v_cache, const PagedKvBatch& batch,
                                        float scale, const Tensor& out) = 0;
  virtual absl::Status DoRelu2(const Tensor& x, const Tensor& out) = 0;
  virtual absl::Status DoArgmax(const Tensor& logits, const Tensor& ids,
                                const Tensor& values) = 0;
  virtual absl::Status DoGumbelArgmax(const Tensor& logits, const Tensor& temperatures,
                                      const Tensor& seeds, const Tensor& steps,
                                      int64_t vocab_offset, const Tensor& ids,
                                      const Tensor& scores) = 0;

  // The CausalConv1d and SsmScan both mixer ops' defaults start with (their own Do*() in
  // turn), over xbc's x | b | c columns; sets the number of B/C groups.
  absl::Status DoMixerConvScan(const Tensor& xbc_in, const Tensor& dt, const MixerWeights& weights,
                               const SsmScanOptions& options, const RecurrentBatch& batch,
                               const Tensor& conv_state, const Tensor& ssm_state, const Tensor& xbc,
                               const Tensor& y, int64_t* groups);

  // Runs `run`, timed under name() while timing is on and no graph is being captured. A
  // clock that fails never fails the op: timing goes off, and TakeOpTimes reports why.
  template <typename Name, typename Run>
  absl::Status TimedOp(Name name, Run run) {
    if (timer_ == nullptr || capturing_) return run();
    const absl::StatusOr<int64_t> begin = timer_->Begin();
    if (!begin.ok()) {
      StopOpTiming(begin.status());
      return run();
    }
    const absl::Status status = run();
    if (timer_ != nullptr) {
      const absl::Status ended = timer_->End(std::string(name()), *begin);
      if (!ended.ok()) StopOpTiming(ended);
    }
    return status;
  }
  void StopOpTiming(const absl::Status& why);
  // ValidatePagedKvBatch, skipped when the batch and the sizes it was checked against are
  // those of the last successful check (the layers of a step share one batch).
  absl::Status CheckPagedKvBatch(const PagedKvBatch& batch, int64_t rows, int64_t pages);

  std::unique_ptr<OpTimer> timer_;
  absl::Status timing_error_;  // why timing stopped on its own, for TakeOpTimes
  bool capturing_ = false;     // between a successful BeginCapture and EndCapture
  // The last PagedKvBatch that passed ValidatePagedKvBatch, with its rows and pages.
  PagedKvBatch checked_kv_batch_;
  int64_t checked_kv_rows_ = -1, checked_kv_pages_ = -1;
};

// The public ops, one X(Name) each, in one place: kBackendOps, BackendOp and the names the
// op timing reports are built from it. The op harness's coverage test fails for an op
// listed here that has no test case, so a new op is added here (one line) and given a case.
#define COIL_BACKEND_OPS(X) \
  X(Embedding)              \
  X(AddRmsNorm)             \
  X(Matmul)                 \
  X(CausalConv1d)           \
  X(SsmScan)                \
  X(GatedSumSquares)        \
  X(GatedNormApply)         \
  X(GatedRmsNorm)           \
  X(MixerDecode)            \
  X(MixerDecodeSumSquares)  \
  X(Argmax)                 \
  X(GumbelArgmax)           \
  X(KvCacheWrite)           \
  X(PagedAttention)         \
  X(Relu2)

enum class BackendOp {
#define COIL_BACKEND_OP_ENUM(name) k##name,
  COIL_BACKEND_OPS(COIL_BACKEND_OP_ENUM)
#undef COIL_BACKEND_OP_ENUM
};

// The public ops' names, in COIL_BACKEND_OPS's order (BackendOp's values index it).
inline constexpr const char* kBackendOps[] = {
#define COIL_BACKEND_OP_NAME(name) #name,
    COIL_BACKEND_OPS(COIL_BACKEND_OP_NAME)
#undef COIL_BACKEND_OP_NAME
};

// The op's name: what op timing reports it under (a matmul adds its N x K) and what its
// test cases give as OpCase::Op().
constexpr const char* BackendOpName(BackendOp op) { return kBackendOps[static_cast<int>(op)]; }

// The local heads [begin, end) that read local B/C group g, of `heads` local heads over
// `groups` local groups, as SsmScan maps them under `options` (heads_per_group 0: evenly).
struct HeadRange {
  int64_t begin, end;
};
HeadRange GroupHeads(const SsmScanOptions& options, int64_t heads, int64_t groups, int64_t g);

// Checks a RecurrentBatch against `rows` packed rows and a pool of `state_rows` rows (plus
// the scratch row). Public so that step metadata can be validated once per step too.
absl::Status ValidateRecurrentBatch(const RecurrentBatch& batch, int64_t rows,
                                    int64_t state_rows);

// Checks a PagedKvBatch against `rows` packed rows and a cache of `pages` pages (plus the
// scratch page, index `pages`): the invariant kernels/paged_kv_batch.h states. Public so
// that step metadata can be validated once per step too.
absl::Status ValidatePagedKvBatch(const PagedKvBatch& batch, int64_t rows, int64_t pages);

}  // namespace coil

#endif  // COIL_KERNELS_BACKEND_H_
