#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/matmul.h"

namespace coil::cuda {

Workspace::~Workspace() {
  if (data_ != nullptr) cudaFree(data_);
}

absl::StatusOr<void*> Workspace::Get(size_t bytes, cudaStream_t stream) {
  if (bytes <= bytes_ && data_ != nullptr) return data_;
  // Grow by at least half again so that a slowly growing step does not reallocate often.
  const size_t wanted = std::max(bytes, bytes_ + bytes_ / 2);
  COIL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  ++generation_;
  if (data_ != nullptr) {
    COIL_CUDA_RETURN_IF_ERROR(cudaFree(data_));
    data_ = nullptr;
    bytes_ = 0;
  }
  const cudaError_t error = cudaMalloc(&data_, wanted);
  if (error != cudaSuccess) {
    data_ = nullptr;
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate ", wanted, " bytes of GPU scratch memory (", cudaGetErrorString(error),
        "); lower --max-batched-tokens or the state budget"));
  }
  bytes_ = wanted;
  return data_;
}

absl::StatusOr<int> ChooseGpu(int requested, int visible) {
  if (requested >= 0 && requested < visible) return requested;
  // A launcher that gives every rank its own GPU (CUDA_VISIBLE_DEVICES per rank, a
  // Kubernetes device plugin) leaves each process one visible GPU whatever its local rank.
  if (requested >= 0 && visible == 1) return 0;
  return absl::InvalidArgumentError(absl::StrCat(
      "GPU index ", requested, " is out of range: ", visible,
      " GPU(s) visible; start at most one rank per visible GPU on each node, or give each "
      "rank its own GPU with CUDA_VISIBLE_DEVICES"));
}

namespace {

// Marks are events recorded on the backend's stream (made on its GPU, whichever thread
// asks); Between waits for the later one. Events are reused after Clear.
class StreamEventClock final : public OpClock {
 public:
  StreamEventClock(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  ~StreamEventClock() override {
    for (cudaEvent_t event : events_) cudaEventDestroy(event);
  }

  absl::StatusOr<int64_t> Mark() override {
    int current = -1;
    COIL_CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
    if (current != device_) COIL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    if (used_ == events_.size()) {
      cudaEvent_t event = nullptr;
      COIL_CUDA_RETURN_IF_ERROR(cudaEventCreate(&event));
      events_.push_back(event);
    }
    COIL_CUDA_RETURN_IF_ERROR(cudaEventRecord(events_[used_], stream_));
    return static_cast<int64_t>(used_++);
  }

  absl::StatusOr<double> Between(int64_t from, int64_t to) override {
    const int64_t used = static_cast<int64_t>(used_);
    if (from < 0 || to < 0 || from >= used || to >= used) {
      return absl::OutOfRangeError(
          absl::StrCat("marks ", from, " and ", to, " of ", used, "; take both before asking"));
    }
    COIL_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(events_[to]));
    float ms = 0.0f;
    COIL_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, events_[from], events_[to]));
    return static_cast<double>(ms) * 1e-3;
  }

  void Clear() override { used_ = 0; }

 private:
  int device_;
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
  size_t used_ = 0;
};

}  // namespace

std::unique_ptr<OpClock> CudaBackend::MakeOpClock() {
  return std::make_unique<StreamEventClock>(ctx_.device, ctx_.stream);
}

