// Backend::MixerDecode on the GPU in one launch: causal conv, one-token state update and
// gated RMSNorm of a decode step (block body and its contract: mixer_decode_block.h). One
// block per (sequence, head, tile of 32 headdim rows); a decode layer then takes four
// launches (norm, in_proj, this, out_proj) instead of six. MixerDecodeSumSquares is the same
// launch stopping at the norm's sums of squares (heads whose group spans ranks).
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/mixer_decode_block.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/row_kernels.cuh"
#include "kernels/cuda/ssm_scan_kernels.cuh"

namespace coil::cuda {
namespace {

static_assert(kMixerThreads == kRowThreads,
              "the fused norm must take GatedRmsNormKernel's columns per thread and sum order");

struct MixerDeviceExec {
  template <typename T>
  struct PerThread {
    T v;
    __device__ T& operator()(int /*tid*/) { return v; }
  };
  template <typename F>
  __device__ void Threads(F f) {
    f(static_cast<int>(threadIdx.x));
  }
  __device__ void Sync() { __syncthreads(); }
  __device__ void FenceSync() {
    __threadfence();
    __syncthreads();
  }
  __device__ void Acquire() { __threadfence(); }
  __device__ float WarpSum(PerThread<float>& v, int /*tid*/) { return ::coil::cuda::WarpSum(v.v); }
  __device__ float BlockSum(PerThread<float>& v, float* scratch) {
    return ::coil::cuda::BlockSum(v.v, scratch);
  }
  // Another block of this launch wrote y: read it from L2, past this SM's L1.
  __device__ float LoadY(const float* y) { return __ldcg(y); }
  __device__ int32_t TakeTicket(int32_t* ticket, int32_t last) {
    return static_cast<int32_t>(
        atomicInc(reinterpret_cast<unsigned*>(ticket), static_cast<unsigned>(last)));
  }
};

template <int kVec, int kSteps, typename StateT, typename OutT>
__global__ void __launch_bounds__(kMixerThreads) MixerDecodeKernel(MixerDecodeParams p, OutT* out) {
  extern __shared__ float shared[];
  PdlWait();  // xbc_in, dt and z are the previous kernel's output
  PdlLaunchDependents();
  const MixerSmem sm = MixerSmemAt(shared, p.scan.d_state);
  MixerDeviceExec ex;
  MixerDecodeBlock<kVec, kSteps, StateT>(ex, sm, p, blockIdx.x,
                                 [out](int64_t at, float v) { StoreOut(out + at, v); });
}

}  // namespace

absl::Status LaunchMixerDecode(const CudaContext& ctx, const Tensor& xbc_in, const Tensor& dt,
                               const Tensor& z, const MixerWeights& weights, float norm_eps,
                               const SsmScanOptions& options, const RecurrentBatch& batch,
                               const Tensor& conv_state, const Tensor& ssm_state,
                               const Tensor& xbc, const Tensor& y, const Tensor& out,
                               const Tensor& sumsq, int32_t* tickets) {
  if (out.empty() == sumsq.empty()) {
    return absl::InternalError("the fused mixer decode writes either out or sumsq");
  }
  const int64_t headdim = ssm_state.dim(2);
  const int64_t e = ssm_state.dim(1) * headdim, gn = (xbc_in.dim(1) - e) / 2;
  MixerDecodeParams p{};
  // The conv writes no out here, and the update reads x, b and c from shared memory: the
  // xbc columns are named only as the three ops' composition would use them.
  COIL_ASSIGN_OR_RETURN(p.conv, ConvParamsFor(xbc_in, weights.conv_weight, weights.conv_bias,
                                              batch, conv_state, nullptr));
  COIL_ASSIGN_OR_RETURN(
      p.scan, SsmScanParamsFor(xbc.Columns(0, e), dt, weights.a_log, xbc.Columns(e, gn),
                               xbc.Columns(e + gn, gn), weights.d, weights.dt_bias, options,
                               batch, ssm_state, y));
  p.z = z.data<float>();
  p.z_stride = z.stride(0);
  p.norm_weight = weights.norm_weight.data<float>();
  p.norm_eps = norm_eps;
  p.out_stride = out.empty() ? 0 : out.stride(0);
  p.sumsq = sumsq.empty() ? nullptr : sumsq.data<float>();
  p.sumsq_stride = sumsq.empty() ? 0 : sumsq.stride(0);
  p.tickets = tickets;
  p.p_tiles = static_cast<int32_t>((headdim + kMixerRows - 1) / kMixerRows);

  const int64_t blocks = static_cast<int64_t>(batch.num_seqs()) * p.scan.heads * p.p_tiles;
  if (blocks == 0) return absl::OkStatus();
  if (blocks > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the mixer decode needs ", blocks, " blocks; the limit is 2^31 - 1; split the batch"));
  }
  const size_t shared_bytes =
      static_cast<size_t>(MixerSmemFloats(p.scan.d_state)) * sizeof(float);
  cudaError_t launched = cudaSuccess;
  COIL_RETURN_IF_ERROR(DispatchDecodeLanes(p.scan, [&](auto vec, auto steps) {
    constexpr int kVec = decltype(vec)::value, kSteps = decltype(steps)::value;
    WithOutPointer(out, [&](auto* o) {
      using OutT = std::remove_pointer_t<decltype(o)>;
      const dim3 grid(static_cast<unsigned>(blocks)), block(kMixerThreads);
      launched = p.scan.state_bf16
                     ? LaunchMaybePdl(ctx, MixerDecodeKernel<kVec, kSteps, uint16_t, OutT>, grid,
                                      block, shared_bytes, p, o)
                     : LaunchMaybePdl(ctx, MixerDecodeKernel<kVec, kSteps, float, OutT>, grid,
                                      block, shared_bytes, p, o);
    });
    return absl::OkStatus();
  }));
  COIL_CUDA_RETURN_IF_ERROR(launched);
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace coil::cuda
