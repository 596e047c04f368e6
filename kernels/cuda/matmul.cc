// cuBLASLt host code for CublasLtMatmul (matmul.h). Row-major y = x W^T is computed as the
// column-major product y^T = W x^T: W [N, K] row-major is the column-major K x N matrix A
// taken transposed, x [M, K] with row stride ldx is the column-major K x M matrix B, and
// y [M, N] with row stride ldy is the column-major N x M matrix D. M is therefore cuBLAS's
// n, the only dimension an algorithm never depends on in its K-reduction order once the
// algorithm (tile, stages, split-K = 1) is fixed; the plan for an operand key pins it.
#include "kernels/cuda/matmul.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"

namespace coil::cuda {
namespace {

// The M the heuristic is asked about (heuristic_rows_) is fixed for the object's life, so
// the pinned algorithm, and with it every bit of y, does not depend on which M a process
// happened to multiply first. The default, 64, is a mid-sized decode batch: large prefills
// pay a little for the smaller tile it tends to pick, decode gets more blocks over N.
constexpr int kHeuristicCandidates = 8;

struct LtDestroy {
  void operator()(cublasLtContext* p) const { cublasLtDestroy(p); }
  void operator()(cublasLtMatmulDescOpaque_t* p) const { cublasLtMatmulDescDestroy(p); }
  void operator()(cublasLtMatrixLayoutOpaque_t* p) const { cublasLtMatrixLayoutDestroy(p); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using LtHandle = std::unique_ptr<cublasLtContext, LtDestroy>;
using OpDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, LtDestroy>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LtDestroy>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, LtDestroy>;

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};
using DeviceMemory = std::unique_ptr<void, CudaFree>;

cudaDataType_t CudaType(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

// The alignment cuBLASLt may assume for a matrix: that of its first element and of its
// leading dimension in bytes, capped at 16 (the widest vector access of its kernels).
uint32_t Alignment(const void* data, int64_t ld_bytes) {
  const uint64_t bits = reinterpret_cast<uintptr_t>(data) | static_cast<uint64_t>(ld_bytes) | 16u;
  return static_cast<uint32_t>(bits & (~bits + 1));  // the lowest set bit
}

// Everything the algorithm choice depends on except M.
struct PlanKey {
  DType w_dtype;
  int64_t n, k, ldx, ldy;
  uint32_t align_w, align_x, align_y;
  auto Tie() const { return std::tie(w_dtype, n, k, ldx, ldy, align_w, align_x, align_y); }
  bool operator<(const PlanKey& o) const { return Tie() < o.Tie(); }
};

// The descriptors and the pinned algorithm of one key. b and d change their column count
// (M) per call; rows_checked lists the M values cublasLtMatmulAlgoCheck accepted.
struct Plan {
  OpDesc op;
  Layout a, b, d;
  cublasLtMatmulAlgo_t algo{};
  std::set<int64_t> rows_checked;
};

absl::Status SetCols(cublasLtMatrixLayout_t layout, int64_t cols) {
  const uint64_t value = static_cast<uint64_t>(cols);
  COIL_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_COLS, &value, sizeof(value)));
  return absl::OkStatus();
}

// Turns split-K off in `algo`: one K sweep per output element, no reduction pass.
absl::Status PinSingleSweep(cublasLtMatmulAlgo_t& algo) {
  const int32_t splits = 1;
  const uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
  COIL_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulAlgoConfigSetAttribute(
      &algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits)));
  COIL_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulAlgoConfigSetAttribute(
      &algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme)));
  return absl::OkStatus();
}

std::string KeyString(const PlanKey& key) {
  return absl::StrCat("N=", key.n, " K=", key.k, " w=", DTypeName(key.w_dtype), " ldx=", key.ldx,
                      " ldy=", key.ldy);
}

