// The checks every backend shares: shapes, dtypes, devices and the RecurrentBatch.
#include "kernels/backend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <initializer_list>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace coil {
namespace {

absl::Status CheckTensor(const Backend& backend, const char* name, const Tensor& t,
                         std::initializer_list<DType> dtypes, int rank) {
  if (t.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is empty; pass a tensor"));
  }
  if (t.device() != backend.device()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is on ", DeviceName(t.device()),
                                                   "; the ", backend.Name(),
                                                   " backend needs it on ",
                                                   DeviceName(backend.device())));
  }
  bool dtype_ok = false;
  std::string allowed;
  for (DType d : dtypes) {
    dtype_ok |= t.dtype() == d;
    absl::StrAppend(&allowed, allowed.empty() ? "" : "/", DTypeName(d));
  }
  if (!dtype_ok) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is ", t.DebugString(), "; the op takes ", allowed));
  }
  if (t.rank() != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is ", t.DebugString(), "; the op takes rank ", rank));
  }
  if (!t.rows_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is ", t.DebugString(), "; its last dimension must be unit-stride"));
  }
  for (int i = 0; i < rank; ++i) {
    if (t.dim(i) <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " is ", t.DebugString(), "; every dimension must be positive"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckDim(const char* name, const Tensor& t, int axis, int64_t expected,
                      const char* what) {
  if (t.dim(axis) != expected) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is ", t.DebugString(), "; dimension ",
                                                   axis, " must be ", expected, " (", what,
                                                   ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckContiguous(const char* name, const Tensor& t) {
  if (!t.contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is ", t.DebugString(), "; it must be contiguous"));
  }
  return absl::OkStatus();
}

absl::Status CheckCausalConv1d(const Backend& backend, const Tensor& x, const Tensor& weight,
                               const Tensor& bias, const RecurrentBatch& batch,
                               const Tensor& conv_state, const Tensor& out) {
  COIL_RETURN_IF_ERROR(CheckTensor(backend, "x", x, {DType::kF32}, 2));
  COIL_RETURN_IF_ERROR(CheckTensor(backend, "weight", weight, {DType::kF32}, 2));
  COIL_RETURN_IF_ERROR(CheckTensor(backend, "bias", bias, {DType::kF32}, 1));
  COIL_RETURN_IF_ERROR(CheckTensor(backend, "out", out, {DType::kF32}, 2));
  const int64_t channels = x.dim(1);
  COIL_RETURN_IF_ERROR(CheckContiguous("weight", weight));
  COIL_RETURN_IF_ERROR(CheckDim("weight", weight, 0, channels, "x's channels"));
  if (weight.dim(1) < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight is ", weight.DebugString(), "; the conv width must be >= 2"));
  }
  COIL_RETURN_IF_ERROR(CheckDim("bias", bias, 0, channels, "x's channels"));
  COIL_RETURN_IF_ERROR(CheckDim("out", out, 0, x.dim(0), "x's rows"));
  COIL_RETURN_IF_ERROR(CheckDim("out", out, 1, channels, "x's channels"));
  COIL_RETURN_IF_ERROR(CheckTensor(backend, "conv_state", conv_state, {DType::kF32}, 3));
  COIL_RETURN_IF_ERROR(CheckContiguous("conv_state", conv_state));
  if (conv_state.dim(0) < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "conv_state is ", conv_state.DebugString(), "; it needs state rows plus the scratch row"));
  }
  COIL_RETURN_IF_ERROR(
      CheckDim("conv_state", conv_state, 1, weight.dim(1) - 1, "the conv width - 1"));
  COIL_RETURN_IF_ERROR(CheckDim("conv_state", conv_state, 2, channels, "x's channels"));
  COIL_RETURN_IF_ERROR(ValidateRecurrentBatch(batch, x.dim(0), conv_state.dim(0) - 1));
  return absl::OkStatus();
}

absl::Status CheckSsmScan(const Backend& backend, const Tensor& x, const Tensor& dt,
                          const Tensor& a_log, const Tensor& b, const Tensor& c, const Tensor& d,
                          const Tensor& dt_bias, const SsmScanOptions& options,
                          const RecurrentBatch& batch, const Tensor& ssm_state, const Tensor& y) {
  COIL_RETURN_IF_ERROR(CheckTensor(backend, "ssm_state", ssm_state,
                                   {DType::kF32, DType::kBF16}, 4));
  COIL_RETURN_IF_ERROR(CheckContiguous("ssm_state", ssm_state));
  if (ssm_state.dim(0) < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ssm_state is ", ssm_state.DebugString(), "; it needs state rows plus the scratch row"));
  }
  const int64_t heads = ssm_state.dim(1), headdim = ssm_state.dim(2), d_state = ssm_state.dim(3);
  COIL_RETURN_IF_ERROR(CheckTensor(backend, "x", x, {DType::kF32}, 2));
  const int64_t rows = x.dim(0);
  COIL_RETURN_IF_ERROR(CheckDim("x", x, 1, heads * headdim, "heads * headdim of the state"));
  COIL_RETURN_IF_ERROR(CheckTensor(backend, "dt", dt, {DType::kF32}, 2));
  COIL_RETURN_IF_ERROR(CheckDim("dt", dt, 0, rows, "x's rows"));
  COIL_RETURN_IF_ERROR(CheckDim("dt", dt, 1, heads, "heads"));
  COIL_RETURN_IF_ERROR(CheckTensor(backend, "b", b, {DType::kF32}, 2));
  COIL_RETURN_IF_ERROR(CheckDim("b", b, 0, rows, "x's rows"));
  if (b.dim(1) % d_state != 0) {
    return absl::InvalidArgumentError(absl::StrCat("b is ", b.DebugString(),
                                                   "; its width must be ngroups * d_state (",
                                                   d_state, ")"));
  }
  const int64_t groups = b.dim(1) / d_state;
  if (options.heads_per_group == 0) {
    if (heads % groups != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "heads (", heads, ") is not a multiple of ngroups (", groups, "); check b's width"));
    }
  } else {
    const int64_t hpg = options.heads_per_group, first = options.first_head_in_group;
    if (first < 0 || first >= hpg) {
      return absl::InvalidArgumentError(absl::StrCat("first_head_in_group is ", first,
                                                     "; it must be in [0, heads_per_group ",
                                                     hpg, ")"));
    }
    if (groups != (first + heads - 1) / hpg + 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          heads, " heads starting at head ", first, " of a group of ", hpg, " touch ",
          (first + heads - 1) / hpg + 1, " groups, but b holds ", groups));
    }
  }
  COIL_RETURN_IF_ERROR(CheckTensor(backend, "c", c, {DType::kF32}, 2));
  COIL_RETURN_IF_ERROR(CheckDim("c", c, 0, rows, "x's rows"));
  COIL_RETURN_IF_ERROR(CheckDim("c", c, 1, groups * d_state, "b's width"));
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"a_log", &a_log},
                                {"d", &d},
                                {"dt_bias", &dt_bias}}) {
    COIL_RETURN_IF_ERROR(CheckTensor(backend, name, *t, {DType::kF32}, 1));
    COIL_RETURN_IF_ERROR(CheckDim(name, *t, 0, heads, "heads"));
  }
  COIL_RETURN_IF_ERROR(CheckTensor(backend, "y", y, {DType::kF32}, 2));
  COIL_RETURN_IF_ERROR(CheckDim("y", y, 0, rows, "x's rows"));
  COIL_RETURN_IF_ERROR(CheckDim("y", y, 1, heads * headdim, "x's width"));
  if (options.chunk_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_size is ", options.chunk_size, "; it must be > 0"));
  }
  if (!(options.dt_min >= 0.0f) || !(options.dt_max >= options.dt_min)) {
    return absl::InvalidArgumentError(absl::StrCat("time_step_limit is (", options.dt_min, ", ",
                                                   options.dt_max,
                                                   "); it needs 0 <= min <= max"));
  }
  COIL_RETURN_IF_ERROR(ValidateRecurrentBatch(batch, rows, ssm_state.dim(0) - 1));
  return absl::OkStatus();
}

