#include "kernels/cpu/cpu_backend.h"

#include <cstdlib>
#include <cstring>

#include <sys/mman.h>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_ops.h"

namespace coil {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

// A buffer of at least one huge page (the weights, the state pools, the KV cache) starts on
// a 2 MiB boundary, and its whole huge pages are asked to be transparent huge pages before
// they are first touched (Linux gives them on request in its default `madvise` mode; where
// it does not, the hint changes nothing). Every decode step streams all the weights: on
// 4 KiB pages that is a TLB miss, and a stop for the hardware prefetchers, every 4 KiB.
absl::StatusOr<Buffer> CpuBackend::DoAllocate(size_t bytes) {
  const size_t align = bytes >= kHugePage ? kHugePage : 64;
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* data = std::aligned_alloc(align, (rounded + align - 1) / align * align);
  if (data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes of host memory; lower the budget"));
  }
#if defined(MADV_HUGEPAGE)
  if (bytes >= kHugePage) ::madvise(data, rounded / kHugePage * kHugePage, MADV_HUGEPAGE);
#endif
  std::memset(data, 0, rounded);
  return Buffer(data, bytes, [](void* p) { std::free(p); });
}

absl::Status CpuBackend::DoCopy(void* dst, const void* src, size_t bytes, bool to_host) {
  std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

absl::Status CpuBackend::DoFillZero(void* dst, size_t bytes) {
  std::memset(dst, 0, bytes);
  return absl::OkStatus();
}

absl::Status CpuBackend::DoCopyOnDevice(void* dst, size_t dst_stride, const void* src,
                                        size_t src_stride, size_t block_bytes, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    std::memcpy(static_cast<char*>(dst) + i * dst_stride,
                static_cast<const char*>(src) + i * src_stride, block_bytes);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::DoEmbedding(const Tensor& ids, const Tensor& table,
                                     int64_t vocab_offset, const Tensor& out) {
  CpuEmbedding({&pool_, use_ref_}, ids, table, vocab_offset, out);
  return absl::OkStatus();
}

absl::Status CpuBackend::DoAddRmsNorm(const Tensor& x, const Tensor& weight, float eps,
                                      const Tensor& residual, const Tensor& out) {
  CpuAddRmsNorm({&pool_, use_ref_}, x, weight, eps, residual, out);
  return absl::OkStatus();
}

absl::Status CpuBackend::DoMatmul(const Tensor& x, const Tensor& w, const Tensor& y) {
  CpuMatmul({&pool_, use_ref_}, x, w, y);
  return absl::OkStatus();
}

absl::Status CpuBackend::DoCausalConv1d(const Tensor& x, const Tensor& weight,
                                        const Tensor& bias, const RecurrentBatch& batch,
                                        const Tensor& conv_state, const Tensor& out) {
  CpuCausalConv1d({&pool_, use_ref_}, x, weight, bias, batch, conv_state, out);
  return absl::OkStatus();
}

absl::Status CpuBackend::DoSsmScan(const Tensor& x, const Tensor& dt, const Tensor& a_log,
                                   const Tensor& b, const Tensor& c, const Tensor& d,
                                   const Tensor& dt_bias, const SsmScanOptions& options,
                                   const RecurrentBatch& batch, const Tensor& ssm_state,
                                   const Tensor& y) {
  CpuSsmScan({&pool_, use_ref_}, x, dt, a_log, b, c, d, dt_bias, options, batch, ssm_state, y);
  return absl::OkStatus();
}

absl::Status CpuBackend::DoGatedSumSquares(const Tensor& y, const Tensor& z, int64_t ngroups,
                                           const Tensor& gated, const Tensor& sumsq) {
  CpuGatedSumSquares({&pool_, use_ref_}, y, z, ngroups, gated, sumsq);
  return absl::OkStatus();
}

absl::Status CpuBackend::DoGatedNormApply(const Tensor& gated, const Tensor& sumsq,
                                          const Tensor& weight, int64_t group_size, float eps,
                                          const Tensor& out) {
  CpuGatedNormApply({&pool_, use_ref_}, gated, sumsq, weight, group_size, eps, out);
  return absl::OkStatus();
}

absl::Status CpuBackend::DoGatedRmsNorm(const Tensor& y, const Tensor& z, const Tensor& weight,
                                        int64_t ngroups, float eps, const Tensor& out) {
  CpuGatedRmsNorm({&pool_, use_ref_}, y, z, weight, ngroups, eps, out);
  return absl::OkStatus();
}

absl::Status CpuBackend::DoKvCacheWrite(const Tensor& k, const Tensor& v,
                                        const PagedKvBatch& batch, const Tensor& k_cache,
                                        const Tensor& v_cache) {
  CpuKvCacheWrite({&pool_, use_ref_}, k, v, batch, k_cache, v_cache);
  return absl::OkStatus();
}

absl::Status CpuBackend::DoPagedAttention(const Tensor& q, const Tensor& k_cache,
                                          const Tensor& v_cache, const PagedKvBatch& batch,
                                          float scale, const Tensor& out) {
  CpuPagedAttention({&pool_, use_ref_}, q, k_cache, v_cache, batch, scale, out);
  return absl::OkStatus();
}

absl::Status CpuBackend::DoRelu2(const Tensor& x, const Tensor& out) {
  CpuRelu2({&pool_, use_ref_}, x, out);
  return absl::OkStatus();
}

absl::Status CpuBackend::DoArgmax(const Tensor& logits, const Tensor& ids,
                                  const Tensor& values) {
  CpuArgmax({&pool_, use_ref_}, logits, ids, values);
  return absl::OkStatus();
}

absl::Status CpuBackend::DoGumbelArgmax(const Tensor& logits, const Tensor& temperatures,
                                        const Tensor& seeds, const Tensor& steps,
                                        int64_t vocab_offset, const Tensor& ids,
                                        const Tensor& scores) {
  CpuGumbelArgmax({&pool_, use_ref_}, logits, temperatures, seeds, steps, vocab_offset, ids,
                  scores);
  return absl::OkStatus();
}

}  // namespace coil