absl::Status CudaBackend::MakeCurrent() const {
  // The CUDA runtime's current device is per host thread, and a backend may be driven from
  // another thread than the one that created it (rank 0's engine thread): every entry
  // point makes this backend's GPU current first. cudaGetDevice is a cheap host call.
  int current = -1;
  COIL_CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
  if (current != ctx_.device) COIL_CUDA_RETURN_IF_ERROR(cudaSetDevice(ctx_.device));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(int device_index,
                                                                 int64_t matmul_heuristic_rows) {
  COIL_RETURN_IF_ERROR(CheckCudaMatmulRows(matmul_heuristic_rows));
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::UnavailableError(absl::StrCat(
        "no CUDA device is visible (",
        error == cudaSuccess ? "device count 0" : cudaGetErrorString(error),
        "); run on a machine with an NVIDIA GPU and driver, or use --device cpu"));
  }
  COIL_ASSIGN_OR_RETURN(device_index, ChooseGpu(device_index, count));
  auto backend = std::unique_ptr<CudaBackend>(new CudaBackend());
  CudaContext& ctx = backend->ctx_;
  ctx.device = device_index;
  COIL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_index));
  cudaDeviceProp prop{};
  COIL_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device_index));
  ctx.sm_count = prop.multiProcessorCount;
  ctx.compute_capability = prop.major * 10 + prop.minor;
  ctx.shared_memory_per_block_optin = prop.sharedMemPerBlockOptin;
  COIL_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking));
  ctx.workspace = &backend->workspace_;
  ctx.ssd_plans = &backend->ssd_plans_;
  backend->name_ = absl::StrCat("cuda:", device_index, " (", prop.name, ", sm_", prop.major,
                                prop.minor, ")");
  COIL_ASSIGN_OR_RETURN(backend->matmul_, CublasLtMatmul::Create(ctx, matmul_heuristic_rows));
  // Pinned staging for small copies (see DoCopy); without it copies stay pageable.
  if (cudaHostAlloc(&backend->pinned_, kPinnedSlotBytes * (kPinnedUploadSlots + 1),
                    cudaHostAllocDefault) != cudaSuccess) {
    cudaGetLastError();
    backend->pinned_ = nullptr;
  }
  return backend;
}

std::vector<std::string> CudaBackend::Diagnostics() const { return matmul_->DescribePlans(); }

CudaBackend::~CudaBackend() {
  matmul_.reset();
  if (ctx_.stream != nullptr) {
    cudaStreamSynchronize(ctx_.stream);
    cudaStreamDestroy(ctx_.stream);
  }
  if (pinned_ != nullptr) cudaFreeHost(pinned_);
}

bool CudaBackend::set_pdl(bool enabled) {
  ctx_.pdl = false;
  if (!enabled || ctx_.compute_capability < 90 || !MakeCurrent().ok()) return false;
  const absl::StatusOr<bool> carried = KernelsCarryPdlWait();
  ctx_.pdl = carried.ok() && *carried;
  return ctx_.pdl;
}

absl::StatusOr<Buffer> CudaBackend::DoAllocate(size_t bytes) {
  COIL_RETURN_IF_ERROR(MakeCurrent());
  const size_t rounded = (bytes + 255) / 256 * 256;
  void* data = nullptr;
  const cudaError_t error = cudaMalloc(&data, rounded == 0 ? 256 : rounded);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes on ", name_, " (",
                     cudaGetErrorString(error), "); lower the state or batch budget"));
  }
  // Zero-filled, as the Backend contract says; ordered before any later op on the stream.
  COIL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(data, 0, rounded, ctx_.stream));
  return Buffer(data, bytes, [](void* p) { cudaFree(p); });
}