absl::Status CheckGatedRmsNorm(const Backend& backend, const Tensor& y, const Tensor& z,
                               const Tensor& weight, int64_t ngroups, float eps,
                               const Tensor& out) {
  COIL_RETURN_IF_ERROR(CheckTensor(backend, "y", y, {DType::kF32}, 2));
  COIL_RETURN_IF_ERROR(CheckTensor(backend, "z", z, {DType::kF32}, 2));
  COIL_RETURN_IF_ERROR(CheckTensor(backend, "weight", weight, {DType::kF32}, 1));
  COIL_RETURN_IF_ERROR(CheckTensor(backend, "out", out, {DType::kF32, DType::kBF16}, 2));
  COIL_RETURN_IF_ERROR(CheckDim("z", z, 0, y.dim(0), "y's rows"));
  COIL_RETURN_IF_ERROR(CheckDim("z", z, 1, y.dim(1), "y's width"));
  COIL_RETURN_IF_ERROR(CheckDim("weight", weight, 0, y.dim(1), "y's width"));
  COIL_RETURN_IF_ERROR(CheckDim("out", out, 0, y.dim(0), "y's rows"));
  COIL_RETURN_IF_ERROR(CheckDim("out", out, 1, y.dim(1), "y's width"));
  if (ngroups <= 0 || y.dim(1) % ngroups != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ngroups is ", ngroups, "; it must be > 0 and divide y's width ", y.dim(1)));
  }
  if (!(eps > 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("eps is ", eps, "; it must be > 0"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateRecurrentBatch(const RecurrentBatch& batch, int64_t rows,
                                    int64_t state_rows) {
  const int n = batch.num_seqs();
  if (n == 0) return absl::InvalidArgumentError("the batch has no sequences; add at least one");
  if (batch.cu_seqlens.size() != static_cast<size_t>(n) + 1 ||
      batch.fresh.size() != static_cast<size_t>(n) ||
      batch.start_positions.size() != static_cast<size_t>(n)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the batch has ", n, " slots but ", batch.cu_seqlens.size(), " cu_seqlens, ",
        batch.fresh.size(), " fresh flags and ", batch.start_positions.size(),
        " start positions; give num_seqs + 1 cu_seqlens and num_seqs of the others"));
  }
  if (batch.cu_seqlens[0] != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cu_seqlens[0] is ", batch.cu_seqlens[0], "; it must be 0"));
  }
  for (int s = 0; s < n; ++s) {
    if (batch.run_length(s) <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s, " has a run of ",
                                                     batch.run_length(s),
                                                     " tokens; every run needs at least 1"));
    }
    if (batch.start_positions[s] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s, " starts at position ",
                                                     batch.start_positions[s],
                                                     "; positions are >= 0"));
    }
  }
  if (batch.cu_seqlens[n] != rows) {
    return absl::InvalidArgumentError(absl::StrCat("the runs cover ", batch.cu_seqlens[n],
                                                   " rows but the tensors have ", rows,
                                                   "; the run lengths must sum to the rows"));
  }
  std::vector<uint8_t> used(static_cast<size_t>(state_rows), 0);
  for (int s = 0; s < n; ++s) {
    const int32_t slot = batch.slots[s];
    if (slot < 0 || slot > state_rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", s, " uses slot ", slot, "; slots are 0..", state_rows - 1,
                       " (", state_rows, " is the scratch row)"));
    }
    if (slot == state_rows) continue;  // the scratch row: any number of padding entries
    if (used[slot]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "slot ", slot, " is used twice in one batch; give each sequence its own slot"));
    }
    used[slot] = 1;
  }
  return absl::OkStatus();
}

absl::StatusOr<Buffer> Backend::Allocate(size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("cannot allocate 0 bytes; ask for at least 1");
  return DoAllocate(bytes);
}

absl::Status Backend::CopyFromHost(void* device_dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (device_dst == nullptr || host_src == nullptr) {
    return absl::InvalidArgumentError("copy with a null pointer; pass both buffers");
  }
  return TimedOp([] { return "CopyFromHost"; },
                 [&] { return DoCopy(device_dst, host_src, bytes, /*to_host=*/false); });
}

absl::Status Backend::FillZero(void* device_dst, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (device_dst == nullptr) return absl::InvalidArgumentError("fill with a null pointer; pass a buffer");
  return TimedOp([] { return "FillZero"; }, [&] { return DoFillZero(device_dst, bytes); });
}

