#include "workers/rank_runtime.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/cpus.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "kernels/backend_factory.h"
#include "workers/comm/local_rank.h"
#include "workers/comm/step_status.h"
#include "workers/memory_fit.h"
#include "workers/model/shard_layout.h"
#include "workers/model/weights.h"
#if COIL_WITH_MPI
#include "workers/comm/broadcast_channel.h"
#include "workers/comm/mpi_session.h"
#include "workers/comm/rank_monitor.h"
#include "workers/worker_loop.h"
#else
#include "workers/comm/single_rank_communicator.h"
#endif
#if COIL_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/runtime_info.h"
#include "workers/comm/nccl_communicator.h"
#endif

namespace coil {

struct RankRuntime::Mpi {
#if COIL_WITH_MPI
  // Declared first, destroyed last: MPI_Finalize after every communicator is freed.
  std::unique_ptr<comm::MpiSession> session;
  std::unique_ptr<comm::BroadcastChannel> channel;  // several ranks only
  std::unique_ptr<StepDriver> driver;               // rank 0, once the model is loaded
  std::unique_ptr<comm::RankMonitor> monitor;       // once started
#endif
};

RankRuntime::RankRuntime() : mpi_(std::make_unique<Mpi>()) {}

RankRuntime::~RankRuntime() {
#if COIL_WITH_MPI
  // The monitor leaves (so the other ranks do not count this rank's end as a failure)
  // before the communicators go and MPI is finalized.
  mpi_->monitor.reset();
#endif
}

absl::StatusOr<std::unique_ptr<RankRuntime>> RankRuntime::Connect(int* argc, char*** argv) {
  std::unique_ptr<RankRuntime> runtime(new RankRuntime());
  const char* world_size = std::getenv("OMPI_COMM_WORLD_SIZE");  // set by mpirun
#if COIL_WITH_MPI
  comm::CommunicatorOptions options;
  if (world_size != nullptr) {
    COIL_ASSIGN_OR_RETURN(runtime->mpi_->session, comm::MpiSession::Init(argc, argv));
    options.kind = comm::CommunicatorKind::kMpi;
  }
  COIL_ASSIGN_OR_RETURN(runtime->comm_, comm::CreateCommunicator(options));
  runtime->comm_->set_activity(&runtime->activity_);
  if (runtime->size() > 1) {
    SetLogPrefix(absl::StrCat("rank ", runtime->rank()));
    absl::StatusOr<std::unique_ptr<comm::BroadcastChannel>> channel =
        comm::BroadcastChannel::Create(0, comm::BackoffOptions{});
    COIL_RETURN_IF_ERROR(runtime->Agree(channel.status()));
    runtime->mpi_->channel = std::move(channel).value();
  }
#else
  if (world_size != nullptr && absl::string_view(world_size) != "1") {
    return absl::FailedPreconditionError(absl::StrCat(
        "started as one of ", world_size, " ranks, but this build has no MPI (configured with "
        "COIL_SERVING=OFF); run one process, or rebuild with -DCOIL_SERVING=ON"));
  }
  runtime->comm_ = std::make_unique<comm::SingleRankCommunicator>();
#endif
  return runtime;
}

absl::Status RankRuntime::StartMonitor(std::chrono::milliseconds rank_timeout,
                                       std::chrono::milliseconds step_timeout,
                                       std::function<void(const absl::Status&)> on_failure) {
#if COIL_WITH_MPI
  if (size() == 1 || mpi_->session == nullptr) return absl::OkStatus();
  comm::RankMonitorOptions options;
  options.rank_timeout = rank_timeout;
  options.step_timeout = step_timeout;
  absl::StatusOr<std::unique_ptr<comm::RankMonitor>> monitor =
      comm::RankMonitor::Start(options, &activity_, std::move(on_failure));
  COIL_RETURN_IF_ERROR(Agree(monitor.status()));
  mpi_->monitor = std::move(monitor).value();
#endif
  return absl::OkStatus();
}

bool RankRuntime::monitored() const {
#if COIL_WITH_MPI
  return mpi_->monitor != nullptr;
#else
  return false;
#endif
}

void RankRuntime::EndJob(const absl::Status& why, std::chrono::milliseconds timeout) {
#if COIL_WITH_MPI
  if (mpi_->monitor != nullptr) mpi_->monitor->EndJob(why, timeout);
#endif
}

void RankRuntime::ReportFailure(const absl::Status& status, std::chrono::milliseconds timeout) {
#if COIL_WITH_MPI
  if (mpi_->monitor != nullptr) mpi_->monitor->ReportFailure(status, timeout);
#endif
}

void RankRuntime::AbortCollectives() {
  if (model_comm_ != nullptr) model_comm_->Abort();
}

absl::Status RankRuntime::Agree(const absl::Status& local) {
  absl::StatusOr<std::vector<comm::RankFailure>> failures = comm::AllReduceStepStatus(*comm_, local);
  return failures.ok() ? comm::CombineRankFailures(*failures) : failures.status();
}

absl::Status RankRuntime::OpenDevice(BackendKind kind, BackendOptions options,
                                     const std::function<absl::Status(Backend&)>& check) {
  COIL_RETURN_IF_ERROR(Agree([&]() -> absl::Status {
    options.threads = ChooseThreads(options.threads, size());
    if (kind == BackendKind::kCuda) {
      // One GPU per rank: the rank's index among the ranks of its node.
      COIL_ASSIGN_OR_RETURN(options.device_index, comm::LocalRankFromEnvironment());
    }
    COIL_ASSIGN_OR_RETURN(backend_, CreateBackend(kind, options));
    if (check) COIL_RETURN_IF_ERROR(check(*backend_));
    return absl::OkStatus();
  }()));
  if (kind != BackendKind::kCuda || size() == 1) return absl::OkStatus();
  // Several GPU ranks: the model's collectives run on the backend's stream through NCCL,
  // ordered with the ops and capturable in a graph. Every rank reaches this (the step above
  // was agreed), so NCCL's collective set-up cannot leave one waiting.
#if COIL_WITH_CUDA
  auto* cuda_backend = dynamic_cast<cuda::CudaBackend*>(backend_.get());
  absl::StatusOr<std::unique_ptr<comm::NcclCommunicator>> nccl =
      absl::InternalError("--device cuda made a backend that is not the CUDA one");
  if (cuda_backend != nullptr) {
    nccl = comm::NcclCommunicator::Create(*comm_, cuda_backend->device_index(),
                                          cuda_backend->stream());
  }
  COIL_RETURN_IF_ERROR(Agree(nccl.status()));
  model_comm_ = std::move(nccl).value();
  model_comm_->set_activity(&activity_);
  return absl::OkStatus();
#else
  return Agree(absl::UnimplementedError("several GPU ranks need a build with CUDA and NCCL"));
#endif
}

namespace {

// What this rank will allocate for `files` (headers only: the config and the stored type
// of the matrices): its weights in the type the model will hold them, and the state pool
// and KV cache ModelRunner::Create makes, each with its scratch entry.
absl::StatusOr<MemoryNeed> RankMemoryNeed(const model::ModelFiles& files,
                                          const model::LoadOptions& options, int64_t state_rows,
                                          const RunnerOptions& run, int tp_size, int rank) {
  const model::ModelConfig& config = files.config;
  COIL_ASSIGN_OR_RETURN(const model::ShardLayout layout,
                        model::MakeShardLayout(config, tp_size, rank));
  COIL_ASSIGN_OR_RETURN(const DType dtype,
                        model::ChooseWeightDType(*files.checkpoint, config, options.weight_type));
  MemoryNeed need;
  need.rank = rank;
  need.ranks = tp_size;
  need.weight_dtype = DTypeName(dtype);
  need.weight_bytes = model::ShardWeightBytes(config, layout, dtype);
  const StatePoolShape state =
      model::ShardStateShape(config, layout, std::max<int64_t>(state_rows, 0), run.state_dtype);
  need.pool_bytes = (std::max<int64_t>(state_rows, 0) + 1) * state.bytes_per_sequence();
  if (config.has_attention() && run.kv_pages > 0 && run.block_size > 0) {
    const KvCacheShape kv =
        model::ShardKvShape(config, layout, run.kv_pages, run.block_size, dtype);
    need.pool_bytes += (run.kv_pages + 1) * kv.bytes_per_page();
  }
  return need;
}

// The memory this rank's weights and pools come from: its GPU's free bytes on CUDA, else
// the host's (the smallest of MemAvailable, the cgroup's headroom and the cap).
absl::StatusOr<MemoryAvailable> RankMemoryAvailable(Backend& backend, int64_t max_host_bytes) {
#if COIL_WITH_CUDA
  if (auto* cuda_backend = dynamic_cast<cuda::CudaBackend*>(&backend)) {
    const int device = cuda_backend->device_index();
    COIL_ASSIGN_OR_RETURN(const cuda::DeviceMemory memory, cuda::QueryDeviceMemory(device));
    MemoryAvailable available;
    available.bytes = static_cast<int64_t>(memory.free_bytes);
    available.where = absl::StrCat("GPU ", device);
    available.device = true;
    available.limited_by = "cudaMemGetInfo";
    available.source = absl::StrCat("cudaMemGetInfo: free of ",
                                    DescribeBytes(static_cast<int64_t>(memory.total_bytes)));
    return available;
  }
#endif
  return HostMemoryAvailable(max_host_bytes);
}

}  // namespace

absl::Status RankRuntime::LoadModel(const std::string& model_dir, const model::LoadOptions& options,
                                    int64_t state_rows, const RunnerOptions& run,
                                    const MemoryLimits& limits) {
  COIL_RETURN_IF_ERROR(Agree([&]() -> absl::Status {
    if (backend_ == nullptr) return absl::FailedPreconditionError("LoadModel before OpenDevice");
    COIL_ASSIGN_OR_RETURN(files_, model::OpenModelFiles(model_dir));
    // Before any weight is read: a checkpoint larger than the memory is refused here, with
    // the sizes, rather than killed part-way through loading.
    COIL_ASSIGN_OR_RETURN(MemoryNeed need,
                          RankMemoryNeed(files_, options, state_rows, run, size(), rank()));
    need.pool_flags = limits.pool_flags;
    COIL_ASSIGN_OR_RETURN(const MemoryAvailable available,
                          RankMemoryAvailable(*backend_, limits.max_host_bytes));
    // Ranks on one host share its memory; each GPU rank has its own.
    if (!available.device) {
      need.ranks_sharing = std::min(LocalRanksFromEnvironment(), size());
    }
    const absl::Status fits = CheckMemoryFits(need, available);
    if (!fits.ok()) {
      // The agreed status is cut at 240 bytes; this rank's log keeps every reading.
      COIL_LOG(ERROR) << "the model does not fit: " << MemoryReport(need, available);
      return fits;
    }
    if (rank() == 0) COIL_LOG(INFO) << "memory: " << MemoryReport(need, available);
    COIL_ASSIGN_OR_RETURN(model_, model::Model::Load(files_, *backend_, model_comm(), options));
    COIL_ASSIGN_OR_RETURN(runner_,
                          ModelRunner::Create(*model_, *backend_, *comm_, state_rows, run));
    return absl::OkStatus();
  }()));
#if COIL_WITH_MPI
  if (rank() == 0) {
    mpi_->driver = std::make_unique<StepDriver>(*runner_, *comm_, mpi_->channel.get(), &activity_);
  }
#endif
  return absl::OkStatus();
}

StepResult RankRuntime::Run(const StepPlan& plan) {
#if COIL_WITH_MPI
  if (mpi_->driver != nullptr) return mpi_->driver->Run(plan);
#endif
  return runner_->Execute(plan);
}

absl::StatusOr<std::vector<float>> RankRuntime::RunAllLogits(const StepPlan& plan) {
#if COIL_WITH_MPI
  if (mpi_->driver != nullptr) return mpi_->driver->RunAllLogits(plan);
#endif
  return runner_->ExecuteAllLogits(plan);
}

absl::Status RankRuntime::Shutdown() {
#if COIL_WITH_MPI
  if (mpi_->driver != nullptr) return mpi_->driver->Shutdown();
#endif
  return absl::OkStatus();
}

absl::Status RankRuntime::ServePlans() {
#if COIL_WITH_MPI
  if (rank() != 0 && mpi_->channel != nullptr && runner_ != nullptr) {
    return RunWorkerLoop(*runner_, *comm_, *mpi_->channel, &activity_);
  }
#endif
  return absl::FailedPreconditionError(
      "ServePlans is for ranks other than 0 of a started multi-rank job");
}

}  // namespace coil
