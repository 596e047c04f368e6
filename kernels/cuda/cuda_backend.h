// CudaBackend: the Backend on one NVIDIA GPU. Owns a non-blocking stream that every op and
// copy is issued on (so ops are asynchronous to the host and ordered among themselves), the
// cuBLASLt handle, its workspace and per-shape algorithm cache, and op scratch memory.
// Copies to the host return when the data is there; everything else only enqueues. Copies
// of up to 64 KiB (a step's metadata, sampling parameters and answers) go through pinned
// staging, so that an upload does not wait on the driver's pageable staging.
// A RecurrentBatch that arrives without device mirrors is uploaded here (one copy per op);
// the model uploads its step's batch once per step instead and passes the mirrors.
#ifndef COIL_KERNELS_CUDA_CUDA_BACKEND_H_
#define COIL_KERNELS_CUDA_CUDA_BACKEND_H_

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/backend_options.h"
#include "kernels/cuda/cuda_ops.h"

namespace coil::cuda {

class CublasLtMatmul;

// The GPU a process uses when it asks for `requested` and `visible` GPUs are visible:
// `requested` when in range, else the only one when exactly one is visible (each rank
// given its own GPU by its launcher), else INVALID_ARGUMENT saying how to fix the launch.
absl::StatusOr<int> ChooseGpu(int requested, int visible);

class CudaBackend final : public Backend {
 public:
  // Uses GPU `device_index` (as numbered by CUDA_VISIBLE_DEVICES); UNAVAILABLE when no GPU
  // or driver is visible, INVALID_ARGUMENT when the index is out of range or
  // matmul_heuristic_rows is outside 1..kMaxCudaMatmulRows (CublasLtMatmul::Create).
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(
      int device_index, int64_t matmul_heuristic_rows = kDefaultCudaMatmulRows);
  ~CudaBackend() override;

  BackendKind kind() const override { return BackendKind::kCuda; }
  Device device() const override { return Device::kCuda; }
  std::string Name() const override { return name_; }
  // The cuBLASLt algorithm pinned for each matmul shape so far.
  std::vector<std::string> Diagnostics() const override;

  // CUDA graphs over the stream (cuda_graph.cc), captured in relaxed mode: a call that
  // synchronizes the stream or copies from pageable memory during a capture fails it.
  bool SupportsGraphs() const override { return true; }
  bool IsGraphCurrent(const Graph& graph) const override;

  int device_index() const { return ctx_.device; }
  cudaStream_t stream() const { return ctx_.stream; }
  const CudaContext& context() const { return ctx_; }

  // Sizes the matmul's 16-bit copy of the activations for up to `max_rows` rows of up to
  // `max_k` columns (bf16/f16 weights), so that no later Matmul allocates: call it before
  // capturing a CUDA graph, whose Matmul would otherwise fail with FAILED_PRECONDITION.
  absl::Status ReserveMatmul(int64_t max_rows, int64_t max_k);

  // Programmatic dependent launch for the kernels that support it (pdl.cuh): taken only on
  // sm_90 and newer, and only when this build's kernels for the GPU carry PdlWait (a build
  // whose architectures all predate sm_90 runs JIT-compiled code without it). Returns
  // whether it is on.
  bool set_pdl(bool enabled);

 private:
  CudaBackend() = default;
  // Makes this backend's GPU the calling thread's current device.
  absl::Status MakeCurrent() const;
  // Op timing: marks are events recorded on the stream.
  std::unique_ptr<OpClock> MakeOpClock() override;
  void OnOpTimer(OpTimer* timer) override { ctx_.timer = timer; }