absl::Status Backend::CopyOnDevice(void* dst, size_t dst_stride, const void* src, size_t src_stride,
                                   size_t block_bytes, size_t count) {
  if (block_bytes == 0 || count == 0) return absl::OkStatus();
  if (dst == nullptr || src == nullptr) {
    return absl::InvalidArgumentError("copy with a null pointer; pass both buffers");
  }
  if (count == 1) {
    dst_stride = src_stride = block_bytes;  // unused: one block
  } else if (dst_stride < block_bytes || src_stride < block_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "copy of ", count, " blocks of ", block_bytes, " bytes with strides ", dst_stride,
        " (destination) and ", src_stride, " (source); each stride must be at least the block"));
  }
  // A block is no longer than a source stride, so destination block i can only meet the
  // source block its start falls in and the one after.
  const auto address = [](const void* p) {
    return static_cast<int64_t>(reinterpret_cast<uintptr_t>(p));
  };
  const int64_t src_begin = address(src), stride = static_cast<int64_t>(src_stride);
  const int64_t bytes = static_cast<int64_t>(block_bytes), n = static_cast<int64_t>(count);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t begin = address(dst) + i * static_cast<int64_t>(dst_stride);
    const int64_t offset = begin - src_begin;
    const int64_t first = offset >= 0 ? offset / stride : -((-offset + stride - 1) / stride);
    for (int64_t j = std::max<int64_t>(first, 0); j <= std::min(first + 1, n - 1); ++j) {
      const int64_t block = src_begin + j * stride;
      if (begin < block + bytes && block < begin + bytes) {
        return absl::InvalidArgumentError(absl::StrCat("copy's destination block ", i,
                                                       " overlaps source block ", j,
                                                       "; copy between disjoint blocks"));
      }
    }
  }
  return TimedOp(
      [] { return "CopyOnDevice"; },
      [&] { return DoCopyOnDevice(dst, dst_stride, src, src_stride, block_bytes, count); });
}

absl::Status Backend::BeginCapture() {
  const absl::Status status = DoBeginCapture();
  if (status.ok()) capturing_ = true;
  return status;
}

absl::StatusOr<std::unique_ptr<Backend::Graph>> Backend::EndCapture() {
  auto graph = DoEndCapture();
  capturing_ = false;
  return graph;
}

absl::Status Backend::Replay(const Graph& graph) {
  return TimedOp([] { return "Replay (graph)"; }, [&] { return DoReplay(graph); });
}

void Backend::SetOpTiming(bool on) {
  timer_ = on ? std::make_unique<OpTimer>(MakeOpClock()) : nullptr;
  timing_error_ = absl::OkStatus();
  OnOpTimer(timer_.get());
}

void Backend::StopOpTiming(const absl::Status& why) {
  timing_error_ = why;
  timer_ = nullptr;
  OnOpTimer(nullptr);
}

absl::StatusOr<std::vector<OpTime>> Backend::TakeOpTimes() {
  if (!timing_error_.ok()) {
    const absl::Status why = timing_error_;
    timing_error_ = absl::OkStatus();
    return absl::Status(why.code(), absl::StrCat("op timing stopped: ", why.message()));
  }
  if (timer_ == nullptr) return std::vector<OpTime>{};
  return timer_->Take();
}

absl::Status Backend::DoBeginCapture() {
  return absl::UnimplementedError(
      absl::StrCat("the ", Name(), " backend records no graphs; run the ops directly"));
}

absl::StatusOr<std::unique_ptr<Backend::Graph>> Backend::DoEndCapture() {
  return absl::UnimplementedError(
      absl::StrCat("the ", Name(), " backend records no graphs; run the ops directly"));
}

absl::Status Backend::DoReplay(const Graph& /*graph*/) {
  return absl::UnimplementedError(
      absl::StrCat("the ", Name(), " backend records no graphs; run the ops directly"));
}

absl::Status Backend::CopyToHost(void* host_dst, const void* device_src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (host_dst == nullptr || device_src == nullptr) {
    return absl::InvalidArgumentError("copy with a null pointer; pass both buffers");
  }
  return TimedOp([] { return "CopyToHost"; },
                 [&] { return DoCopy(host_dst, device_src, bytes, /*to_host=*/true); });
}

absl::Status Backend::Embedding(const Tensor& ids, const Tensor& table, int64_t vocab_offset,
                                const Tensor& out) {
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "ids", ids, {DType::kI32}, 1));
  COIL_RETURN_IF_ERROR(
      CheckTensor(*this, "table", table, {DType::kF32, DType::kBF16, DType::kF16}, 2));
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "out", out, {DType::kF32}, 2));
  COIL_RETURN_IF_ERROR(CheckContiguous("ids", ids));
  COIL_RETURN_IF_ERROR(CheckDim("out", out, 0, ids.dim(0), "the number of ids"));
  COIL_RETURN_IF_ERROR(CheckDim("out", out, 1, table.dim(1), "the table's width"));
  if (vocab_offset < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab_offset is ", vocab_offset, "; it must be >= 0"));
  }
  return TimedOp([] { return BackendOpName(BackendOp::kEmbedding); },
                 [&] { return DoEmbedding(ids, table, vocab_offset, out); });
}

absl::Status Backend::AddRmsNorm(const Tensor& x, const Tensor& weight, float eps,
                                 const Tensor& residual, const Tensor& out) {
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "residual", residual, {DType::kF32}, 2));
  if (!x.empty()) {
    COIL_RETURN_IF_ERROR(CheckTensor(*this, "x", x, {DType::kF32}, 2));
    COIL_RETURN_IF_ERROR(CheckDim("x", x, 0, residual.dim(0), "the residual's rows"));
    COIL_RETURN_IF_ERROR(CheckDim("x", x, 1, residual.dim(1), "the residual's width"));
  }
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "weight", weight, {DType::kF32}, 1));
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "out", out, {DType::kF32, DType::kBF16}, 2));
  COIL_RETURN_IF_ERROR(CheckDim("weight", weight, 0, residual.dim(1), "the residual's width"));
  COIL_RETURN_IF_ERROR(CheckDim("out", out, 0, residual.dim(0), "the residual's rows"));
  COIL_RETURN_IF_ERROR(CheckDim("out", out, 1, residual.dim(1), "the residual's width"));
  if (!(eps > 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("eps is ", eps, "; it must be > 0"));
  }
  return TimedOp([] { return BackendOpName(BackendOp::kAddRmsNorm); },
                 [&] { return DoAddRmsNorm(x, weight, eps, residual, out); });
}

absl::Status Backend::Matmul(const Tensor& x, const Tensor& w, const Tensor& y) {
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "x", x, {DType::kF32, DType::kBF16}, 2));
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "w", w, {DType::kF32, DType::kBF16, DType::kF16}, 2));
  if (x.dtype() == DType::kBF16 && w.dtype() != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "x is ", x.DebugString(), " and w is ", w.DebugString(),
        "; bf16 rows only go with bf16 weights: pass x as f32"));
  }
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "y", y, {DType::kF32}, 2));
  COIL_RETURN_IF_ERROR(CheckContiguous("w", w));
  COIL_RETURN_IF_ERROR(CheckDim("w", w, 1, x.dim(1), "x's width K"));
  COIL_RETURN_IF_ERROR(CheckDim("y", y, 0, x.dim(0), "x's rows M"));
  COIL_RETURN_IF_ERROR(CheckDim("y", y, 1, w.dim(0), "w's rows N"));
  return TimedOp(
      [&] { return absl::StrCat(BackendOpName(BackendOp::kMatmul), " ", w.dim(0), "x", w.dim(1)); },
      [&] { return DoMatmul(x, w, y); });
}

