// The CUDA backend's kernel launchers: one free function per Backend op, each in its own
// .cu (or, for cuBLASLt, .cc) file. They run on the context's stream, never synchronize,
// check every launch, and receive arguments already validated by the Backend base class.
// The RecurrentBatch they get always carries device mirrors (CudaBackend uploads them when
// the caller did not), so the host vectors are for launch shapes only.
#ifndef COIL_KERNELS_CUDA_CUDA_OPS_H_
#define COIL_KERNELS_CUDA_CUDA_OPS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/cuda/causal_conv1d_math.h"
#include "kernels/cuda/ssm_scan_math.h"
#include "kernels/paged_kv_batch.h"
#include "kernels/recurrent_batch.h"
#include "kernels/tensor.h"

namespace coil::cuda {

// Device scratch memory owned by the backend and reused by every op on its stream. Grow()
// reallocates only when a larger size is asked for (it then synchronizes the stream, so it
// must not be called while a CUDA graph is being captured: capture sizes it beforehand).
class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace();

  absl::StatusOr<void*> Get(size_t bytes, cudaStream_t stream);
  size_t bytes() const { return bytes_; }
  // How many times the memory has been reallocated: a CUDA graph captured at an older
  // generation holds a freed pointer and must be captured again.
  uint64_t generation() const { return generation_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  uint64_t generation_ = 0;
};

// What every launcher needs: the stream, the device's properties and the scratch memory.
struct CudaContext {
  cudaStream_t stream = nullptr;
  int device = 0;
  int sm_count = 0;
  int compute_capability = 0;  // major * 10 + minor
  size_t shared_memory_per_block_optin = 0;
  // Launch the kernels that support it with programmatic dependent launch (pdl.cuh):
  // BackendOptions::cuda_pdl, on sm_90 and newer only.
  bool pdl = false;
  // The chunked scan's scratch, its alone: its chunk list persists from one scan to the next
  // of the same step (SsdPlanCache), so no other op may write it. Not for matmul.
  Workspace* workspace = nullptr;
  SsdPlanCache* ssd_plans = nullptr;  // the chunked scan's plan, built once per step
  // Backend::SetOpTiming's timer while timing is on (null otherwise): a launcher may time
  // its phases inside the op, never while the stream is capturing a graph.
  OpTimer* timer = nullptr;
};

// The conv and scan kernels' parameters from the ops' tensors (device mirrors of the batch),
// or INVALID_ARGUMENT when a size exceeds the kernels' int32 indices (UNIMPLEMENTED for a
// d_state above the decode update's limit). `out` may be null (the fused mixer decode).
absl::StatusOr<ConvParams> ConvParamsFor(const Tensor& x, const Tensor& weight,
                                         const Tensor& bias, const RecurrentBatch& batch,
                                         const Tensor& conv_state, const Tensor* out);
absl::StatusOr<SsmScanParams> SsmScanParamsFor(const Tensor& x, const Tensor& dt,
                                               const Tensor& a_log, const Tensor& b,
                                               const Tensor& c, const Tensor& d,
                                               const Tensor& dt_bias,
                                               const SsmScanOptions& options,
                                               const RecurrentBatch& batch,
                                               const Tensor& ssm_state, const Tensor& y);

// Whether the kernels this build runs on the current GPU were compiled with PdlWait in them
// (PTX of compute_90 or newer: pdl.cu), the condition for launching them with PDL.
absl::StatusOr<bool> KernelsCarryPdlWait();

absl::Status LaunchEmbedding(const CudaContext& ctx, const Tensor& ids, const Tensor& table,
                             int64_t vocab_offset, const Tensor& out);
absl::Status LaunchAddRmsNorm(const CudaContext& ctx, const Tensor& x, const Tensor& weight,
                              float eps, const Tensor& residual, const Tensor& out);
absl::Status LaunchCausalConv1d(const CudaContext& ctx, const Tensor& x, const Tensor& weight,
                                const Tensor& bias, const RecurrentBatch& batch,
                                const Tensor& conv_state, const Tensor& out);
absl::Status LaunchSsmScan(const CudaContext& ctx, const Tensor& x, const Tensor& dt,
                           const Tensor& a_log, const Tensor& b, const Tensor& c,
                           const Tensor& d, const Tensor& dt_bias, const SsmScanOptions& options,
                           const RecurrentBatch& batch, const Tensor& ssm_state,
                           const Tensor& y);
absl::Status LaunchGatedSumSquares(const CudaContext& ctx, const Tensor& y, const Tensor& z,
                                   int64_t ngroups, const Tensor& gated, const Tensor& sumsq);
absl::Status LaunchGatedNormApply(const CudaContext& ctx, const Tensor& gated,
                                  const Tensor& sumsq, const Tensor& weight, int64_t group_size,
                                  float eps, const Tensor& out);
absl::Status LaunchGatedRmsNorm(const CudaContext& ctx, const Tensor& y, const Tensor& z,
                                const Tensor& weight, int64_t ngroups, float eps,
                                const Tensor& out);
// The fused mixer decode (mixer_decode.cu): MixerDecode into `out` when sumsq is empty,
// MixerDecodeSumSquares into `sumsq` when out is. `tickets` holds num_seqs * groups int32
// zeros (left zero afterwards).
absl::Status LaunchMixerDecode(const CudaContext& ctx, const Tensor& xbc_in, const Tensor& dt,
                               const Tensor& z, const MixerWeights& weights, float norm_eps,
                               const SsmScanOptions& options, const RecurrentBatch& batch,
                               const Tensor& conv_state, const Tensor& ssm_state, const Tensor& xbc,
                               const Tensor& y, const Tensor& out, const Tensor& sumsq,
                               int32_t* tickets);
// KvCacheWrite (kv_cache_write.cu); the batch carries device mirrors.
absl::Status LaunchKvCacheWrite(const CudaContext& ctx, const Tensor& k, const Tensor& v,
                                const PagedKvBatch& batch, const Tensor& k_cache,
                                const Tensor& v_cache);

// What one PagedAttention launches (paged_attention.cu), from the batch's host arrays: the
// decode kernels when a run is one row, over max_splits splits (with the batch's
// max_context, a captured graph's capacity), and one prefill block per item (sequence,
// first (row, head) pair) per KV head for the longer runs. partial_floats: the decode
// splits' scratch (0 when no row has more than one split).
struct AttnLaunch {
  bool decode = false;
  std::vector<int32_t> items;
  int64_t prefill_items = 0;
  int32_t max_splits = 0;
  int64_t partial_floats = 0;
};
// UNIMPLEMENTED for a head_dim or a GQA ratio the kernels are not built for.
absl::StatusOr<AttnLaunch> PlanPagedAttention(const Tensor& q, const Tensor& k_cache,
                                              const PagedKvBatch& batch);
// `partials`: plan.partial_floats floats of scratch; `items`: plan.items on the device.
absl::Status LaunchPagedAttention(const CudaContext& ctx, const Tensor& q, const Tensor& k_cache,
                                  const Tensor& v_cache, const PagedKvBatch& batch, float scale,
                                  const Tensor& out, const AttnLaunch& plan, float* partials,
                                  const int32_t* items);
absl::Status LaunchRelu2(const CudaContext& ctx, const Tensor& x, const Tensor& out);
absl::Status LaunchArgmax(const CudaContext& ctx, const Tensor& logits, const Tensor& ids,
                          const Tensor& values);
absl::Status LaunchGumbelArgmax(const CudaContext& ctx, const Tensor& logits,
                                const Tensor& temperatures, const Tensor& seeds,
                                const Tensor& steps, int64_t vocab_offset, const Tensor& ids,
                                const Tensor& scores);

}  // namespace coil::cuda

#endif  // COIL_KERNELS_CUDA_CUDA_OPS_H_