class CublasLtMatmulImpl final : public CublasLtMatmul {
 public:
  static absl::StatusOr<std::unique_ptr<CublasLtMatmul>> Make(const CudaContext& ctx,
                                                              int64_t heuristic_rows) {
    COIL_RETURN_IF_ERROR(CheckCudaMatmulRows(heuristic_rows));
    auto m = std::unique_ptr<CublasLtMatmulImpl>(new CublasLtMatmulImpl(heuristic_rows));
    cublasLtHandle_t handle = nullptr;
    COIL_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&handle));
    m->handle_.reset(handle);
    void* workspace = nullptr;
    const cudaError_t error = cudaMalloc(&workspace, kWorkspaceBytes);
    if (error != cudaSuccess) {
      cudaGetLastError();
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate the ", kWorkspaceBytes, "-byte cuBLASLt workspace (",
                       cudaGetErrorString(error), "); free GPU memory or use another GPU"));
    }
    m->workspace_.reset(workspace);
    return std::unique_ptr<CublasLtMatmul>(std::move(m));
  }

  absl::Status Run(const CudaContext& ctx, const Tensor& x, const Tensor& w,
                   const Tensor& y) override {
    const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
    if (m == 0 || n == 0) return absl::OkStatus();
    if (m > 1 && (x.stride(0) < k || y.stride(0) < n)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "x is ", x.DebugString(), " and y is ", y.DebugString(),
          "; cuBLASLt needs row strides of at least the row widths (rows must not overlap)"));
    }
    const DType wt = w.dtype();
    const void* b_data = x.raw();
    const void* b_remainder = nullptr;  // the f16 split's second plane
    int64_t ldx = std::max(x.stride(0), k);
    // With 16-bit weights cuBLASLt always sees x as 16-bit rows of leading dimension
    // HalfRowsLd(k): the plan key (and so the pinned algorithm, and a row's bits) is then the
    // same whether x came as f32 rows, converted, or as bf16 rows. bf16 rows (with bf16
    // weights, checked by Backend::Matmul) are already what the conversion produces, and are
    // read in place when they have that stride and a 16-byte aligned start (the model's do
    // whenever d_model is a multiple of 128, as every released Mamba2's is); others are
    // copied into that layout.
    const int64_t half_ld = HalfRowsLd(k);
    const bool bf16_in_place = x.dtype() == DType::kBF16 && (m == 1 || x.stride(0) == half_ld) &&
                               Alignment(x.raw(), half_ld * 2) == 16;
    if (bf16_in_place) ldx = half_ld;
    if (wt != DType::kF32 && !bf16_in_place) {
      ldx = half_ld;
      const int planes = wt == DType::kF16 ? 2 : 1;
      COIL_RETURN_IF_ERROR(EnsureHalfRows(ctx, planes * m * ldx * 2));
      char* hi = static_cast<char*>(half_rows_.get());
      char* lo = wt == DType::kF16 ? hi + m * ldx * 2 : nullptr;
      COIL_RETURN_IF_ERROR(LaunchRowsToHalf(ctx, x, wt, hi, lo, ldx));
      b_data = hi;
      b_remainder = lo;
    }
    const int64_t ldy = std::max(y.stride(0), n);
    // x (or its 16-bit copy) has the weight's element size on every path.
    const int64_t elem = static_cast<int64_t>(DTypeSize(wt));
    const PlanKey key{wt,
                      n,
                      k,
                      ldx,
                      ldy,
                      Alignment(w.raw(), k * elem),
                      Alignment(b_data, ldx * elem),
                      Alignment(y.raw(), ldy * 4)};
    COIL_ASSIGN_OR_RETURN(Plan * plan, GetPlan(key));
    COIL_RETURN_IF_ERROR(SetCols(plan->b.get(), m));
    COIL_RETURN_IF_ERROR(SetCols(plan->d.get(), m));
    if (!plan->rows_checked.count(m)) {
      cublasLtMatmulHeuristicResult_t check{};
      const cublasStatus_t status =
          cublasLtMatmulAlgoCheck(handle_.get(), plan->op.get(), plan->a.get(), plan->b.get(),
                                  plan->d.get(), plan->d.get(), &plan->algo, &check);
      if (status != CUBLAS_STATUS_SUCCESS || check.workspaceSize > kWorkspaceBytes) {
        // Re-choosing for this M would give its rows other bits than every other M's.
        return absl::InternalError(absl::StrCat(
            "the cuBLASLt algorithm pinned for ", KeyString(key), " does not apply to M=", m, " (",
            cublasLtGetStatusString(status), ", workspace ", check.workspaceSize,
            " bytes); rows would not be batch-invariant, so the matmul refuses to run"));
      }
      plan->rows_checked.insert(m);
    }
    const float alpha = 1.0f, beta = 0.0f, beta_accumulate = 1.0f;
    COIL_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(handle_.get(), plan->op.get(), &alpha, w.raw(),
                                               plan->a.get(), b_data, plan->b.get(), &beta, y.raw(),
                                               plan->d.get(), y.raw(), plan->d.get(), &plan->algo,
                                               workspace_.get(), kWorkspaceBytes, ctx.stream));
    if (b_remainder != nullptr) {
      // y += W lo: the same plan (the remainder plane has the same ld and alignment).
      COIL_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(
          handle_.get(), plan->op.get(), &alpha, w.raw(), plan->a.get(), b_remainder, plan->b.get(),
          &beta_accumulate, y.raw(), plan->d.get(), y.raw(), plan->d.get(), &plan->algo,
          workspace_.get(), kWorkspaceBytes, ctx.stream));
    }
    return absl::OkStatus();
  }

  absl::Status Reserve(const CudaContext& ctx, int64_t max_rows, int64_t max_k) override {
    if (max_rows < 0 || max_k < 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot reserve ", max_rows, " rows of ",
                                                     max_k, " columns; pass sizes >= 0"));
    }
    // Two planes: room for the f16 split as well as for bf16.
    return EnsureHalfRows(ctx, 2 * max_rows * HalfRowsLd(max_k) * 2);
  }

  std::vector<std::string> DescribePlans() const override {
    std::vector<std::string> lines;
    for (const auto& [key, plan] : plans_) {
      std::string line = absl::StrCat("matmul ", KeyString(key), ": pinned for M=",
                                      heuristic_rows_);
      for (const auto& [name, attr] :
           {std::pair{"algo", CUBLASLT_ALGO_CONFIG_ID}, std::pair{"tile", CUBLASLT_ALGO_CONFIG_TILE_ID},
            std::pair{"stages", CUBLASLT_ALGO_CONFIG_STAGES_ID},
            std::pair{"cluster", CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID},
            std::pair{"swizzle", CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING}}) {
        // The attributes are 16- or 32-bit (cublasLt.h); cuBLASLt wants the exact size, so
        // it is asked first. One it does not know is left out.
        size_t size = 0;
        if (cublasLtMatmulAlgoConfigGetAttribute(&plan.algo, attr, nullptr, 0, &size) !=
            CUBLAS_STATUS_SUCCESS) {
          continue;
        }
        size_t written = 0;
        if (size == sizeof(uint16_t)) {
          uint16_t value = 0;
          if (cublasLtMatmulAlgoConfigGetAttribute(&plan.algo, attr, &value, size, &written) ==
              CUBLAS_STATUS_SUCCESS) {
            absl::StrAppend(&line, ", ", name, " ", value);
          }
        } else if (size == sizeof(uint32_t)) {
          uint32_t value = 0;
          if (cublasLtMatmulAlgoConfigGetAttribute(&plan.algo, attr, &value, size, &written) ==
              CUBLAS_STATUS_SUCCESS) {
            absl::StrAppend(&line, ", ", name, " ", value);
          }
        }
      }
      absl::StrAppend(&line, "; checked for M in {", absl::StrJoin(plan.rows_checked, ","), "}");
      lines.push_back(std::move(line));
    }
    return lines;
  }

 private:
  explicit CublasLtMatmulImpl(int64_t heuristic_rows) : heuristic_rows_(heuristic_rows) {}

  // Grows the 16-bit copy of x to at least `bytes`. The old buffer is kept, not freed,
  // until this object goes: work still queued may read it, and a CUDA graph captured
  // earlier has its address recorded and reads it at every replay. Allocating while the
  // stream captures is refused: the graph would depend on an allocation made outside it.
  absl::Status EnsureHalfRows(const CudaContext& ctx, int64_t bytes) {
    if (bytes <= half_rows_bytes_) return absl::OkStatus();
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    COIL_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(ctx.stream, &capture));
    if (capture != cudaStreamCaptureStatusNone) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the matmul needs ", bytes, " bytes for its 16-bit copy of x but has ", half_rows_bytes_,
          " while a CUDA graph is being captured; call "
          "CudaBackend::ReserveMatmul with the largest rows and K before capture"));
    }
    // Half again at least, so that a prefill growing step by step reallocates rarely (the
    // kept buffers then add up to at most twice the last one).
    const int64_t wanted = std::max(bytes, half_rows_bytes_ + half_rows_bytes_ / 2);
    void* data = nullptr;
    const cudaError_t error = cudaMalloc(&data, static_cast<size_t>(wanted));
    if (error != cudaSuccess) {
      cudaGetLastError();
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", wanted, " bytes for the matmul's 16-bit copy of x (",
                       cudaGetErrorString(error), "); lower --max-batched-tokens"));
    }
    if (half_rows_ != nullptr) retired_half_rows_.push_back(std::move(half_rows_));
    half_rows_.reset(data);
    half_rows_bytes_ = wanted;
    return absl::OkStatus();
  }

  // The plan of `key`, made on first use: descriptors, then the heuristic's best
  // algorithm for heuristic_rows_ rows that runs with split-K off.
  absl::StatusOr<Plan*> GetPlan(const PlanKey& key) {
    auto it = plans_.find(key);
    if (it != plans_.end()) return &it->second;
    Plan plan;
    cublasLtMatmulDesc_t op = nullptr;
    // CUBLAS_COMPUTE_32F: fp32 accumulation, and no TF32 for f32 inputs.
    COIL_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    plan.op.reset(op);
    const int32_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
    COIL_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                               &transpose, sizeof(transpose)));
    COIL_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)));
    cublasLtMatrixLayout_t layout = nullptr;
    const cudaDataType_t in_type = CudaType(key.w_dtype);
    COIL_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&layout, in_type, key.k, key.n, key.k));
    plan.a.reset(layout);
    COIL_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatrixLayoutCreate(&layout, in_type, key.k, heuristic_rows_, key.ldx));
    plan.b.reset(layout);
    COIL_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, key.n, heuristic_rows_, key.ldy));
    plan.d.reset(layout);

    cublasLtMatmulPreference_t pref_raw = nullptr;
    COIL_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref_raw));
    Preference pref(pref_raw);
    const uint64_t workspace = kWorkspaceBytes;
    COIL_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
        pref_raw, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
    for (const auto& [attr, value] :
         {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_w},
          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_x},
          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_y},
          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_y}}) {
      COIL_CUBLAS_RETURN_IF_ERROR(
          cublasLtMatmulPreferenceSetAttribute(pref_raw, attr, &value, sizeof(value)));
    }
    // Only algorithms that need no split-K reduction; if that leaves none, the first pass
    // below still forces split-K off on whatever the unrestricted heuristic returns.
    const uint32_t no_reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
    COIL_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
        pref_raw, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &no_reduction, sizeof(no_reduction)));
    cublasLtMatmulHeuristicResult_t results[kHeuristicCandidates] = {};
    int count = 0;
    cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        handle_.get(), op, plan.a.get(), plan.b.get(), plan.d.get(), plan.d.get(), pref_raw,
        kHeuristicCandidates, results, &count);
    if (status != CUBLAS_STATUS_SUCCESS || count == 0) {
      const uint32_t any = CUBLASLT_REDUCTION_SCHEME_MASK;
      COIL_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
          pref_raw, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &any, sizeof(any)));
      count = 0;
      status = cublasLtMatmulAlgoGetHeuristic(handle_.get(), op, plan.a.get(), plan.b.get(),
                                              plan.d.get(), plan.d.get(), pref_raw,
                                              kHeuristicCandidates, results, &count);
    }
    if (status != CUBLAS_STATUS_SUCCESS) {
      return absl::InternalError(absl::StrCat("cuBLASLt has no algorithm for ", KeyString(key),
                                              ": ", cublasLtGetStatusString(status)));
    }
    // The first candidate (best predicted) that still applies with split-K off, at the M it
    // was chosen for and at a single row, the smallest M there is: an algorithm that some M
    // cannot run would have to be refused for it (a row must never change algorithm), and
    // one chosen for many rows may need more than one (a cluster of blocks over M).
    const auto applies = [&](const cublasLtMatmulAlgo_t& algo, int64_t rows) -> bool {
      if (!SetCols(plan.b.get(), rows).ok() || !SetCols(plan.d.get(), rows).ok()) return false;
      cublasLtMatmulHeuristicResult_t check{};
      return cublasLtMatmulAlgoCheck(handle_.get(), op, plan.a.get(), plan.b.get(), plan.d.get(),
                                     plan.d.get(), &algo, &check) == CUBLAS_STATUS_SUCCESS &&
             check.workspaceSize <= kWorkspaceBytes;
    };
    for (int i = 0; i < count; ++i) {
      if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
      cublasLtMatmulAlgo_t algo = results[i].algo;
      COIL_RETURN_IF_ERROR(PinSingleSweep(algo));
      if (!applies(algo, 1) || !applies(algo, heuristic_rows_)) continue;
      plan.algo = algo;
      plan.rows_checked.insert(1);
      plan.rows_checked.insert(heuristic_rows_);
      return &plans_.emplace(key, std::move(plan)).first->second;
    }
    return absl::InternalError(
        absl::StrCat("none of the ", count, " cuBLASLt algorithms proposed for ", KeyString(key),
                     " at M=", heuristic_rows_,
                     " runs without split-K at that M and at M=1; the matmul cannot be made "
                     "batch-invariant for this shape (try another --cuda-matmul-rows)"));
  }

  const int64_t heuristic_rows_;
  LtHandle handle_;
  DeviceMemory workspace_;
  DeviceMemory half_rows_;
  int64_t half_rows_bytes_ = 0;
  std::vector<DeviceMemory> retired_half_rows_;  // earlier copies, kept for captured graphs
  std::map<PlanKey, Plan> plans_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CublasLtMatmul>> CublasLtMatmul::Create(const CudaContext& ctx,
                                                                        int64_t heuristic_rows) {
  return CublasLtMatmulImpl::Make(ctx, heuristic_rows);
}

}  // namespace coil::cuda
