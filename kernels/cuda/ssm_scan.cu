// The Mamba2 selective scan on the GPU: dispatch, and the one-token state update of decode
// (mamba_ssm's selective_state_update with indexed slots). Runs of one token take the
// update here; longer runs take the chunked SSD path (ssd_scan.cu). The choice depends on
// the run alone, as on the CPU, so a sequence computes the same whatever shares its batch.
//
// Decode: one block per (sequence, head, tile of 16 headdim rows), 4 warps of 4 rows each.
// A warp holds its rows' state in registers (lane j owns d_state columns j*V .. j*V+V-1 of
// each 32*V-wide span, V = 4 with float4 loads when d_state allows), reads it once, writes it
// once, and reduces y over d_state with shuffles. The state is the dominant traffic.
#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/ssm_scan_kernels.cuh"

namespace coil::cuda {
namespace {

constexpr int kDecodeWarps = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kRowsPerBlock = kDecodeWarps * kRowsPerWarp;
// kVec: d_state columns per lane and load (1 or 4); kSteps: loads per lane per span;
// StateT: the state's element type (float, or uint16_t for bf16).
template <int kVec, int kSteps, typename StateT>
__global__ void __launch_bounds__(kDecodeWarps * 32)
    SsmDecodeKernel(SsmScanParams p, int32_t p_tiles) {
  extern __shared__ float shared[];  // b row [d_state] | c row [d_state]
  const int64_t item = blockIdx.x;
  const int32_t tile = static_cast<int32_t>(item % p_tiles);
  const int32_t head = static_cast<int32_t>((item / p_tiles) % p.heads);
  const int32_t seq = static_cast<int32_t>(item / p_tiles / p.heads);
  const int32_t row = p.cu_seqlens[seq];
  if (p.cu_seqlens[seq + 1] - row != 1) return;  // a longer run: the chunked path's

  const int32_t N = p.d_state, P = p.headdim;
  const int32_t group = SsmGroupOf(p, head);
  float* b_row = shared;
  float* c_row = shared + N;
  const float* b_src = p.b + row * p.b_stride + static_cast<int64_t>(group) * N;
  const float* c_src = p.c + row * p.c_stride + static_cast<int64_t>(group) * N;
  for (int32_t n = threadIdx.x; n < N; n += blockDim.x) {
    b_row[n] = b_src[n];
    c_row[n] = c_src[n];
  }
  __syncthreads();

  const float dtv = SsmDt(p, row, head);
  const float decay = expf(SsmA(p, head) * dtv);
  const int32_t slot = p.slots[seq];
  const bool scratch = slot == p.state_rows;
  const bool zero = scratch || p.fresh[seq] != 0;
  StateT* state = SsmStateOf<StateT>(p, slot, head);
  const float* x_row = p.x + row * p.x_stride + static_cast<int64_t>(head) * P;

  const int lane = threadIdx.x & 31;
  const int32_t p_base = tile * kRowsPerBlock + (threadIdx.x >> 5) * kRowsPerWarp;
  float xdt[kRowsPerWarp], acc[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int32_t pr = p_base + r;
    xdt[r] = pr < P ? x_row[pr] * dtv : 0.0f;
    acc[r] = 0.0f;
  }
  SsmDecodeLane<kVec, kSteps, kRowsPerWarp>(p, b_row, c_row, state, zero, scratch, decay, xdt,
                                            p_base, lane, acc);
  const float dh = p.d[head];
  float* y_row = p.y + row * p.y_stride + static_cast<int64_t>(head) * P;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const float sum = WarpSum(acc[r]);
    const int32_t pr = p_base + r;
    if (lane == 0 && pr < P) y_row[pr] = sum + dh * x_row[pr];
  }
}

template <int kVec, int kSteps, typename StateT>
absl::Status LaunchDecode(const CudaContext& ctx, const SsmScanParams& p) {
  const int32_t p_tiles = (p.headdim + kRowsPerBlock - 1) / kRowsPerBlock;
  const int64_t blocks = static_cast<int64_t>(p.num_seqs) * p.heads * p_tiles;
  if (blocks > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the decode scan needs ", blocks, " blocks; the limit is 2^31 - 1; split the batch"));
  }
  const size_t shared_bytes = 2 * static_cast<size_t>(p.d_state) * sizeof(float);
  SsmDecodeKernel<kVec, kSteps, StateT>
      <<<static_cast<unsigned>(blocks), kDecodeWarps * 32, shared_bytes, ctx.stream>>>(p, p_tiles);
  COIL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LaunchDecodeFor(const CudaContext& ctx, const SsmScanParams& p) {
  return DispatchDecodeLanes(p, [&](auto vec, auto steps) {
    constexpr int kVec = decltype(vec)::value, kSteps = decltype(steps)::value;
    return p.state_bf16 ? LaunchDecode<kVec, kSteps, uint16_t>(ctx, p)
                        : LaunchDecode<kVec, kSteps, float>(ctx, p);
  });
}

}  // namespace

absl::StatusOr<SsmScanParams> SsmScanParamsFor(const Tensor& x, const Tensor& dt,
                                               const Tensor& a_log, const Tensor& b,
                                               const Tensor& c, const Tensor& d,
                                               const Tensor& dt_bias,
                                               const SsmScanOptions& options,
                                               const RecurrentBatch& batch,
                                               const Tensor& ssm_state, const Tensor& y) {
  const int64_t heads = ssm_state.dim(1), headdim = ssm_state.dim(2), d_state = ssm_state.dim(3);
  const int64_t groups = b.dim(1) / d_state;
  const int64_t rows = x.dim(0);
  // int32 sizes inside the kernels; every element offset is formed in int64.
  constexpr int64_t kInt32Max = 0x7fffffff;
  if (ssm_state.dim(0) > kInt32Max || heads * headdim > kInt32Max ||
      headdim * d_state > kInt32Max || groups * d_state > kInt32Max || rows > kInt32Max) {
    return absl::InvalidArgumentError(absl::StrCat("ssm_state ", ssm_state.DebugString(), " or ",
                                                   rows,
                                                   " rows exceed the CUDA scan's int32 sizes"));
  }
  if (d_state > kMaxDecodeDState) {
    return absl::UnimplementedError(absl::StrCat("d_state ", d_state,
                                                 " is above the CUDA scan's limit of ",
                                                 kMaxDecodeDState, "; use --device cpu"));
  }
  SsmScanParams p{};
  p.x = x.data<float>();
  p.dt = dt.data<float>();
  p.a_log = a_log.data<float>();
  p.b = b.data<float>();
  p.c = c.data<float>();
  p.d = d.data<float>();
  p.dt_bias = dt_bias.data<float>();
  p.state = ssm_state.raw();
  p.state_bf16 = ssm_state.dtype() == DType::kBF16;
  p.y = y.data<float>();
  p.x_stride = x.stride(0);
  p.dt_stride = dt.stride(0);
  p.b_stride = b.stride(0);
  p.c_stride = c.stride(0);
  p.y_stride = y.stride(0);
  p.cu_seqlens = batch.device_cu_seqlens;
  p.slots = batch.device_slots;
  p.fresh = batch.device_fresh;
  p.start_positions = batch.device_start_positions;
  p.num_seqs = batch.num_seqs();
  p.rows = static_cast<int32_t>(rows);
  p.heads = static_cast<int32_t>(heads);
  p.headdim = static_cast<int32_t>(headdim);
  p.d_state = static_cast<int32_t>(d_state);
  p.groups = static_cast<int32_t>(groups);
  p.heads_per_group =
      static_cast<int32_t>(options.heads_per_group > 0 ? options.heads_per_group : heads / groups);
  p.first_head =
      static_cast<int32_t>(options.heads_per_group > 0 ? options.first_head_in_group : 0);
  p.state_rows = static_cast<int32_t>(ssm_state.dim(0) - 1);
  p.dt_min = options.dt_min;
  p.dt_max = options.dt_max;
  return p;
}

absl::Status LaunchSsmScan(const CudaContext& ctx, const Tensor& x, const Tensor& dt,
                           const Tensor& a_log, const Tensor& b, const Tensor& c, const Tensor& d,
                           const Tensor& dt_bias, const SsmScanOptions& options,
                           const RecurrentBatch& batch, const Tensor& ssm_state, const Tensor& y) {
  COIL_ASSIGN_OR_RETURN(const SsmScanParams p, SsmScanParamsFor(x, dt, a_log, b, c, d, dt_bias,
                                                               options, batch, ssm_state, y));
  bool any_single = false, any_long = false;
  for (int s = 0; s < batch.num_seqs(); ++s) {
    (batch.run_length(s) == 1 ? any_single : any_long) = true;
  }
  // The two paths take disjoint sequences (and so disjoint slots; the scratch row is never
  // written), so their order does not matter.
  if (any_single) COIL_RETURN_IF_ERROR(LaunchDecodeFor(ctx, p));
  if (any_long) COIL_RETURN_IF_ERROR(LaunchSsdChunked(ctx, p, batch, options.chunk_size,
                                                       options.bf16_products));
  return absl::OkStatus();
}

}  // namespace coil::cuda
