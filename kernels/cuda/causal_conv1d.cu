// Causal depthwise conv1d with bias and SiLU over varlen packed runs, with conv state
// slots (causal_conv1d_fn / causal_conv1d_update as mamba_ssm's Mamba2 uses them). Each
// output sums bias + w[0] in[t-W+1] + ... + w[W-1] in[t] in that order, as the CPU does.
//  - Decode (every run one token): one thread per (sequence, channel) reads the W-1 state
//    inputs, writes the output and shifts the state in place, all in that one thread.
//  - Otherwise two launches: outputs first (a thread per channel and tile of rows, the
//    inputs before a run read from the old state), then the new states (a thread per
//    sequence and channel). The second launch starts after the first has read every old
//    state, which is what makes the in-place update safe for runs shorter than W-1.
// The scratch row (slot == state_rows) is read as zeros and never written, as on the CPU,
// so any number of padding entries may share it.
#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/causal_conv1d_math.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"

namespace coil::cuda {
namespace {

constexpr int kChannelsPerBlock = 128;
constexpr int kRowsPerBlock = 16;  // output launch: rows one thread computes
constexpr unsigned kMaxGridY = 65535;

// grid (ceil(C / 128), min(num_seqs, 65535)); every run has one token.
__global__ void __launch_bounds__(kChannelsPerBlock) ConvDecodeKernel(ConvParams p) {
  const int32_t c = blockIdx.x * kChannelsPerBlock + threadIdx.x;
  if (c >= p.channels) return;
  for (int32_t s = blockIdx.y; s < p.num_seqs; s += gridDim.y) ConvDecode(p, s, c);
}

// The sequence owning packed row `row`: the last s with cu_seqlens[s] <= row.
__device__ inline int32_t SequenceOfRow(const ConvParams& p, int32_t row) {
  int32_t lo = 0, hi = p.num_seqs - 1;
  while (lo < hi) {
    const int32_t mid = lo + (hi - lo + 1) / 2;
    if (p.cu_seqlens[mid] <= row) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// grid (ceil(C / 128), min(ceil(rows / 16), 65535)): outputs only; histories untouched.
__global__ void __launch_bounds__(kChannelsPerBlock) ConvOutputKernel(ConvParams p) {
  const int32_t c = blockIdx.x * kChannelsPerBlock + threadIdx.x;
  if (c >= p.channels) return;
  for (int64_t r0 = static_cast<int64_t>(blockIdx.y) * kRowsPerBlock; r0 < p.rows;
       r0 += static_cast<int64_t>(gridDim.y) * kRowsPerBlock) {
    const int64_t tile_end = r0 + kRowsPerBlock;
    const int32_t r_end = static_cast<int32_t>(tile_end < p.rows ? tile_end : p.rows);
    int32_t s = SequenceOfRow(p, static_cast<int32_t>(r0));
    for (int32_t r = static_cast<int32_t>(r0); r < r_end; ++r) {
      while (p.cu_seqlens[s + 1] <= r) ++s;
      ConvOutput(p, s, r, c);
    }
  }
}

// grid (ceil(C / 128), min(num_seqs, 65535)): the new histories, after every output.
__global__ void __launch_bounds__(kChannelsPerBlock) ConvStateKernel(ConvParams p) {
  const int32_t c = blockIdx.x * kChannelsPerBlock + threadIdx.x;
  if (c >= p.channels) return;
  for (int32_t s = blockIdx.y; s < p.num_seqs; s += gridDim.y) ConvNewHistory(p, s, c);
}

}  // namespace

absl::StatusOr<ConvParams> ConvParamsFor(const Tensor& x, const Tensor& weight,
                                         const Tensor& bias, const RecurrentBatch& batch,
                                         const Tensor& conv_state, const Tensor* out) {
  constexpr int64_t kInt32Max = 0x7fffffff;
  if (x.dim(0) > kInt32Max || x.dim(1) > kInt32Max || conv_state.dim(0) > kInt32Max ||
      weight.dim(1) > kInt32Max) {
    return absl::InvalidArgumentError(
        absl::StrCat("x ", x.DebugString(), " or conv_state ", conv_state.DebugString(),
                     " exceeds the CUDA conv's int32 sizes; split the batch"));
  }
  ConvParams p{};
  p.x = x.data<float>();
  p.weight = weight.data<float>();
  p.bias = bias.data<float>();
  p.state = conv_state.data<float>();
  p.out = out != nullptr ? out->data<float>() : nullptr;
  p.x_stride = x.stride(0);
  p.out_stride = out != nullptr ? out->stride(0) : 0;
  p.cu_seqlens = batch.device_cu_seqlens;
  p.slots = batch.device_slots;
  p.fresh = batch.device_fresh;
  p.num_seqs = batch.num_seqs();
  p.rows = static_cast<int32_t>(x.dim(0));
  p.channels = static_cast<int32_t>(x.dim(1));
  p.width = static_cast<int32_t>(weight.dim(1));
  p.state_rows = static_cast<int32_t>(conv_state.dim(0) - 1);
  return p;
}

absl::Status LaunchCausalConv1d(const CudaContext& ctx, const Tensor& x, const Tensor& weight,
                                const Tensor& bias, const RecurrentBatch& batch,
                                const Tensor& conv_state, const Tensor& out) {
  COIL_ASSIGN_OR_RETURN(const ConvParams p, ConvParamsFor(x, weight, bias, batch, conv_state, &out));
  const unsigned channel_blocks =
      static_cast<unsigned>((p.channels + kChannelsPerBlock - 1) / kChannelsPerBlock);
  const unsigned seq_blocks = std::min<unsigned>(static_cast<unsigned>(p.num_seqs), kMaxGridY);
  bool decode = true;
  for (int s = 0; s < batch.num_seqs() && decode; ++s) decode = batch.run_length(s) == 1;
  if (decode) {
    ConvDecodeKernel<<<dim3(channel_blocks, seq_blocks), kChannelsPerBlock, 0, ctx.stream>>>(p);
    COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  }
  const unsigned row_blocks = static_cast<unsigned>(
      std::min<int64_t>((p.rows + kRowsPerBlock - 1) / kRowsPerBlock, kMaxGridY));
  ConvOutputKernel<<<dim3(channel_blocks, row_blocks), kChannelsPerBlock, 0, ctx.stream>>>(p);
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  ConvStateKernel<<<dim3(channel_blocks, seq_blocks), kChannelsPerBlock, 0, ctx.stream>>>(p);
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace coil::cuda