absl::Status CudaBackend::DoCopy(void* dst, const void* src, size_t bytes, bool to_host) {
  COIL_RETURN_IF_ERROR(MakeCurrent());
  if (bytes == 0) return absl::OkStatus();
  // A copy on a capturing stream would be recorded (with pinned memory) or break the
  // capture (with pageable memory): refused either way, as the graph contract says.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  COIL_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(ctx_.stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    return absl::FailedPreconditionError(
        "a copy to or from the host was issued while a CUDA graph is being captured");
  }
  const bool staged = pinned_ != nullptr && bytes <= kPinnedSlotBytes;
  char* const pinned = static_cast<char*>(pinned_);
  if (to_host) {
    // Into the download slot, then out of it once the stream is done.
    void* landing = staged ? pinned + kPinnedUploadSlots * kPinnedSlotBytes : dst;
    COIL_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(landing, src, bytes, cudaMemcpyDeviceToHost, ctx_.stream));
    COIL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(ctx_.stream));
    uploads_since_sync_ = 0;
    if (staged) std::memcpy(dst, landing, bytes);
    return absl::OkStatus();
  }
  if (staged && uploads_since_sync_ < kPinnedUploadSlots) {
    // From pinned memory the copy is truly asynchronous. The slot is not reused before the
    // next stream synchronization, after which this copy is certainly done.
    char* slot = pinned + uploads_since_sync_ * kPinnedSlotBytes;
    ++uploads_since_sync_;
    std::memcpy(slot, src, bytes);
    COIL_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, slot, bytes, cudaMemcpyHostToDevice, ctx_.stream));
    return absl::OkStatus();
  }
  // From pageable memory the call returns once the source has been staged, so the caller
  // may reuse it at once; the copy itself is ordered with the ops on the stream.
  COIL_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx_.stream));
  return absl::OkStatus();
}

absl::Status CudaBackend::DoFillZero(void* dst, size_t bytes) {
  COIL_RETURN_IF_ERROR(MakeCurrent());
  COIL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dst, 0, bytes, ctx_.stream));
  return absl::OkStatus();
}

absl::Status CudaBackend::DoCopyOnDevice(void* dst, size_t dst_stride, const void* src,
                                         size_t src_stride, size_t block_bytes, size_t count) {
  COIL_RETURN_IF_ERROR(MakeCurrent());
  // One strided copy, unless a pitch is past what cudaMemcpy2D takes (2^31 - 1 bytes on
  // current GPUs; a state pool of many rows of a large model): then one copy per block.
  constexpr size_t kMaxPitch = (size_t{1} << 31) - 1;
  if (count > 1 && dst_stride <= kMaxPitch && src_stride <= kMaxPitch) {
    COIL_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(dst, dst_stride, src, src_stride, block_bytes,
                                                count, cudaMemcpyDeviceToDevice, ctx_.stream));
    return absl::OkStatus();
  }
  for (size_t i = 0; i < count; ++i) {
    COIL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(static_cast<char*>(dst) + i * dst_stride,
                                              static_cast<const char*>(src) + i * src_stride,
                                              block_bytes, cudaMemcpyDeviceToDevice, ctx_.stream));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::DoSynchronize() {
  COIL_RETURN_IF_ERROR(MakeCurrent());
  COIL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(ctx_.stream));
  uploads_since_sync_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<RecurrentBatch> CudaBackend::WithDeviceMirrors(const RecurrentBatch& batch) {
  if (batch.device_cu_seqlens != nullptr && batch.device_slots != nullptr &&
      batch.device_fresh != nullptr && batch.device_start_positions != nullptr) {
    return batch;
  }
  // One packed upload: [cu_seqlens (n+1) | slots (n) | start_positions (n) | fresh (n bytes)].
  const size_t n = batch.slots.size();
  const size_t ints = (n + 1) + n + n;
  const size_t bytes = ints * sizeof(int32_t) + n;
  batch_host_.resize((bytes + sizeof(int32_t) - 1) / sizeof(int32_t));
  int32_t* host = batch_host_.data();
  std::memcpy(host, batch.cu_seqlens.data(), (n + 1) * sizeof(int32_t));
  std::memcpy(host + n + 1, batch.slots.data(), n * sizeof(int32_t));
  std::memcpy(host + 2 * n + 1, batch.start_positions.data(), n * sizeof(int32_t));
  std::memcpy(host + ints, batch.fresh.data(), n);
  COIL_ASSIGN_OR_RETURN(void* staging, batch_staging_.Get(bytes, ctx_.stream));
  COIL_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(staging, host, bytes, cudaMemcpyHostToDevice, ctx_.stream));
  RecurrentBatch out = batch;
  const int32_t* device = static_cast<const int32_t*>(staging);
  out.device_cu_seqlens = device;
  out.device_slots = device + n + 1;
  out.device_start_positions = device + 2 * n + 1;
  out.device_fresh = reinterpret_cast<const uint8_t*>(device + ints);
  return out;
}

