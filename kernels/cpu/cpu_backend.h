// CpuBackend: the Backend on the host. Owns a thread pool (--threads); ops run
// synchronously on the calling thread plus the pool. In the reference mode (set_use_ref)
// every op takes its reference kernel: the token-by-token SSM recurrence and plain scalar
// loops, the oracle every other backend and mode is tested against.
#ifndef COIL_KERNELS_CPU_CPU_BACKEND_H_
#define COIL_KERNELS_CPU_CPU_BACKEND_H_

#include <string>

#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"

namespace coil {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : pool_(threads) {}

  BackendKind kind() const override { return BackendKind::kCpu; }
  Device device() const override { return Device::kCpu; }
  std::string Name() const override { return use_ref_ ? "cpu-ref" : "cpu"; }

  void set_use_ref(bool use_ref) { use_ref_ = use_ref; }
  bool use_ref() const { return use_ref_; }
  int threads() const { return pool_.threads(); }

 private:
  absl::StatusOr<Buffer> DoAllocate(size_t bytes) override;
  absl::Status DoCopy(void* dst, const void* src, size_t bytes, bool to_host) override;
  absl::Status DoSynchronize() override { return absl::OkStatus(); }
  absl::Status DoFillZero(void* dst, size_t bytes) override;
  absl::Status DoCopyOnDevice(void* dst, size_t dst_stride, const void* src, size_t src_stride,
                              size_t block_bytes, size_t count) override;
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

  ThreadPool pool_;
  bool use_ref_ = false;
};

}  // namespace coil

#endif  // COIL_KERNELS_CPU_CPU_BACKEND_H_
