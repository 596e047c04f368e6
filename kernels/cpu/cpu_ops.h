// The CPU backend's op kernels, one file each (kernels/cpu/<op>.cc, the same basename as
// kernels/cuda/<op>.cu). Arguments have been checked by Backend; `use_ref` selects the
// reference kernels (scalar loops, the token-by-token recurrence) that are the oracle.
#ifndef COIL_KERNELS_CPU_CPU_OPS_H_
#define COIL_KERNELS_CPU_CPU_OPS_H_

#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"

namespace coil {

struct CpuContext {
  ThreadPool* pool;
  bool use_ref;
};

void CpuEmbedding(const CpuContext& ctx, const Tensor& ids, const Tensor& table,
                  int64_t vocab_offset, const Tensor& out);
void CpuAddRmsNorm(const CpuContext& ctx, const Tensor& x, const Tensor& weight, float eps,
                   const Tensor& residual, const Tensor& out);
void CpuMatmul(const CpuContext& ctx, const Tensor& x, const Tensor& w, const Tensor& y);
void CpuCausalConv1d(const CpuContext& ctx, const Tensor& x, const Tensor& weight,
                     const Tensor& bias, const RecurrentBatch& batch, const Tensor& conv_state,
                     const Tensor& out);
void CpuSsmScan(const CpuContext& ctx, const Tensor& x, const Tensor& dt, const Tensor& a_log,
                const Tensor& b, const Tensor& c, const Tensor& d, const Tensor& dt_bias,
                const SsmScanOptions& options, const RecurrentBatch& batch,
                const Tensor& ssm_state, const Tensor& y);
void CpuGatedSumSquares(const CpuContext& ctx, const Tensor& y, const Tensor& z,
                        int64_t ngroups, const Tensor& gated, const Tensor& sumsq);
void CpuGatedNormApply(const CpuContext& ctx, const Tensor& gated, const Tensor& sumsq,
                       const Tensor& weight, int64_t group_size, float eps, const Tensor& out);
void CpuGatedRmsNorm(const CpuContext& ctx, const Tensor& y, const Tensor& z,
                     const Tensor& weight, int64_t ngroups, float eps, const Tensor& out);
void CpuKvCacheWrite(const CpuContext& ctx, const Tensor& k, const Tensor& v,
                     const PagedKvBatch& batch, const Tensor& k_cache, const Tensor& v_cache);
void CpuPagedAttention(const CpuContext& ctx, const Tensor& q, const Tensor& k_cache,
                       const Tensor& v_cache, const PagedKvBatch& batch, float scale,
                       const Tensor& out);
void CpuRelu2(const CpuContext& ctx, const Tensor& x, const Tensor& out);
void CpuArgmax(const CpuContext& ctx, const Tensor& logits, const Tensor& ids,
               const Tensor& values);
void CpuGumbelArgmax(const CpuContext& ctx, const Tensor& logits, const Tensor& temperatures,
                     const Tensor& seeds, const Tensor& steps, int64_t vocab_offset,
                     const Tensor& ids, const Tensor& scores);

// Row pointer helpers for rank-2 f32 views with strided rows.
inline float* RowF32(const Tensor& t, int64_t row) { return t.data<float>() + row * t.stride(0); }
inline uint16_t* RowBf16(const Tensor& t, int64_t row) {
  return t.data<uint16_t>() + row * t.stride(0);
}

// `floats` of this thread's scratch, valid until its next call on this thread (row ops
// reuse it step after step instead of allocating).
inline float* RowScratch(int64_t floats) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < static_cast<size_t>(floats)) scratch.resize(static_cast<size_t>(floats));
  return scratch.data();
}

}  // namespace coil

#endif  // COIL_KERNELS_CPU_CPU_OPS_H_