absl::Status Backend::CausalConv1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   const RecurrentBatch& batch, const Tensor& conv_state,
                                   const Tensor& out) {
  COIL_RETURN_IF_ERROR(CheckCausalConv1d(*this, x, weight, bias, batch, conv_state, out));
  return TimedOp([] { return BackendOpName(BackendOp::kCausalConv1d); },
                 [&] { return DoCausalConv1d(x, weight, bias, batch, conv_state, out); });
}

absl::Status Backend::SsmScan(const Tensor& x, const Tensor& dt, const Tensor& a_log,
                              const Tensor& b, const Tensor& c, const Tensor& d,
                              const Tensor& dt_bias, const SsmScanOptions& options,
                              const RecurrentBatch& batch, const Tensor& ssm_state,
                              const Tensor& y) {
  COIL_RETURN_IF_ERROR(
      CheckSsmScan(*this, x, dt, a_log, b, c, d, dt_bias, options, batch, ssm_state, y));
  return TimedOp(
      [] { return BackendOpName(BackendOp::kSsmScan); },
      [&] { return DoSsmScan(x, dt, a_log, b, c, d, dt_bias, options, batch, ssm_state, y); });
}

absl::Status Backend::GatedSumSquares(const Tensor& y, const Tensor& z, int64_t ngroups,
                                      const Tensor& gated, const Tensor& sumsq) {
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "y", y, {DType::kF32}, 2));
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "z", z, {DType::kF32}, 2));
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "gated", gated, {DType::kF32}, 2));
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "sumsq", sumsq, {DType::kF32}, 2));
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"z", &z}, {"gated", &gated}}) {
    COIL_RETURN_IF_ERROR(CheckDim(name, *t, 0, y.dim(0), "y's rows"));
    COIL_RETURN_IF_ERROR(CheckDim(name, *t, 1, y.dim(1), "y's width"));
  }
  if (ngroups <= 0 || y.dim(1) % ngroups != 0) {
    return absl::InvalidArgumentError(absl::StrCat("ngroups is ", ngroups, "; it must divide y's width ",
                                                   y.dim(1)));
  }
  COIL_RETURN_IF_ERROR(CheckDim("sumsq", sumsq, 0, y.dim(0), "y's rows"));
  COIL_RETURN_IF_ERROR(CheckDim("sumsq", sumsq, 1, ngroups, "ngroups"));
  return TimedOp([] { return BackendOpName(BackendOp::kGatedSumSquares); },
                 [&] { return DoGatedSumSquares(y, z, ngroups, gated, sumsq); });
}

absl::Status Backend::GatedNormApply(const Tensor& gated, const Tensor& sumsq,
                                     const Tensor& weight, int64_t group_size, float eps,
                                     const Tensor& out) {
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "gated", gated, {DType::kF32}, 2));
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "sumsq", sumsq, {DType::kF32}, 2));
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "weight", weight, {DType::kF32}, 1));
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "out", out, {DType::kF32, DType::kBF16}, 2));
  COIL_RETURN_IF_ERROR(CheckDim("sumsq", sumsq, 0, gated.dim(0), "gated's rows"));
  if (gated.dim(1) % sumsq.dim(1) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("sumsq is ", sumsq.DebugString(),
                                                   "; its groups must divide gated's width ",
                                                   gated.dim(1)));
  }
  COIL_RETURN_IF_ERROR(CheckDim("weight", weight, 0, gated.dim(1), "gated's width"));
  COIL_RETURN_IF_ERROR(CheckDim("out", out, 0, gated.dim(0), "gated's rows"));
  COIL_RETURN_IF_ERROR(CheckDim("out", out, 1, gated.dim(1), "gated's width"));
  if (group_size < gated.dim(1) / sumsq.dim(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group_size is ", group_size, "; it must be at least the local group width ",
        gated.dim(1) / sumsq.dim(1)));
  }
  if (!(eps > 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("eps is ", eps, "; it must be > 0"));
  }
  return TimedOp([] { return BackendOpName(BackendOp::kGatedNormApply); },
                 [&] { return DoGatedNormApply(gated, sumsq, weight, group_size, eps, out); });
}

absl::Status Backend::GatedRmsNorm(const Tensor& y, const Tensor& z, const Tensor& weight,
                                   int64_t ngroups, float eps, const Tensor& out) {
  COIL_RETURN_IF_ERROR(CheckGatedRmsNorm(*this, y, z, weight, ngroups, eps, out));
  return TimedOp([] { return BackendOpName(BackendOp::kGatedRmsNorm); },
                 [&] { return DoGatedRmsNorm(y, z, weight, ngroups, eps, out); });
}

namespace {

// The x | b | c column views of MixerDecode's xbc for a state of `heads` x `headdim` x
// `d_state`, or INVALID_ARGUMENT when xbc's width is not E + 2 G N for a whole G >= 1.
absl::Status MixerColumns(const Tensor& xbc, const Tensor& ssm_state, Tensor* x, Tensor* b,
                          Tensor* c, int64_t* groups) {
  const int64_t e = ssm_state.dim(1) * ssm_state.dim(2), n = ssm_state.dim(3);
  const int64_t width = xbc.dim(1);
  if (width <= e || (width - e) % (2 * n) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "xbc is ", xbc.DebugString(), "; its width must be heads * headdim (", e,
        ") + 2 * ngroups * d_state (", n, ") for the state ", ssm_state.DebugString()));
  }
  *groups = (width - e) / (2 * n);
  *x = xbc.Columns(0, e);
  *b = xbc.Columns(e, *groups * n);
  *c = xbc.Columns(e + *groups * n, *groups * n);
  return absl::OkStatus();
}