absl::StatusOr<PagedKvBatch> CudaBackend::WithDeviceMirrors(const PagedKvBatch& batch) {
  if (batch.device_cu_seqlens != nullptr && batch.device_start_positions != nullptr &&
      batch.device_cu_blocks != nullptr && batch.device_block_table != nullptr) {
    return batch;
  }
  // One packed upload: [cu_seqlens (n+1) | start_positions (n) | cu_blocks (n+1) | table].
  const size_t n = batch.start_positions.size(), table = batch.block_table.size();
  kv_batch_host_.clear();
  kv_batch_host_.insert(kv_batch_host_.end(), batch.cu_seqlens.begin(), batch.cu_seqlens.end());
  kv_batch_host_.insert(kv_batch_host_.end(), batch.start_positions.begin(),
                        batch.start_positions.end());
  kv_batch_host_.insert(kv_batch_host_.end(), batch.cu_blocks.begin(), batch.cu_blocks.end());
  kv_batch_host_.insert(kv_batch_host_.end(), batch.block_table.begin(), batch.block_table.end());
  const size_t bytes = kv_batch_host_.size() * sizeof(int32_t);
  COIL_ASSIGN_OR_RETURN(void* staging, kv_batch_staging_.Get(bytes, ctx_.stream));
  COIL_RETURN_IF_ERROR(DoCopy(staging, kv_batch_host_.data(), bytes, /*to_host=*/false));
  PagedKvBatch out = batch;
  const int32_t* device = static_cast<const int32_t*>(staging);
  out.device_cu_seqlens = device;
  out.device_start_positions = device + n + 1;
  out.device_cu_blocks = device + 2 * n + 1;
  out.device_block_table = table > 0 ? device + 3 * n + 2 : device;
  return out;
}

absl::Status CudaBackend::DoEmbedding(const Tensor& ids, const Tensor& table,
                                      int64_t vocab_offset, const Tensor& out) {
  COIL_RETURN_IF_ERROR(MakeCurrent());
  return LaunchEmbedding(ctx_, ids, table, vocab_offset, out);
}

absl::Status CudaBackend::DoAddRmsNorm(const Tensor& x, const Tensor& weight, float eps,
                                       const Tensor& residual, const Tensor& out) {
  COIL_RETURN_IF_ERROR(MakeCurrent());
  return LaunchAddRmsNorm(ctx_, x, weight, eps, residual, out);
}

absl::Status CudaBackend::ReserveMatmul(int64_t max_rows, int64_t max_k) {
  COIL_RETURN_IF_ERROR(MakeCurrent());
  return matmul_->Reserve(ctx_, max_rows, max_k);
}

absl::Status CudaBackend::DoMatmul(const Tensor& x, const Tensor& w, const Tensor& y) {
  COIL_RETURN_IF_ERROR(MakeCurrent());
  return matmul_->Run(ctx_, x, w, y);
}

absl::Status CudaBackend::DoCausalConv1d(const Tensor& x, const Tensor& weight,
                                         const Tensor& bias, const RecurrentBatch& batch,
                                         const Tensor& conv_state, const Tensor& out) {
  COIL_RETURN_IF_ERROR(MakeCurrent());
  COIL_ASSIGN_OR_RETURN(RecurrentBatch device_batch, WithDeviceMirrors(batch));
  return LaunchCausalConv1d(ctx_, x, weight, bias, device_batch, conv_state, out);
}

