// A Backend that hands every op to another backend's public op (which checks it again): a
// base for test backends that change one thing, such as failing allocations or a failing
// op clock, and run everything else as the inner backend does.
#ifndef COIL_TESTS_UNIT_KERNELS_FORWARDING_BACKEND_H_
#define COIL_TESTS_UNIT_KERNELS_FORWARDING_BACKEND_H_

#include <memory>
#include <string>
#include <utility>

#include "kernels/backend.h"

namespace coil::testing {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : cpu_(std::move(inner)) {}
  BackendKind kind() const override { return cpu_->kind(); }
  Device device() const override { return cpu_->device(); }
  std::string Name() const override { return cpu_->Name(); }

 protected:
  Backend& inner() { return *cpu_; }

  absl::StatusOr<Buffer> DoAllocate(size_t bytes) override { return cpu_->Allocate(bytes); }
  absl::Status DoCopy(void* dst, const void* src, size_t bytes, bool to_host) override {
    return to_host ? cpu_->CopyToHost(dst, src, bytes) : cpu_->CopyFromHost(dst, src, bytes);
  }
  absl::Status DoSynchronize() override { return cpu_->Synchronize(); }
  absl::Status DoFillZero(void* dst, size_t bytes) override { return cpu_->FillZero(dst, bytes); }
  absl::Status DoCopyOnDevice(void* dst, size_t dst_stride, const void* src, size_t src_stride,
                              size_t block_bytes, size_t count) override {
    return cpu_->CopyOnDevice(dst, dst_stride, src, src_stride, block_bytes, count);
  }
  absl::Status DoEmbedding(const Tensor& ids, const Tensor& table, int64_t vocab_offset,
                           const Tensor& out) override {
    return cpu_->Embedding(ids, table, vocab_offset, out);
  }
  absl::Status DoAddRmsNorm(const Tensor& x, const Tensor& weight, float eps,
                            const Tensor& residual, const Tensor& out) override {
    return cpu_->AddRmsNorm(x, weight, eps, residual, out);
  }
  absl::Status DoMatmul(const Tensor& x, const Tensor& w, const Tensor& y) override {
    return cpu_->Matmul(x, w, y);
  }
  absl::Status DoCausalConv1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const RecurrentBatch& batch, const Tensor& conv_state,
                              const Tensor& out) override {
    return cpu_->CausalConv1d(x, weight, bias, batch, conv_state, out);
  }
  absl::Status DoSsmScan(const Tensor& x, const Tensor& dt, const Tensor& a_log, const Tensor& b,
                         const Tensor& c, const Tensor& d, const Tensor& dt_bias,
                         const SsmScanOptions& options, const RecurrentBatch& batch,
                         const Tensor& ssm_state, const Tensor& y) override {
    return cpu_->SsmScan(x, dt, a_log, b, c, d, dt_bias, options, batch, ssm_state, y);
  }
  absl::Status DoGatedSumSquares(const Tensor& y, const Tensor& z, int64_t ngroups,
                                 const Tensor& gated, const Tensor& sumsq) override {
    return cpu_->GatedSumSquares(y, z, ngroups, gated, sumsq);
  }
  absl::Status DoGatedNormApply(const Tensor& gated, const Tensor& sumsq, const Tensor& weight,
                                int64_t group_size, float eps, const Tensor& out) override {
    return cpu_->GatedNormApply(gated, sumsq, weight, group_size, eps, out);
  }
  absl::Status DoGatedRmsNorm(const Tensor& y, const Tensor& z, const Tensor& weight,
                              int64_t ngroups, float eps, const Tensor& out) override {
    return cpu_->GatedRmsNorm(y, z, weight, ngroups, eps, out);
  }
  absl::Status DoKvCacheWrite(const Tensor& k, const Tensor& v, const PagedKvBatch& batch,
                              const Tensor& k_cache, const Tensor& v_cache) override {
    return cpu_->KvCacheWrite(k, v, batch, k_cache, v_cache);
  }
  absl::Status DoPagedAttention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                const PagedKvBatch& batch, float scale,
                                const Tensor& out) override {
    return cpu_->PagedAttention(q, k_cache, v_cache, batch, scale, out);
  }
  absl::Status DoRelu2(const Tensor& x, const Tensor& out) override { return cpu_->Relu2(x, out); }
  absl::Status DoArgmax(const Tensor& logits, const Tensor& ids, const Tensor& values) override {
    return cpu_->Argmax(logits, ids, values);
  }
  absl::Status DoGumbelArgmax(const Tensor& logits, const Tensor& temperatures, const Tensor& seeds,
                              const Tensor& steps, int64_t vocab_offset, const Tensor& ids,
                              const Tensor& scores) override {
    return cpu_->GumbelArgmax(logits, temperatures, seeds, steps, vocab_offset, ids, scores);
  }

 private:
  std::unique_ptr<Backend> cpu_;
};

}  // namespace coil::testing

#endif  // COIL_TESTS_UNIT_KERNELS_FORWARDING_BACKEND_H_
