// CUDA graphs on the CudaBackend's stream: capture (relaxed mode), instantiate, replay.
// Relaxed, because NCCL may allocate or connect lazily the first time a collective of a
// new size is enqueued, which a stricter mode would turn into a failed capture; what
// breaks a graph (synchronizing the capturing stream, a copy from pageable memory) still
// invalidates the capture in this mode, and the op scratch only grows with a synchronize. A graph
// remembers the op-scratch generation it was captured at, so a replay after the scratch was
// reallocated is refused instead of reading freed memory.
#include <cstdint>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"

namespace coil::cuda {
namespace {

class CudaGraph final : public Backend::Graph {
 public:
  CudaGraph(cudaGraphExec_t exec, uint64_t generation, cudaStream_t stream, int64_t nodes)
      : exec_(exec), generation_(generation), stream_(stream), nodes_(nodes) {}
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  ~CudaGraph() override {
    // A replay may still be running: the executable graph is destroyed once it is done.
    cudaStreamSynchronize(stream_);
    cudaGraphExecDestroy(exec_);
  }

  cudaGraphExec_t exec() const { return exec_; }
  uint64_t generation() const { return generation_; }
  cudaStream_t stream() const { return stream_; }
  int64_t nodes() const override { return nodes_; }

 private:
  cudaGraphExec_t exec_;
  uint64_t generation_;
  cudaStream_t stream_;
  int64_t nodes_;
};

}  // namespace

uint64_t CudaBackend::MemoryGeneration() const {
  return workspace_.generation() + batch_staging_.generation() + mixer_tickets_.generation() +
         kv_batch_staging_.generation() + attn_partials_.generation();
}

bool CudaBackend::IsGraphCurrent(const Graph& graph) const {
  const auto* cuda_graph = dynamic_cast<const CudaGraph*>(&graph);
  return cuda_graph != nullptr && cuda_graph->stream() == ctx_.stream &&
         cuda_graph->generation() == MemoryGeneration();
}

absl::Status CudaBackend::DoBeginCapture() {
  COIL_RETURN_IF_ERROR(MakeCurrent());
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  COIL_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(ctx_.stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    return absl::FailedPreconditionError(
        "a graph capture is already in progress on this stream; end it before starting another");
  }
  COIL_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(ctx_.stream, cudaStreamCaptureModeRelaxed));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Backend::Graph>> CudaBackend::DoEndCapture() {
  COIL_RETURN_IF_ERROR(MakeCurrent());
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(ctx_.stream, &graph);
  if (ended != cudaSuccess) {
    cudaGetLastError();  // the error is not sticky: clear it so later calls start clean
    if (graph != nullptr) cudaGraphDestroy(graph);
    return absl::InternalError(absl::StrCat(
        "the graph capture failed (", cudaGetErrorString(ended),
        "): an op synchronized or copied to or from the host while capturing; run with "
        "--cuda-graphs=false and report the op"));
  }
  size_t nodes = 0;
  if (cudaGraphGetNodes(graph, nullptr, &nodes) != cudaSuccess) {
    cudaGetLastError();
    nodes = 0;  // only reported, never relied on
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (instantiated != cudaSuccess) {
    cudaGetLastError();
    return absl::InternalError(absl::StrCat("cudaGraphInstantiate failed (",
                                            cudaGetErrorString(instantiated),
                                            "); run with --cuda-graphs=false"));
  }
  return std::unique_ptr<Graph>(std::make_unique<CudaGraph>(exec, MemoryGeneration(), ctx_.stream,
                                                             static_cast<int64_t>(nodes)));
}

absl::Status CudaBackend::DoReplay(const Graph& graph) {
  COIL_RETURN_IF_ERROR(MakeCurrent());
  const auto* cuda_graph = dynamic_cast<const CudaGraph*>(&graph);
  if (cuda_graph == nullptr || cuda_graph->stream() != ctx_.stream) {
    return absl::InvalidArgumentError("the graph was not captured by this backend");
  }
  if (cuda_graph->generation() != MemoryGeneration()) {
    return absl::FailedPreconditionError(
        "the graph refers to op scratch memory reallocated since its capture; capture it again");
  }
  // A graph with a chunked scan in it rewrites the chunk list for its own batch.
  ssd_plans_.ForgetDeviceList();
  COIL_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(cuda_graph->exec(), ctx_.stream));
  return absl::OkStatus();
}

}  // namespace coil::cuda
