// Paged attention on the GPU: the block bodies of paged_attention_tiles.h in three kernels.
//  - Prefill (runs of two or more rows): one block per (item, KV head), an item being 64
//    (query row, head) pairs of one run; the block walks its keys' splits in order.
//  - Decode (runs of one row): one block per (split, sequence, KV head), the rows being the
//    KV head's query heads; a row of one split writes its output, longer ones write their
//    splits' partials, which the combine kernel merges in split order (one block per
//    (sequence, head), one thread per column).
// A step's runs of one row take the decode kernels and its longer runs the prefill kernel,
// in one op; both take the same steps per row, so a row's bits do not depend on which ran it.
// The decode grid spans the batch's max_context (a graph's capacity) and its blocks read each
// sequence's context from the device, so a captured graph serves any context up to it.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/paged_attention_tiles.h"

namespace coil::cuda {
namespace {

constexpr unsigned kMaxGridYZ = 65535;

template <int kD>
__global__ void __launch_bounds__(32 * kAttnPrefillWarps)
    AttnPrefillKernel(AttnParams a, AttnSmemLayout layout) {
  extern __shared__ __align__(128) unsigned char smem[];
  AttnDeviceExec ex;
  const AttnSmem sm{layout, smem};
  const int32_t item = static_cast<int32_t>(blockIdx.x);
  AttnPrefillBlock<kD>(ex, a, sm, a.items[2 * item], static_cast<int>(blockIdx.y),
                       a.items[2 * item + 1]);
}

template <int kD>
__global__ void __launch_bounds__(32 * kAttnMaxDecodeWarps)
    AttnDecodeKernel(AttnParams a, AttnSmemLayout layout) {
  const int s = static_cast<int>(blockIdx.y);
  const int32_t split = static_cast<int32_t>(blockIdx.x);
  if (!AttnDecodeBlockHasWork(a, s, split)) return;  // a prefill run, or past its context
  extern __shared__ __align__(128) unsigned char smem[];
  AttnDeviceExec ex;
  const AttnSmem sm{layout, smem};
  AttnDecodeBlock<kD>(ex, a, sm, s, static_cast<int>(blockIdx.z), split,
                      static_cast<int>(blockDim.x));
}

__global__ void AttnCombineKernel(AttnParams a) {
  for (int col = static_cast<int>(threadIdx.x); col < a.head_dim;
       col += static_cast<int>(blockDim.x)) {
    AttnCombineColumn(a, static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y), col);
  }
}

// Sets a kernel's dynamic shared memory limit to `bytes` (above the default 48 KiB needs
// the opt-in), or says the head dim needs more than this GPU has.
template <typename Kernel>
absl::Status AllowSharedMemory(const CudaContext& ctx, Kernel kernel, int64_t bytes) {
  if (bytes > static_cast<int64_t>(ctx.shared_memory_per_block_optin)) {
    return absl::UnimplementedError(absl::StrCat(
        "paged attention needs ", bytes, " bytes of shared memory per block; this GPU allows ",
        ctx.shared_memory_per_block_optin, " (a bf16 cache needs less than an f32 one)"));
  }
  COIL_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  return absl::OkStatus();
}

template <int kD>
absl::Status LaunchForHeadDim(const CudaContext& ctx, const AttnParams& a, const AttnLaunch& l) {
  if (l.prefill_items > 0) {
    const AttnSmemLayout layout = AttnLayout(16 * kAttnPrefillWarps, kD, a.bf16);
    COIL_RETURN_IF_ERROR(AllowSharedMemory(ctx, AttnPrefillKernel<kD>, layout.bytes));
    AttnPrefillKernel<kD>
        <<<dim3(static_cast<unsigned>(l.prefill_items), static_cast<unsigned>(a.kv_heads)),
           32 * kAttnPrefillWarps, layout.bytes, ctx.stream>>>(a, layout);
    COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  if (l.decode) {
    const int group = a.heads / a.kv_heads;
    const int warps = (group + 15) / 16;
    const AttnSmemLayout layout = AttnLayout(16 * warps, kD, a.bf16);
    COIL_RETURN_IF_ERROR(AllowSharedMemory(ctx, AttnDecodeKernel<kD>, layout.bytes));
    AttnDecodeKernel<kD>
        <<<dim3(static_cast<unsigned>(a.max_splits), static_cast<unsigned>(a.num_seqs),
                static_cast<unsigned>(a.kv_heads)),
           32 * warps, layout.bytes, ctx.stream>>>(a, layout);
    COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    if (a.max_splits > 1) {
      AttnCombineKernel<<<dim3(static_cast<unsigned>(a.num_seqs), static_cast<unsigned>(a.heads)),
                          std::min(kD, 128), 0, ctx.stream>>>(a);
      COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AttnLaunch> PlanPagedAttention(const Tensor& q, const Tensor& k_cache,
                                              const PagedKvBatch& batch) {
  const int64_t head_dim = k_cache.dim(3), kv_heads = k_cache.dim(2);
  const int64_t heads = q.dim(1) / head_dim, group = heads / kv_heads;
  if (!AttnHeadDimSupported(head_dim)) {
    return absl::UnimplementedError(
        absl::StrCat("the CUDA paged attention kernels take head_dim 16, 32, 64 or 128, not ",
                     head_dim, "; run this model on --device cpu"));
  }
  if (group > 16 * kAttnMaxDecodeWarps) {
    return absl::UnimplementedError(
        absl::StrCat("the CUDA paged attention kernels take at most ", 16 * kAttnMaxDecodeWarps,
                     " query heads per KV head, not ", group, "; run this model on --device cpu"));
  }
  if (batch.num_seqs() > static_cast<int>(kMaxGridYZ) || kv_heads > kMaxGridYZ ||
      heads > kMaxGridYZ) {
    return absl::InvalidArgumentError(absl::StrCat(
        "paged attention takes at most ", kMaxGridYZ, " sequences and heads per step, not ",
        batch.num_seqs(), " sequences and ", heads, " heads; split the step"));
  }
  AttnLaunch plan;
  int64_t longest = batch.max_context;
  for (int s = 0; s < batch.num_seqs(); ++s) {
    const int32_t run = batch.run_length(s);
    if (run == 1) {
      plan.decode = true;
      longest = std::max<int64_t>(longest, batch.context_length(s));
      continue;
    }
    // Items of 64 (row, head) pairs over the run's run x group pairs.
    const int64_t pairs = int64_t{run} * group;
    for (int64_t k0 = 0; k0 < pairs; k0 += 16 * kAttnPrefillWarps) {
      plan.items.push_back(s);
      plan.items.push_back(static_cast<int32_t>(k0));
    }
  }
  plan.prefill_items = static_cast<int64_t>(plan.items.size() / 2);
  plan.max_splits = plan.decode ? AttnSplits(longest) : 0;
  plan.partial_floats = plan.max_splits > 1 ? int64_t{batch.num_seqs()} * heads * plan.max_splits *
                                                  AttnPartialFloats(static_cast<int32_t>(head_dim))
                                            : 0;
  return plan;
}

absl::Status LaunchPagedAttention(const CudaContext& ctx, const Tensor& q, const Tensor& k_cache,
                                  const Tensor& v_cache, const PagedKvBatch& batch, float scale,
                                  const Tensor& out, const AttnLaunch& plan, float* partials,
                                  const int32_t* items) {
  if (k_cache.dtype() == DType::kBF16 && ctx.compute_capability < 80) {
    return absl::UnimplementedError(
        "paged attention over a bf16 cache needs bf16 tensor cores (sm_80 or newer)");
  }
  AttnParams a;
  a.q = q.data<float>();
  a.q_stride = q.stride(0);
  a.out = out.raw();
  a.out_stride = out.stride(0);
  a.out_bf16 = out.dtype() == DType::kBF16;
  a.k_cache = k_cache.raw();
  a.v_cache = v_cache.raw();
  a.bf16 = k_cache.dtype() == DType::kBF16;
  a.head_dim = static_cast<int32_t>(k_cache.dim(3));
  a.kv_heads = static_cast<int32_t>(k_cache.dim(2));
  a.heads = static_cast<int32_t>(q.dim(1) / k_cache.dim(3));
  a.block_size = batch.block_size;
  a.scale_log2 = scale * 1.4426950408889634f;
  a.num_seqs = batch.num_seqs();
  a.cu_seqlens = batch.device_cu_seqlens;
  a.start_positions = batch.device_start_positions;
  a.cu_blocks = batch.device_cu_blocks;
  a.block_table = batch.device_block_table;
  a.partials = partials;
  a.max_splits = plan.max_splits;
  a.items = items;
  switch (a.head_dim) {
    case 16:
      return LaunchForHeadDim<16>(ctx, a, plan);
    case 32:
      return LaunchForHeadDim<32>(ctx, a, plan);
    case 64:
      return LaunchForHeadDim<64>(ctx, a, plan);
    default:
      return LaunchForHeadDim<128>(ctx, a, plan);
  }
}

}  // namespace coil::cuda