absl::Status CudaBackend::DoSsmScan(const Tensor& x, const Tensor& dt, const Tensor& a_log,
                                    const Tensor& b, const Tensor& c, const Tensor& d,
                                    const Tensor& dt_bias, const SsmScanOptions& options,
                                    const RecurrentBatch& batch, const Tensor& ssm_state,
                                    const Tensor& y) {
  COIL_RETURN_IF_ERROR(MakeCurrent());
  COIL_ASSIGN_OR_RETURN(RecurrentBatch device_batch, WithDeviceMirrors(batch));
  return LaunchSsmScan(ctx_, x, dt, a_log, b, c, d, dt_bias, options, device_batch, ssm_state,
                       y);
}

absl::Status CudaBackend::DoGatedSumSquares(const Tensor& y, const Tensor& z, int64_t ngroups,
                                            const Tensor& gated, const Tensor& sumsq) {
  COIL_RETURN_IF_ERROR(MakeCurrent());
  return LaunchGatedSumSquares(ctx_, y, z, ngroups, gated, sumsq);
}

absl::Status CudaBackend::DoGatedNormApply(const Tensor& gated, const Tensor& sumsq,
                                           const Tensor& weight, int64_t group_size, float eps,
                                           const Tensor& out) {
  COIL_RETURN_IF_ERROR(MakeCurrent());
  return LaunchGatedNormApply(ctx_, gated, sumsq, weight, group_size, eps, out);
}

absl::Status CudaBackend::DoGatedRmsNorm(const Tensor& y, const Tensor& z, const Tensor& weight,
                                         int64_t ngroups, float eps, const Tensor& out) {
  COIL_RETURN_IF_ERROR(MakeCurrent());
  return LaunchGatedRmsNorm(ctx_, y, z, weight, ngroups, eps, out);
}

absl::Status CudaBackend::DoMixerDecode(const Tensor& xbc_in, const Tensor& dt, const Tensor& z,
                                        const MixerWeights& weights,
                                        const SsmScanOptions& options, float norm_eps,
                                        const RecurrentBatch& batch, const Tensor& conv_state,
                                        const Tensor& ssm_state, const Tensor& xbc,
                                        const Tensor& y, const Tensor& out) {
  return RunMixerDecode(xbc_in, dt, z, weights, options, norm_eps, batch, conv_state, ssm_state,
                        xbc, y, out, Tensor());
}

absl::Status CudaBackend::DoMixerDecodeSumSquares(
    const Tensor& xbc_in, const Tensor& dt, const Tensor& z, const MixerWeights& weights,
    const SsmScanOptions& options, const RecurrentBatch& batch, const Tensor& conv_state,
    const Tensor& ssm_state, const Tensor& xbc, const Tensor& y, const Tensor& sumsq) {
  return RunMixerDecode(xbc_in, dt, z, weights, options, /*norm_eps=*/0.0f, batch, conv_state,
                        ssm_state, xbc, y, Tensor(), sumsq);
}

absl::Status CudaBackend::RunMixerDecode(const Tensor& xbc_in, const Tensor& dt, const Tensor& z,
                                         const MixerWeights& weights, const SsmScanOptions& options,
                                         float norm_eps, const RecurrentBatch& batch,
                                         const Tensor& conv_state, const Tensor& ssm_state,
                                         const Tensor& xbc, const Tensor& y, const Tensor& out,
                                         const Tensor& sumsq) {
  if (batch.num_seqs() == 0) return absl::OkStatus();
  COIL_RETURN_IF_ERROR(MakeCurrent());
  COIL_ASSIGN_OR_RETURN(RecurrentBatch device_batch, WithDeviceMirrors(batch));
  const int64_t e = ssm_state.dim(1) * ssm_state.dim(2), d_state = ssm_state.dim(3);
  const int64_t groups = (xbc_in.dim(1) - e) / (2 * d_state);
  // New ticket memory starts at zero; the kernel leaves every ticket it takes at zero.
  // At least 64 KiB (16384 sequence-group pairs), so that the decode graphs' buckets, each
  // warmed up just before its capture, do not regrow it (and so drop the graphs captured
  // before) one bucket after another.
  constexpr size_t kMinTicketBytes = size_t{64} << 10;
  const size_t bytes = std::max(
      kMinTicketBytes, static_cast<size_t>(batch.num_seqs() * groups) * sizeof(int32_t));
  COIL_ASSIGN_OR_RETURN(void* tickets, mixer_tickets_.Get(bytes, ctx_.stream));
  if (mixer_tickets_.generation() != tickets_zeroed_) {  // new memory: zero it first
    COIL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(tickets, 0, mixer_tickets_.bytes(), ctx_.stream));
    tickets_zeroed_ = mixer_tickets_.generation();
  }
  return LaunchMixerDecode(ctx_, xbc_in, dt, z, weights, norm_eps, options, device_batch,
                           conv_state, ssm_state, xbc, y, out, sumsq,
                           static_cast<int32_t*>(tickets));
}