// Whether the bytes two views span (first element to last) intersect: a conservative test
// (interleaved column views of one matrix count as overlapping). An empty view meets none.
bool SpansOverlap(const Tensor& a, const Tensor& b) {
  if (a.empty() || b.empty()) return false;
  auto span = [](const Tensor& t) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(t.raw());
    int64_t last = 0;  // the last element's offset
    for (int i = 0; i < t.rank(); ++i) {
      if (t.dim(i) == 0) return std::pair<uintptr_t, uintptr_t>{begin, begin};
      last += (t.dim(i) - 1) * t.stride(i);
    }
    return std::pair<uintptr_t, uintptr_t>{
        begin, begin + static_cast<uintptr_t>(last + 1) * DTypeSize(t.dtype())};
  };
  const auto [a0, a1] = span(a);
  const auto [b0, b1] = span(b);
  return a0 < b1 && b0 < a1;
}

// What MixerDecode and MixerDecodeSumSquares check alike: the conv and the scan over xbc's
// columns, decode runs only, and z's shape. Sets the number of B/C groups.
absl::Status CheckMixerDecode(const Backend& backend, const char* op, const Tensor& xbc_in,
                              const Tensor& dt, const Tensor& z, const MixerWeights& weights,
                              const SsmScanOptions& options, const RecurrentBatch& batch,
                              const Tensor& conv_state, const Tensor& ssm_state, const Tensor& xbc,
                              const Tensor& y, int64_t* groups) {
  COIL_RETURN_IF_ERROR(CheckCausalConv1d(backend, xbc_in, weights.conv_weight, weights.conv_bias,
                                         batch, conv_state, xbc));
  COIL_RETURN_IF_ERROR(CheckTensor(backend, "ssm_state", ssm_state,
                                   {DType::kF32, DType::kBF16}, 4));
  Tensor x, b, c;
  COIL_RETURN_IF_ERROR(MixerColumns(xbc, ssm_state, &x, &b, &c, groups));
  COIL_RETURN_IF_ERROR(CheckSsmScan(backend, x, dt, weights.a_log, b, c, weights.d, weights.dt_bias,
                                    options, batch, ssm_state, y));
  for (int s = 0; s < batch.num_seqs(); ++s) {
    if (batch.run_length(s) != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", s, " runs ", batch.run_length(s), " tokens; ", op,
          " takes decode steps only (every run one token): run CausalConv1d, SsmScan and the "
          "gated norm's ops for longer runs"));
    }
  }
  COIL_RETURN_IF_ERROR(CheckTensor(backend, "z", z, {DType::kF32}, 2));
  COIL_RETURN_IF_ERROR(CheckDim("z", z, 0, y.dim(0), "y's rows"));
  COIL_RETURN_IF_ERROR(CheckDim("z", z, 1, y.dim(1), "y's width"));
  return absl::OkStatus();
}

using NamedTensor = std::pair<const char*, const Tensor*>;