  absl::StatusOr<Buffer> DoAllocate(size_t bytes) override;
  absl::Status DoCopy(void* dst, const void* src, size_t bytes, bool to_host) override;
  absl::Status DoSynchronize() override;
  absl::Status DoFillZero(void* dst, size_t bytes) override;
  absl::Status DoCopyOnDevice(void* dst, size_t dst_stride, const void* src, size_t src_stride,
                              size_t block_bytes, size_t count) override;
  absl::Status DoBeginCapture() override;
  absl::StatusOr<std::unique_ptr<Graph>> DoEndCapture() override;
  absl::Status DoReplay(const Graph& graph) override;
  // The sum of the op scratch generations: a graph is current while it is unchanged.
  uint64_t MemoryGeneration() const;
  absl::Status DoEmbedding(const Tensor& ids, const Tensor& table, int64_t vocab_offset,
                           const Tensor& out) override;
  absl::Status DoAddRmsNorm(const Tensor& x, const Tensor& weight, float eps,
                            const Tensor& residual, const Tensor& out) override;
  absl::Status DoMatmul(const Tensor& x, const Tensor& w, const Tensor& y) override;
  absl::Status DoCausalConv1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const RecurrentBatch& batch, const Tensor& conv_state,
                              const Tensor& out) override;
  absl::Status DoSsmScan(const Tensor& x, const Tensor& dt, const Tensor& a_log,
                         const Tensor& b, const Tensor& c, const Tensor& d,
                         const Tensor& dt_bias, const SsmScanOptions& options,
                         const RecurrentBatch& batch, const Tensor& ssm_state,
                         const Tensor& y) override;
  absl::Status DoGatedSumSquares(const Tensor& y, const Tensor& z, int64_t ngroups,
                                 const Tensor& gated, const Tensor& sumsq) override;
  absl::Status DoGatedNormApply(const Tensor& gated, const Tensor& sumsq, const Tensor& weight,
                                int64_t group_size, float eps, const Tensor& out) override;
  absl::Status DoGatedRmsNorm(const Tensor& y, const Tensor& z, const Tensor& weight,
                              int64_t ngroups, float eps, const Tensor& out) override;
  absl::Status DoMixerDecode(const Tensor& xbc_in, const Tensor& dt, const Tensor& z,
                             const MixerWeights& weights, const SsmScanOptions& options,
                             float norm_eps, const RecurrentBatch& batch, const Tensor& conv_state,
                             const Tensor& ssm_state, const Tensor& xbc, const Tensor& y,
                             const Tensor& out) override;
  absl::Status DoMixerDecodeSumSquares(const Tensor& xbc_in, const Tensor& dt, const Tensor& z,
                                       const MixerWeights& weights, const SsmScanOptions& options,
                                       const RecurrentBatch& batch, const Tensor& conv_state,
                                       const Tensor& ssm_state, const Tensor& xbc, const Tensor& y,
                                       const Tensor& sumsq) override;
  // Both fused mixer ops: into out, or into sumsq (LaunchMixerDecode).
  absl::Status RunMixerDecode(const Tensor& xbc_in, const Tensor& dt, const Tensor& z,
                              const MixerWeights& weights, const SsmScanOptions& options,
                              float norm_eps, const RecurrentBatch& batch, const Tensor& conv_state,
                              const Tensor& ssm_state, const Tensor& xbc, const Tensor& y,
                              const Tensor& out, const Tensor& sumsq);
  absl::Status DoKvCacheWrite(const Tensor& k, const Tensor& v, const PagedKvBatch& batch,
                              const Tensor& k_cache, const Tensor& v_cache) override;
  absl::Status DoPagedAttention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                const PagedKvBatch& batch, float scale,
                                const Tensor& out) override;
  absl::Status DoRelu2(const Tensor& x, const Tensor& out) override;
  absl::Status DoArgmax(const Tensor& logits, const Tensor& ids, const Tensor& values) override;
  absl::Status DoGumbelArgmax(const Tensor& logits, const Tensor& temperatures,
                              const Tensor& seeds, const Tensor& steps, int64_t vocab_offset,
                              const Tensor& ids, const Tensor& scores) override;

  // Returns `batch` with device mirrors: itself when the caller set them, else a copy whose
  // mirrors point at this backend's batch staging, filled by one upload.
  absl::StatusOr<RecurrentBatch> WithDeviceMirrors(const RecurrentBatch& batch);
  absl::StatusOr<PagedKvBatch> WithDeviceMirrors(const PagedKvBatch& batch);

  std::string name_;
  CudaContext ctx_;
  Workspace workspace_;
  Workspace batch_staging_;
  Workspace kv_batch_staging_;  // a PagedKvBatch's arrays, when the caller gave no mirrors
  Workspace attn_partials_;     // the decode attention splits' (m, l, acc)
  Workspace attn_items_;        // the prefill attention blocks' items
  SsdPlanCache ssd_plans_;
  Workspace mixer_tickets_;  // MixerDecode's per-(sequence, group) tickets, zero between ops
  uint64_t tickets_zeroed_ = 0;  // the tickets' generation once zeroed (0: never allocated)
  std::vector<int32_t> batch_host_;  // the packed host image of an uploaded batch
  std::vector<int32_t> kv_batch_host_;
  std::unique_ptr<CublasLtMatmul> matmul_;
  // Pinned host staging for copies of up to kPinnedSlotBytes (a step's metadata, sampling
  // parameters and answers): kPinnedUploadSlots upload slots, then one download slot. Null
  // when it could not be allocated (copies then stay pageable).
  static constexpr size_t kPinnedSlotBytes = size_t{64} << 10;
  static constexpr int kPinnedUploadSlots = 4;
  void* pinned_ = nullptr;
  int uploads_since_sync_ = 0;  // upload slots taken since the stream last synchronized
};

}  // namespace coil::cuda

#endif  // COIL_KERNELS_CUDA_CUDA_BACKEND_H_