absl::Status CudaBackend::DoKvCacheWrite(const Tensor& k, const Tensor& v,
                                         const PagedKvBatch& batch, const Tensor& k_cache,
                                         const Tensor& v_cache) {
  COIL_RETURN_IF_ERROR(MakeCurrent());
  COIL_ASSIGN_OR_RETURN(PagedKvBatch device_batch, WithDeviceMirrors(batch));
  return LaunchKvCacheWrite(ctx_, k, v, device_batch, k_cache, v_cache);
}

absl::Status CudaBackend::DoPagedAttention(const Tensor& q, const Tensor& k_cache,
                                           const Tensor& v_cache, const PagedKvBatch& batch,
                                           float scale, const Tensor& out) {
  COIL_RETURN_IF_ERROR(MakeCurrent());
  COIL_ASSIGN_OR_RETURN(const AttnLaunch plan, PlanPagedAttention(q, k_cache, batch));
  COIL_ASSIGN_OR_RETURN(PagedKvBatch device_batch, WithDeviceMirrors(batch));
  // The decode splits' scratch: sized before a graph capture by the warm-up step over the
  // same batch (its max_context), so a capture never grows it.
  float* partials = nullptr;
  if (plan.partial_floats > 0) {
    COIL_ASSIGN_OR_RETURN(void* scratch, attn_partials_.Get(
                                             static_cast<size_t>(plan.partial_floats) * 4, ctx_.stream));
    partials = static_cast<float*>(scratch);
  }
  const int32_t* items = nullptr;
  if (!plan.items.empty()) {  // prefill runs: never in a captured graph (decode steps only)
    const size_t bytes = plan.items.size() * sizeof(int32_t);
    COIL_ASSIGN_OR_RETURN(void* device, attn_items_.Get(bytes, ctx_.stream));
    COIL_RETURN_IF_ERROR(DoCopy(device, plan.items.data(), bytes, /*to_host=*/false));
    items = static_cast<const int32_t*>(device);
  }
  return LaunchPagedAttention(ctx_, q, k_cache, v_cache, device_batch, scale, out, plan, partials,
                              items);
}

absl::Status CudaBackend::DoRelu2(const Tensor& x, const Tensor& out) {
  COIL_RETURN_IF_ERROR(MakeCurrent());
  return LaunchRelu2(ctx_, x, out);
}

absl::Status CudaBackend::DoArgmax(const Tensor& logits, const Tensor& ids,
                                   const Tensor& values) {
  COIL_RETURN_IF_ERROR(MakeCurrent());
  return LaunchArgmax(ctx_, logits, ids, values);
}

absl::Status CudaBackend::DoGumbelArgmax(const Tensor& logits, const Tensor& temperatures,
                                         const Tensor& seeds, const Tensor& steps,
                                         int64_t vocab_offset, const Tensor& ids,
                                         const Tensor& scores) {
  COIL_RETURN_IF_ERROR(MakeCurrent());
  return LaunchGumbelArgmax(ctx_, logits, temperatures, seeds, steps, vocab_offset, ids, scores);
}

}  // namespace coil::cuda