// A fused form reads its inputs, weights and states while other blocks write its outputs:
// every output apart from all of those, and the outputs apart from each other, but for out
// over y (MixerDecode's f32 model passes y as out: each thread reads y then writes out at
// the same element).
absl::Status CheckMixerOverlaps(const char* op, const Tensor& xbc_in, const Tensor& dt,
                                const Tensor& z, const MixerWeights& weights,
                                const Tensor& conv_state, const Tensor& ssm_state,
                                std::initializer_list<NamedTensor> outs) {
  const NamedTensor reads[] = {{"xbc_in", &xbc_in},
                               {"dt", &dt},
                               {"z", &z},
                               {"conv_state", &conv_state},
                               {"ssm_state", &ssm_state},
                               {"conv_weight", &weights.conv_weight},
                               {"conv_bias", &weights.conv_bias},
                               {"a_log", &weights.a_log},
                               {"d", &weights.d},
                               {"dt_bias", &weights.dt_bias},
                               {"norm_weight", &weights.norm_weight}};
  for (auto o = outs.begin(); o != outs.end(); ++o) {
    for (const auto& [in_name, i] : reads) {
      if (SpansOverlap(*o->second, *i)) {
        return absl::InvalidArgumentError(absl::StrCat(o->first, " overlaps ", in_name, "; ", op,
                                                       "'s outputs need memory of their own"));
      }
    }
    for (auto other = outs.begin(); other != o; ++other) {
      const bool out_on_y =
          std::string_view(o->first) == "out" && std::string_view(other->first) == "y";
      if (!out_on_y && SpansOverlap(*o->second, *other->second)) {
        return absl::InvalidArgumentError(absl::StrCat(o->first, " overlaps ", other->first, "; ",
                                                       op, "'s outputs need memory of their own"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

HeadRange GroupHeads(const SsmScanOptions& options, int64_t heads, int64_t groups, int64_t g) {
  const int64_t hpg = options.heads_per_group > 0 ? options.heads_per_group : heads / groups;
  const int64_t first = options.heads_per_group > 0 ? options.first_head_in_group : 0;
  return {std::max<int64_t>(0, g * hpg - first), std::min<int64_t>(heads, (g + 1) * hpg - first)};
}

absl::Status Backend::MixerDecode(const Tensor& xbc_in, const Tensor& dt, const Tensor& z,
                                  const MixerWeights& weights, const SsmScanOptions& options,
                                  float norm_eps, const RecurrentBatch& batch,
                                  const Tensor& conv_state, const Tensor& ssm_state,
                                  const Tensor& xbc, const Tensor& y, const Tensor& out) {
  if (options.heads_per_group != 0) {
    return absl::InvalidArgumentError(
        "MixerDecode takes heads that hold their B/C groups whole (heads_per_group 0); for "
        "heads that start inside a group run MixerDecodeSumSquares, all-reduce the sums and "
        "run GatedNormApply");
  }
  int64_t groups = 0;
  COIL_RETURN_IF_ERROR(CheckMixerDecode(*this, "MixerDecode", xbc_in, dt, z, weights, options,
                                        batch, conv_state, ssm_state, xbc, y, &groups));
  COIL_RETURN_IF_ERROR(CheckGatedRmsNorm(*this, y, z, weights.norm_weight, groups, norm_eps, out));
  COIL_RETURN_IF_ERROR(CheckMixerOverlaps("MixerDecode", xbc_in, dt, z, weights, conv_state,
                                          ssm_state, {{"xbc", &xbc}, {"y", &y}, {"out", &out}}));
  return TimedOp([] { return BackendOpName(BackendOp::kMixerDecode); },
                 [&] {
                   return DoMixerDecode(xbc_in, dt, z, weights, options, norm_eps, batch,
                                        conv_state, ssm_state, xbc, y, out);
                 });
}

absl::Status Backend::DoMixerDecode(const Tensor& xbc_in, const Tensor& dt, const Tensor& z,
                                    const MixerWeights& weights, const SsmScanOptions& options,
                                    float norm_eps, const RecurrentBatch& batch,
                                    const Tensor& conv_state, const Tensor& ssm_state,
                                    const Tensor& xbc, const Tensor& y, const Tensor& out) {
  int64_t groups = 0;
  COIL_RETURN_IF_ERROR(
      DoMixerConvScan(xbc_in, dt, weights, options, batch, conv_state, ssm_state, xbc, y, &groups));
  return DoGatedRmsNorm(y, z, weights.norm_weight, groups, norm_eps, out);
}

absl::Status Backend::DoMixerConvScan(const Tensor& xbc_in, const Tensor& dt,
                                      const MixerWeights& weights, const SsmScanOptions& options,
                                      const RecurrentBatch& batch, const Tensor& conv_state,
                                      const Tensor& ssm_state, const Tensor& xbc, const Tensor& y,
                                      int64_t* groups) {
  Tensor x, b, c;
  COIL_RETURN_IF_ERROR(MixerColumns(xbc, ssm_state, &x, &b, &c, groups));
  COIL_RETURN_IF_ERROR(
      DoCausalConv1d(xbc_in, weights.conv_weight, weights.conv_bias, batch, conv_state, xbc));
  return DoSsmScan(x, dt, weights.a_log, b, c, weights.d, weights.dt_bias, options, batch,
                   ssm_state, y);
}

absl::Status Backend::MixerDecodeSumSquares(const Tensor& xbc_in, const Tensor& dt, const Tensor& z,
                                            const MixerWeights& weights,
                                            const SsmScanOptions& options,
                                            const RecurrentBatch& batch, const Tensor& conv_state,
                                            const Tensor& ssm_state, const Tensor& xbc,
                                            const Tensor& y, const Tensor& sumsq) {
  int64_t groups = 0;
  COIL_RETURN_IF_ERROR(CheckMixerDecode(*this, "MixerDecodeSumSquares", xbc_in, dt, z, weights,
                                        options, batch, conv_state, ssm_state, xbc, y, &groups));
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "sumsq", sumsq, {DType::kF32}, 2));
  COIL_RETURN_IF_ERROR(CheckDim("sumsq", sumsq, 0, y.dim(0), "y's rows"));
  COIL_RETURN_IF_ERROR(CheckDim("sumsq", sumsq, 1, groups, "the B/C groups in xbc"));
  COIL_RETURN_IF_ERROR(CheckMixerOverlaps("MixerDecodeSumSquares", xbc_in, dt, z, weights,
                                          conv_state, ssm_state,
                                          {{"xbc", &xbc}, {"y", &y}, {"sumsq", &sumsq}}));
  return TimedOp([] { return BackendOpName(BackendOp::kMixerDecodeSumSquares); },
                 [&] {
                   return DoMixerDecodeSumSquares(xbc_in, dt, z, weights, options, batch,
                                                  conv_state, ssm_state, xbc, y, sumsq);
                 });
}

absl::Status Backend::DoMixerDecodeSumSquares(const Tensor& xbc_in, const Tensor& dt,
                                              const Tensor& z, const MixerWeights& weights,
                                              const SsmScanOptions& options,
                                              const RecurrentBatch& batch, const Tensor& conv_state,
                                              const Tensor& ssm_state, const Tensor& xbc,
                                              const Tensor& y, const Tensor& sumsq) {
  int64_t groups = 0;
  COIL_RETURN_IF_ERROR(
      DoMixerConvScan(xbc_in, dt, weights, options, batch, conv_state, ssm_state, xbc, y, &groups));
  const int64_t heads = ssm_state.dim(1), p = ssm_state.dim(2);
  for (int64_t g = 0; g < groups; ++g) {
    const HeadRange h = GroupHeads(options, heads, groups, g);
    const Tensor piece = y.Columns(h.begin * p, (h.end - h.begin) * p);
    COIL_RETURN_IF_ERROR(DoGatedSumSquares(piece, z.Columns(h.begin * p, (h.end - h.begin) * p), 1,
                                           piece, sumsq.Columns(g, 1)));
  }
  return absl::OkStatus();
}

absl::Status ValidatePagedKvBatch(const PagedKvBatch& batch, int64_t rows, int64_t pages) {
  const int n = batch.num_seqs();
  if (n == 0) return absl::InvalidArgumentError("the KV batch has no sequences; add at least one");
  if (batch.cu_seqlens.size() != static_cast<size_t>(n) + 1 ||
      batch.cu_blocks.size() != static_cast<size_t>(n) + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the KV batch has ", n, " start positions but ", batch.cu_seqlens.size(),
        " cu_seqlens and ", batch.cu_blocks.size(),
        " cu_blocks; give num_seqs + 1 of each (PagedKvBatch::Add keeps them in step)"));
  }
  if (batch.block_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the KV batch's block_size is ", batch.block_size,
                     "; set it to the cache's tokens per page"));
  }
  if (batch.cu_seqlens[0] != 0 || batch.cu_blocks[0] != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cu_seqlens[0] is ", batch.cu_seqlens[0],
                                                   " and cu_blocks[0] is ", batch.cu_blocks[0],
                                                   "; both must be 0"));
  }
  if (batch.cu_blocks[n] != static_cast<int64_t>(batch.block_table.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cu_blocks ends at ", batch.cu_blocks[n], " but the block table has ",
        batch.block_table.size(), " entries; the tables must cover block_table exactly"));
  }
  for (int s = 0; s < n; ++s) {
    if (batch.run_length(s) <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s, " has a run of ",
                                                     batch.run_length(s),
                                                     " rows; every run needs at least 1"));
    }
    const int64_t start = batch.start_positions[s];
    if (start < 0) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s, " starts at position ",
                                                     start, "; positions are >= 0"));
    }
    const int64_t context = start + batch.run_length(s);
    if (context > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", s, " reaches position ", context, "; positions must stay below 2^31 - 1"));
    }
    const int64_t have = int64_t{batch.cu_blocks[s + 1]} - batch.cu_blocks[s];
    const int64_t need = (context + batch.block_size - 1) / batch.block_size;
    if (have < need) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", s, " holds ", context, " positions (start ", start, " + run ",
          batch.run_length(s), ") but its block table has ", have, " pages of ", batch.block_size,
          "; give it at least ", need, " pages"));
    }
  }
  if (batch.cu_seqlens[n] != rows) {
    return absl::InvalidArgumentError(absl::StrCat("the runs cover ", batch.cu_seqlens[n],
                                                   " rows but the tensors have ", rows,
                                                   "; the run lengths must sum to the rows"));
  }
  if (batch.max_context != 0) {
    for (int s = 0; s < n; ++s) {
      if (batch.context_length(s) > batch.max_context) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sequence ", s, " holds ", batch.context_length(s), " positions but max_context is ",
            batch.max_context, "; set max_context to the longest context (or 0)"));
      }
    }
  }
  for (size_t i = 0; i < batch.block_table.size(); ++i) {
    const int32_t page = batch.block_table[i];
    if (page < 0 || page > pages) {
      return absl::InvalidArgumentError(absl::StrCat("block table entry ", i, " is page ", page,
                                                     "; pages are 0..", pages - 1, " (", pages,
                                                     " is the scratch page)"));
    }
  }
  // A page written this step must be nobody else's: not written by two sequences (two rows
  // racing into one slot), not read by another (its keys would depend on the order of the
  // writes). Marks the written pages in a bitmap, then counts the uses of marked pages over
  // every table entry a sequence reads: each must be its writer's own.
  thread_local std::vector<uint64_t> written;
  if (written.size() * 64 < static_cast<size_t>(pages) + 1) written.resize(pages / 64 + 1, 0);
  auto bit = [](int32_t page) { return uint64_t{1} << (page & 63); };
  std::vector<int32_t> marked;
  absl::Status conflict;
  for (int s = 0; s < n && conflict.ok(); ++s) {
    const int64_t first = batch.start_positions[s] / batch.block_size;
    const int64_t last = (batch.context_length(s) - 1) / batch.block_size;
    for (int64_t i = first; i <= last; ++i) {
      const int32_t page = batch.block_table[batch.cu_blocks[s] + i];
      if (page == pages) continue;  // the scratch page: padding entries share it
      if (written[page >> 6] & bit(page)) {
        conflict = absl::InvalidArgumentError(absl::StrCat(
            "page ", page, " is written twice in one step (sequence ", s,
            " among them); give each sequence's new positions pages of their own"));
        break;
      }
      written[page >> 6] |= bit(page);
      marked.push_back(page);
    }
  }
  if (conflict.ok()) {
    int64_t uses = 0;
    for (int s = 0; s < n; ++s) {
      const int64_t used = (batch.context_length(s) - 1) / batch.block_size + 1;
      for (int64_t i = 0; i < used; ++i) {
        const int32_t page = batch.block_table[batch.cu_blocks[s] + i];
        if (page == pages || !(written[page >> 6] & bit(page))) continue;
        ++uses;
        const int64_t first = batch.start_positions[s] / batch.block_size;
        if (i < first && conflict.ok()) {
          conflict = absl::InvalidArgumentError(absl::StrCat(
              "page ", page, " is read by sequence ", s,
              " and written by a sequence in the same step; a page being written must belong "
              "to its writer alone"));
        }
      }
    }
    if (conflict.ok() && uses != static_cast<int64_t>(marked.size())) {
      conflict = absl::InvalidArgumentError(
          "a page written this step is also in another sequence's block table; a page being "
          "written must belong to its writer alone");
    }
  }
  for (int32_t page : marked) written[page >> 6] &= ~bit(page);
  return conflict;
}

absl::Status Backend::CheckPagedKvBatch(const PagedKvBatch& batch, int64_t rows, int64_t pages) {
  const PagedKvBatch& c = checked_kv_batch_;
  if (rows == checked_kv_rows_ && pages == checked_kv_pages_ && batch.block_size == c.block_size &&
      batch.max_context == c.max_context &&
      batch.cu_seqlens == c.cu_seqlens && batch.start_positions == c.start_positions &&
      batch.cu_blocks == c.cu_blocks && batch.block_table == c.block_table) {
    return absl::OkStatus();
  }
  COIL_RETURN_IF_ERROR(ValidatePagedKvBatch(batch, rows, pages));
  checked_kv_batch_.block_size = batch.block_size;
  checked_kv_batch_.max_context = batch.max_context;
  checked_kv_batch_.cu_seqlens = batch.cu_seqlens;
  checked_kv_batch_.start_positions = batch.start_positions;
  checked_kv_batch_.cu_blocks = batch.cu_blocks;
  checked_kv_batch_.block_table = batch.block_table;
  checked_kv_rows_ = rows;
  checked_kv_pages_ = pages;
  return absl::OkStatus();
}

namespace {

// The K/V caches of the attention ops: one dtype (f32 or bf16), contiguous
// [pages + 1, block_size, kv_heads, head_dim] each, the same shape, block_size the batch's.
absl::Status CheckKvCaches(const Backend& backend, const Tensor& k_cache, const Tensor& v_cache,
                           const PagedKvBatch& batch) {
  COIL_RETURN_IF_ERROR(
      CheckTensor(backend, "k_cache", k_cache, {DType::kF32, DType::kBF16}, 4));
  COIL_RETURN_IF_ERROR(
      CheckTensor(backend, "v_cache", v_cache, {DType::kF32, DType::kBF16}, 4));
  COIL_RETURN_IF_ERROR(CheckContiguous("k_cache", k_cache));
  COIL_RETURN_IF_ERROR(CheckContiguous("v_cache", v_cache));
  if (v_cache.dtype() != k_cache.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("k_cache is ", k_cache.DebugString(),
                                                   " and v_cache is ", v_cache.DebugString(),
                                                   "; both caches need one dtype"));
  }
  for (int i = 0; i < 4; ++i) {
    COIL_RETURN_IF_ERROR(CheckDim("v_cache", v_cache, i, k_cache.dim(i), "k_cache's shape"));
  }
  if (k_cache.dim(0) < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "k_cache is ", k_cache.DebugString(), "; it needs pages plus the scratch page"));
  }
  if (k_cache.dim(1) != batch.block_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("the KV batch's block_size is ", batch.block_size, " but the caches are ",
                     k_cache.DebugString(), " (", k_cache.dim(1),
                     " tokens per page); build the batch with the cache's block size"));
  }
  if (SpansOverlap(k_cache, v_cache)) {
    return absl::InvalidArgumentError("k_cache overlaps v_cache; give each its own memory");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Backend::KvCacheWrite(const Tensor& k, const Tensor& v, const PagedKvBatch& batch,
                                   const Tensor& k_cache, const Tensor& v_cache) {
  COIL_RETURN_IF_ERROR(CheckKvCaches(*this, k_cache, v_cache, batch));
  const int64_t width = k_cache.dim(2) * k_cache.dim(3);
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "k", k, {DType::kF32}, 2));
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "v", v, {DType::kF32}, 2));
  COIL_RETURN_IF_ERROR(CheckDim("k", k, 1, width, "the cache's kv_heads * head_dim"));
  COIL_RETURN_IF_ERROR(CheckDim("v", v, 0, k.dim(0), "k's rows"));
  COIL_RETURN_IF_ERROR(CheckDim("v", v, 1, width, "the cache's kv_heads * head_dim"));
  for (const auto& [name, t] : {NamedTensor{"k", &k}, NamedTensor{"v", &v}}) {
    for (const auto& [cache_name, cache] :
         {NamedTensor{"k_cache", &k_cache}, NamedTensor{"v_cache", &v_cache}}) {
      if (SpansOverlap(*t, *cache)) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, " overlaps ", cache_name, "; pass rows from memory of their own"));
      }
    }
  }
  COIL_RETURN_IF_ERROR(CheckPagedKvBatch(batch, k.dim(0), k_cache.dim(0) - 1));
  return TimedOp([] { return BackendOpName(BackendOp::kKvCacheWrite); },
                 [&] { return DoKvCacheWrite(k, v, batch, k_cache, v_cache); });
}

absl::Status Backend::PagedAttention(const Tensor& q, const Tensor& k_cache,
                                     const Tensor& v_cache, const PagedKvBatch& batch,
                                     float scale, const Tensor& out) {
  COIL_RETURN_IF_ERROR(CheckKvCaches(*this, k_cache, v_cache, batch));
  const int64_t kv_heads = k_cache.dim(2), head_dim = k_cache.dim(3);
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "q", q, {DType::kF32}, 2));
  if (q.dim(1) % head_dim != 0 || (q.dim(1) / head_dim) % kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "q is ", q.DebugString(), "; its width must be heads * head_dim (", head_dim,
        ") with heads a multiple of the cache's ", kv_heads, " KV heads"));
  }
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "out", out, {DType::kF32, DType::kBF16}, 2));
  COIL_RETURN_IF_ERROR(CheckDim("out", out, 0, q.dim(0), "q's rows"));
  COIL_RETURN_IF_ERROR(CheckDim("out", out, 1, q.dim(1), "q's width"));
  if (!std::isfinite(scale) || !(scale > 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("scale is ", scale, "; it must be finite and > 0 (1 / sqrt(head_dim))"));
  }
  for (const auto& [name, t] : {NamedTensor{"q", &q}, NamedTensor{"k_cache", &k_cache},
                                NamedTensor{"v_cache", &v_cache}}) {
    if (SpansOverlap(out, *t)) {
      return absl::InvalidArgumentError(
          absl::StrCat("out overlaps ", name, "; PagedAttention's out needs memory of its own"));
    }
  }
  COIL_RETURN_IF_ERROR(CheckPagedKvBatch(batch, q.dim(0), k_cache.dim(0) - 1));
  return TimedOp([] { return BackendOpName(BackendOp::kPagedAttention); },
                 [&] { return DoPagedAttention(q, k_cache, v_cache, batch, scale, out); });
}

absl::Status Backend::Relu2(const Tensor& x, const Tensor& out) {
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "x", x, {DType::kF32}, 2));
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "out", out, {DType::kF32, DType::kBF16}, 2));
  COIL_RETURN_IF_ERROR(CheckDim("out", out, 0, x.dim(0), "x's rows"));
  COIL_RETURN_IF_ERROR(CheckDim("out", out, 1, x.dim(1), "x's width"));
  const bool same = out.raw() == x.raw() && out.dtype() == x.dtype() &&
                    out.stride(0) == x.stride(0);
  if (!same && SpansOverlap(out, x)) {
    return absl::InvalidArgumentError(
        "out overlaps x without being x; pass x itself (f32) or memory of its own");
  }
  return TimedOp([] { return BackendOpName(BackendOp::kRelu2); }, [&] { return DoRelu2(x, out); });
}

absl::Status Backend::Argmax(const Tensor& logits, const Tensor& ids, const Tensor& values) {
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "logits", logits, {DType::kF32}, 2));
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "ids", ids, {DType::kI32}, 1));
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "values", values, {DType::kF32}, 1));
  COIL_RETURN_IF_ERROR(CheckDim("ids", ids, 0, logits.dim(0), "logits' rows"));
  COIL_RETURN_IF_ERROR(CheckDim("values", values, 0, logits.dim(0), "logits' rows"));
  return TimedOp([] { return BackendOpName(BackendOp::kArgmax); },
                 [&] { return DoArgmax(logits, ids, values); });
}

absl::Status Backend::GumbelArgmax(const Tensor& logits, const Tensor& temperatures,
                                   const Tensor& seeds, const Tensor& steps,
                                   int64_t vocab_offset, const Tensor& ids,
                                   const Tensor& scores) {
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "logits", logits, {DType::kF32}, 2));
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "temperatures", temperatures, {DType::kF32}, 1));
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "seeds", seeds, {DType::kI32}, 2));
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "steps", steps, {DType::kI32}, 1));
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "ids", ids, {DType::kI32}, 1));
  COIL_RETURN_IF_ERROR(CheckTensor(*this, "scores", scores, {DType::kI32}, 2));
  const int64_t rows = logits.dim(0);
  COIL_RETURN_IF_ERROR(CheckDim("temperatures", temperatures, 0, rows, "logits' rows"));
  COIL_RETURN_IF_ERROR(CheckDim("seeds", seeds, 0, rows, "logits' rows"));
  COIL_RETURN_IF_ERROR(CheckDim("seeds", seeds, 1, 2, "a u64 seed's two words"));
  COIL_RETURN_IF_ERROR(CheckDim("steps", steps, 0, rows, "logits' rows"));
  COIL_RETURN_IF_ERROR(CheckDim("ids", ids, 0, rows, "logits' rows"));
  COIL_RETURN_IF_ERROR(CheckDim("scores", scores, 0, rows, "logits' rows"));
  COIL_RETURN_IF_ERROR(CheckDim("scores", scores, 1, 2, "an f64 score's two words"));
  // Global ids are i32 tokens and u32 Philox counters: both hold ids below 2^31.
  constexpr int64_t kMaxIds = int64_t{0x7fffffff};
  if (vocab_offset < 0 || vocab_offset + logits.dim(1) > kMaxIds) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab_offset is ", vocab_offset, " with ", logits.dim(1),
        " columns; the ids must lie in [0, 2^31 - 1), so pass the shard's first vocab id"));
  }
  return TimedOp([] { return BackendOpName(BackendOp::kGumbelArgmax); },
                 [&] {
                   return DoGumbelArgmax(logits, temperatures, seeds, steps, vocab_offset, ids,
                                         scores);
                 });
}

}  // namespace coil
