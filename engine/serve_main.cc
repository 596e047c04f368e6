// coil-serve: serves a Mamba2 or hybrid (Nemotron-H) model over gRPC (coil.v1.Generation,
// grpc.health.v1.Health, server reflection) with continuous batching, tensor-parallel across
// the ranks mpirun starts (docs/ARCHITECTURE.md §1).
//
//   mpirun -np 2 --bind-to none --mca odls_base_sigkill_timeout 1 coil-serve --model DIR
//
// Start-up on every rank: MPI session, communicator, configuration checks (before anything
// is allocated or loaded; every rank checks, rank 0 reports), weights, state pool and KV
// cache (their sizes split from --memory-budget: engine/memory_budget.h); a failure on any
// rank is every rank's. Then rank 0 runs the engine loop and the gRPC server
// and ranks > 0 execute the plans rank 0 broadcasts. SIGTERM or SIGINT drains rank 0 (health
// NOT_SERVING, new requests UNAVAILABLE, in-flight requests finish within --drain-timeout)
// and then sends the shutdown plan; ranks > 0 ignore both signals and wait for that plan.
// The signal goes to the ranks, not to mpirun, whose own kill sequence (with the short
// odls_base_sigkill_timeout that ends the job soon after a lost rank) would cut the drain.
//
// A rank that dies is noticed by the rank monitor within a fraction of a second (its
// connection to rank 0's monitor closes); one that stops or hangs within --rank-timeout or
// --step-timeout. Rank 0 turns health NOT_SERVING, ends every request UNAVAILABLE naming
// the rank, refuses new ones, tells the other ranks to end, and every rank exits with
// status 3 (kRankFailureExit), whatever Open MPI's own timeouts.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/server_posix.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/command_line.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "engine/chat/chat_template.h"
#include "engine/engine_loop.h"
#include "engine/generation_service.h"
#include "engine/http/openai_server.h"
#include "engine/memory_budget.h"
#include "engine/metrics/coil_metrics.h"
#include "engine/metrics/exporter.h"
#include "engine/net/connection_acceptor.h"
#include "engine/net/listener.h"
#include "engine/request_bytes.h"
#include "engine/request_validation.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/tokenizer_files.h"
#include "kernels/backend.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_config.h"
#if COIL_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/runtime_info.h"
#endif
#include "workers/backend_flags.h"
#include "workers/checkpoint/checkpoint.h"
#include "workers/model/model.h"
#include "workers/model/model_config.h"
#include "workers/model/shard_layout.h"
#include "workers/model_flags.h"
#include "workers/rank_runtime.h"

// --device, --threads, --cuda-pdl and --cuda-matmul-rows (workers/backend_flags.h) and
// --weights, --cuda-graphs and --fused-mixer (workers/model_flags.h) are shared with the other
// programs that run the model.
ABSL_FLAG(std::string, model, "", "model directory (config.json and weights)");
ABSL_FLAG(std::string, host, "0.0.0.0", "address to listen on");
ABSL_FLAG(int32_t, port, 50051, "port to listen on (0: pick a free one; see --port-file)");
ABSL_FLAG(std::string, port_file, "",
          "once serving, write the gRPC port, the metrics port and the HTTP port (-1: off) to this "
          "file, one a line");
ABSL_FLAG(int32_t, http_port, -1,
          "port of the OpenAI-compatible HTTP API on --host (0: any free port; -1: off)");
ABSL_FLAG(std::string, served_model_name, "",
          "the model name the HTTP API answers to (default: the model directory's name)");
ABSL_FLAG(std::string, chat_template, "",
          "a Jinja chat template file for /v1/chat/completions (default: the model directory's "
          "tokenizer_config.json chat_template)");
ABSL_FLAG(int32_t, http_threads, 64,
          "HTTP connections served at once (each streaming request holds one); as many more may "
          "wait, and connections beyond are answered 503");
ABSL_FLAG(int64_t, http_max_body, 8 << 20, "largest HTTP request body in bytes (larger: 413)");
ABSL_FLAG(std::string, tokenizer, "", "tokenizer.json (default: the model's, else GPT-NeoX-20B)");
ABSL_FLAG(int32_t, state_rows, 0,
          "recurrent-state rows, i.e. requests running at once (0: derive from --memory-budget)");
ABSL_FLAG(int32_t, kv_pages, 0,
          "KV-cache pages of --block-size tokens, models with attention layers only (0: derive "
          "from --memory-budget)");
ABSL_FLAG(int32_t, block_size, 16, "tokens per KV-cache page");
ABSL_FLAG(std::string, memory_budget, "2GiB",
          "memory per rank for request state, split between recurrent-state rows and (models "
          "with attention layers) KV pages, e.g. 2GiB, 512MiB: a row per max-model-len "
          "request's pages, rows capped at --max-num-seqs, the rest pages; --state-rows or "
          "--kv-pages fixes one and the rest goes to the other");
ABSL_FLAG(int32_t, max_num_seqs, 256, "most requests running at once");
ABSL_FLAG(int32_t, max_batched_tokens, 2048, "most tokens in one step (decodes and prefill)");
ABSL_FLAG(int32_t, max_model_len, 4096, "most tokens of one request, prompt plus output");
ABSL_FLAG(int32_t, max_queue, 1024, "most waiting requests; more are refused RESOURCE_EXHAUSTED");
ABSL_FLAG(bool, prefix_cache, true,
          "keep the state of prompts at chunk multiples in state rows no request holds and "
          "resume later prompts that start with the same tokens from it (a hybrid's snapshots "
          "also share the prompt's KV pages, so --block-size must divide the SSD chunk size; "
          "--prefix-cache=false turns it off)");
ABSL_FLAG(int32_t, prefix_cache_rows, 0,
          "most state rows the prefix cache may hold (0: any row no request holds); with "
          "--state-rows 0 the rows derived from --memory-budget may exceed --max-num-seqs by "
          "this many (0: by as many as the budget holds)");
ABSL_FLAG(int32_t, drain_timeout, 30,
          "seconds in-flight requests may run after SIGTERM/SIGINT before they are cancelled");
ABSL_FLAG(double, rank_timeout, 10,
          "seconds a rank may stay silent (stopped, its host cut off) before the job counts "
          "it as lost: requests end UNAVAILABLE naming it and every rank exits with status 3 "
          "(0: never). A rank that dies is noticed sooner, by its closed monitor connection. "
          "Heartbeats come from a thread of their own, so a long step does not count as "
          "silence");
ABSL_FLAG(double, step_timeout, 600,
          "seconds one step may compute on a rank outside collectives before the rank counts "
          "as hung (0: never); far above any real step");
ABSL_FLAG(int32_t, metrics_port, 9400,
          "port of the Prometheus /metrics endpoint on --metrics-host (0: any free port; -1: off)");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1",
          "address the /metrics endpoint listens on (loopback by default; 0.0.0.0 lets "
          "Prometheus reach it from another host or pod)");
ABSL_FLAG(int32_t, max_connections, 0,
          "most gRPC connections open at once; more are refused at once (0: the descriptor "
          "limit less 256, at most 4096)");
ABSL_FLAG(int32_t, max_streams_per_connection, 256,
          "most concurrent calls on one gRPC connection (HTTP/2 MAX_CONCURRENT_STREAMS)");
ABSL_FLAG(double, idle_timeout, 300,
          "seconds a gRPC connection may stay without a call before the server closes it "
          "(clients reconnect on their next call; 0: never)");

namespace coil {
namespace {

// The exit status of every rank of a job that lost a rank.
constexpr int kRankFailureExit = 3;

std::chrono::milliseconds FlagSeconds(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, seconds) * 1000.0));
}

// What a rank does with the first failure its monitor (or rank 0's engine) reports.
// Ranks > 0 end at once: rank 0 has told, or will tell, the clients. Rank 0 before it
// serves ends too, after telling the others; once serving, it hands the failure to the
// engine (every request ends UNAVAILABLE naming the rank) and then ends on a thread of its
// own, since the step thread may be stuck for good in a collective with the lost rank and
// the main thread may be waiting for it.
class FailureHandler {
 public:
  explicit FailureHandler(RankRuntime& runtime) : runtime_(runtime) {}

  // Once serving (rank 0); null again when serving has ended normally.
  void Serving(EngineLoop* engine, grpc::Server* server) {
    std::lock_guard<std::mutex> lock(mu_);
    engine_ = engine;
    server_ = server;
  }

  // The monitor's thread, or the engine's for a failed collective.
  void Fail(const absl::Status& status) {
    std::unique_lock<std::mutex> lock(mu_);
    if (failed_) return;
    failed_ = true;
    if (engine_ != nullptr) {
      EngineLoop* engine = engine_;
      lock.unlock();
      engine->Fail(status);  // calls EndServing, then ends every stream
      return;
    }
    lock.unlock();
    Exit(status);
  }

  // Whether a failure has been handled (the process is about to exit with status 3).
  bool failed() {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_;
  }

  // The engine's failure callback: new requests are refused; the streams end next.
  void EndServing(const absl::Status& status) {
    grpc::Server* server = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      failed_ = true;
      server = server_;
    }
    if (server != nullptr) server->GetHealthCheckService()->SetServingStatus(false);
    // The final statuses already queued get a second to leave, while new calls are refused
    // UNAVAILABLE by the failed engine (gRPC's own shutdown would cancel them); telling the
    // other ranks runs meanwhile (a send to a dead rank never completes: it waits it out).
    const auto exit_at = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    std::thread([this, status, exit_at] {
      runtime_.EndJob(status, std::chrono::milliseconds(800));
      runtime_.AbortCollectives();
      std::this_thread::sleep_until(exit_at);
      std::fprintf(stderr, "coil-serve: %s; exiting with status %d\n",
                   std::string(status.message()).c_str(), kRankFailureExit);
      std::_Exit(kRankFailureExit);
    }).detach();
  }

 private:
  void Exit(const absl::Status& status) {
    if (runtime_.rank() == 0) runtime_.EndJob(status, std::chrono::seconds(1));
    runtime_.AbortCollectives();
    std::fprintf(stderr, "coil-serve rank %d: %s; exiting with status %d\n", runtime_.rank(),
                 std::string(status.message()).c_str(), kRankFailureExit);
    std::_Exit(kRankFailureExit);
  }

  RankRuntime& runtime_;
  std::mutex mu_;
  bool failed_ = false;
  EngineLoop* engine_ = nullptr;
  grpc::Server* server_ = nullptr;
};

int64_t PhysicalMemoryBytes() {
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

std::string MiB(int64_t bytes) {
  if (bytes < 1024 * 1024) return absl::StrCat(bytes / 1024, " KiB");
  return absl::StrCat(bytes / (1024 * 1024), " MiB");
}

// What every rank works out from the flags and config.json before it allocates anything.
struct ServePlan {
  model::ModelConfig model;
  SchedulerConfig scheduler;
  int64_t state_bytes_per_sequence = 0;  // the largest over the ranks
  int64_t kv_bytes_per_page = 0;         // the largest over the ranks; 0 without attention
  Budgets budgets;
  BackendFlags device;
  model::LoadOptions load;
  int64_t max_host_memory = 0;  // --max-host-memory; 0: none
};

absl::StatusOr<ServePlan> CheckConfiguration(const std::string& model_dir, int tp_size) {
  if (model_dir.empty()) {
    return absl::InvalidArgumentError("--model is required: the directory holding config.json and the weights");
  }
  ServePlan plan;
  COIL_ASSIGN_OR_RETURN(plan.device, BackendFlagsFromCommandLine());
  COIL_ASSIGN_OR_RETURN(plan.load, LoadOptionsFromCommandLine());
  COIL_ASSIGN_OR_RETURN(plan.max_host_memory, MaxHostMemoryFromCommandLine());
  COIL_ASSIGN_OR_RETURN(plan.model, model::LoadModelConfig(model_dir));
  if (plan.model.nheads() % tp_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the TP size (mpirun -np ", tp_size, ") does not divide the model's ", plan.model.nheads(),
        " heads; start a number of ranks that divides ", plan.model.nheads()));
  }
  COIL_ASSIGN_OR_RETURN(plan.state_bytes_per_sequence,
                        model::MaxStateBytesPerSequence(plan.model, tp_size,
                                                        RunnerOptionsFromCommandLine().state_dtype));
  const int32_t block_size = absl::GetFlag(FLAGS_block_size);
  if (block_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--block-size is ", block_size, "; give at least 1 token per KV page"));
  }
  if (plan.model.has_attention()) {
    // K and V are kept in the matrices' element type (bf16 for 16-bit weights): the
    // checkpoint's headers say which, before anything is loaded.
    COIL_ASSIGN_OR_RETURN(std::unique_ptr<checkpoint::Checkpoint> files,
                          checkpoint::OpenCheckpointFiles(model_dir));
    COIL_ASSIGN_OR_RETURN(const DType kv_dtype,
                          model::ChooseWeightDType(*files, plan.model, plan.load.weight_type));
    COIL_ASSIGN_OR_RETURN(plan.kv_bytes_per_page,
                          model::MaxKvBytesPerPage(plan.model, tp_size, block_size, kv_dtype));
  }

  SchedulerConfig& config = plan.scheduler;
  config.max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs);
  config.max_batched_tokens = absl::GetFlag(FLAGS_max_batched_tokens);
  config.max_model_len = absl::GetFlag(FLAGS_max_model_len);
  config.max_queue = absl::GetFlag(FLAGS_max_queue);
  config.block_size = block_size;
  config.num_attention_layers =
      static_cast<int32_t>(plan.model.num_layers(model::LayerKind::kAttention));
  config.ssd_chunk_size = static_cast<int32_t>(plan.model.chunk_size);
  // A hybrid's snapshots share whole KV pages: the page size must divide the chunk size
  // (else the cache stays off, and the start-up log says why).
  config.prefix_cache = absl::GetFlag(FLAGS_prefix_cache) &&
                        (!config.uses_kv_pages() || config.ssd_chunk_size % config.block_size == 0);
  config.prefix_cache_max_rows = absl::GetFlag(FLAGS_prefix_cache_rows);
  if (config.prefix_cache_max_rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--prefix-cache-rows is ",
                                                   config.prefix_cache_max_rows,
                                                   "; give a count, or 0 for no cap"));
  }

  const int64_t physical = PhysicalMemoryBytes();
  COIL_ASSIGN_OR_RETURN(const int64_t budget,
                        ParseByteSize(absl::GetFlag(FLAGS_memory_budget), "--memory-budget"));
  // With --device cuda the state lives in GPU memory: it is checked against the rank's GPU
  // once the device is open (CheckDeviceMemory), not against host memory here.
  const bool host_state = plan.device.device == BackendKind::kCpu;
  if (host_state && budget > physical) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--memory-budget is ", MiB(budget), "; this machine has ", MiB(physical),
        "; lower --memory-budget"));
  }
  BudgetRequest request;
  request.budget_bytes = budget;
  request.row_bytes = plan.state_bytes_per_sequence;
  request.page_bytes = plan.kv_bytes_per_page;
  request.block_size = block_size;
  request.max_model_len = config.max_model_len;
  request.max_num_seqs = config.max_num_seqs;
  request.state_rows = absl::GetFlag(FLAGS_state_rows);
  request.kv_pages = absl::GetFlag(FLAGS_kv_pages);
  // Rows beyond --max-num-seqs could never be used at once by requests; the prefix cache
  // keeps its snapshots in such rows (as many as the budget holds, or its cap).
  request.spare_rows = !config.prefix_cache               ? 0
                       : config.prefix_cache_max_rows > 0 ? config.prefix_cache_max_rows
                                                          : INT32_MAX;
  COIL_ASSIGN_OR_RETURN(plan.budgets, SplitMemoryBudget(request));
  config.state_rows = plan.budgets.state_rows;
  config.kv_pages = plan.budgets.kv_pages;
  if (host_state && plan.budgets.bytes > physical) {
    return absl::InvalidArgumentError(absl::StrCat(
        plan.budgets.description, ": ", MiB(plan.budgets.bytes), " per rank; this machine has ",
        MiB(physical), "; lower --state-rows or --kv-pages"));
  }
  COIL_RETURN_IF_ERROR(config.Validate());
  return plan;
}

#if COIL_WITH_CUDA
// --device cuda: the state pool (and --memory-budget) against this rank's GPU. The weights
// and the step scratch come on top; a pool that leaves too little for them fails at load
// with the allocation's own message.
absl::Status CheckDeviceMemory(const ServePlan& plan, int device) {
  COIL_ASSIGN_OR_RETURN(const cuda::DeviceMemory memory, cuda::QueryDeviceMemory(device));
  COIL_ASSIGN_OR_RETURN(const int64_t budget,
                        ParseByteSize(absl::GetFlag(FLAGS_memory_budget), "--memory-budget"));
  const int64_t total = static_cast<int64_t>(memory.total_bytes);
  const int64_t free = static_cast<int64_t>(memory.free_bytes);
  if (absl::GetFlag(FLAGS_state_rows) == 0 && budget > total) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--memory-budget is ", MiB(budget), "; GPU ", device, " has ", MiB(total),
        "; lower --memory-budget"));
  }
  if (plan.budgets.bytes > free) {
    return absl::ResourceExhaustedError(absl::StrCat(
        plan.budgets.description, ": ", MiB(plan.budgets.bytes), " per rank; GPU ", device, " has ",
        MiB(free), " free of ", MiB(total), "; lower --state-rows, --kv-pages or --memory-budget"));
  }
  return absl::OkStatus();
}
#endif

// Rank 0 reports an agreed start-up failure; true when every rank succeeded.
bool Ready(const absl::Status& agreed, const char* what, int rank) {
  if (agreed.ok()) return true;
  if (rank == 0) std::fprintf(stderr, "coil-serve: %s: %s\n", what, agreed.ToString().c_str());
  return false;
}

// The engine loop's executor: rank 0's side of the runtime (broadcast, then execute).
class RuntimeExecutor final : public StepExecutor {
 public:
  explicit RuntimeExecutor(RankRuntime& runtime) : runtime_(runtime) {}
  StepResult Run(const StepPlan& plan) override { return runtime_.Run(plan); }
  absl::Status Shutdown() override { return runtime_.Shutdown(); }

 private:
  RankRuntime& runtime_;
};

coil::v1::ModelInfo StaticInfo(const std::string& model_dir, const model::Model& model,
                               const SchedulerConfig& config, int tp_size) {
  const model::ModelConfig& m = model.config();
  coil::v1::ModelInfo info;
  info.set_model_path(model_dir);
  info.set_architecture(m.format == model::ConfigFormat::kNemotronH ? "nemotron_h" : "mamba2");
  info.set_d_model(static_cast<int32_t>(m.d_model));
  info.set_n_layer(static_cast<int32_t>(m.n_layer));
  info.set_vocab_size(static_cast<int32_t>(m.vocab_size));
  info.set_padded_vocab_size(static_cast<int32_t>(m.padded_vocab_size()));
  info.set_d_state(static_cast<int32_t>(m.d_state));
  info.set_headdim(static_cast<int32_t>(m.headdim));
  info.set_nheads(static_cast<int32_t>(m.nheads()));
  info.set_ngroups(static_cast<int32_t>(m.ngroups));
  info.set_dtype(DTypeName(model.weight_dtype()));
  info.set_device(absl::GetFlag(FLAGS_device));  // the shared flag, checked at start-up
  info.set_tp_size(tp_size);
  info.set_max_model_len(config.max_model_len);
  info.set_block_size(config.block_size);
  info.set_num_attention_layers(config.num_attention_layers);
  info.set_prefix_cache(config.prefix_cache);
  info.set_prefix_cache_max_rows(config.prefix_cache_max_rows);
  return info;
}

// Rank 0 after loading: serve until SIGTERM/SIGINT, then drain and end the workers.
int Serve(const ServePlan& plan, RankRuntime& runtime, const tokenizer::Tokenizer& tok,
          const sigset_t& stop_signals, FailureHandler& failures) {
  const model::Model& model = runtime.model();
  RuntimeExecutor executor(runtime);
  SchedulerConfig config = plan.scheduler;
  config.eos_token_id = tokenizer::EndOfSequenceId(tok).value_or(-1);
  auto scheduler = Scheduler::Create(config);
  if (!scheduler.ok()) {
    std::fprintf(stderr, "coil-serve: %s\n", scheduler.status().ToString().c_str());
    runtime.Shutdown().IgnoreError();
    return 1;
  }
  // Metrics first: a port that cannot be bound ends start-up before anything serves.
  auto served_metrics = metrics::CoilMetrics::Create();
  std::unique_ptr<metrics::MetricsExporter> exporter;
  if (served_metrics.ok() && absl::GetFlag(FLAGS_metrics_port) >= 0) {
    auto started = metrics::MetricsExporter::Start((*served_metrics)->registry(),
                                                   absl::GetFlag(FLAGS_metrics_host),
                                                   absl::GetFlag(FLAGS_metrics_port));
    if (!started.ok()) {
      served_metrics = started.status();
    } else {
      exporter = std::move(started).value();
    }
  }
  if (!served_metrics.ok()) {
    std::fprintf(stderr, "coil-serve: metrics: %s; choose another --metrics-port (-1: off)\n",
                 served_metrics.status().ToString().c_str());
    runtime.Shutdown().IgnoreError();
    return 1;
  }
  if (exporter != nullptr) {
    COIL_LOG(INFO) << "metrics on http://" << absl::GetFlag(FLAGS_metrics_host) << ":" << exporter->port()
                   << "/metrics";
  }
  EngineLoop engine(std::move(scheduler).value(), tok, executor, served_metrics->get());
  engine.OnFailure([&failures](const absl::Status& status) { failures.EndServing(status); });
  engine.Start();

  ServingLimits limits;
  limits.max_model_len = config.max_model_len;
  limits.vocab_size = static_cast<int32_t>(std::min<int64_t>(model.config().vocab_size, tok.vocab_size()));
  limits.max_text_bytes = TextBytesLimit(config.max_model_len);
  const std::string model_dir = absl::GetFlag(FLAGS_model);
  GenerationService service(engine, tok, limits, StaticInfo(model_dir, model, config, runtime.size()));

  // The OpenAI-compatible HTTP API, when asked for: its template is parsed before anything
  // serves, so a template outside the interpreter's subset ends start-up naming the construct.
  std::unique_ptr<chat::ChatTemplate> chat_template;
  std::unique_ptr<http::OpenAiServer> http_server;
  if (absl::GetFlag(FLAGS_http_port) >= 0) {
    auto loaded = chat::ChatTemplate::Load(model_dir, absl::GetFlag(FLAGS_chat_template));
    absl::StatusOr<std::unique_ptr<http::OpenAiServer>> started =
        loaded.ok() ? absl::InternalError("not started") : loaded.status();
    if (loaded.ok()) {
      chat_template = std::move(loaded).value();
      http::ProtocolContext context;
      context.tokenizer = &tok;
      context.chat_template = chat_template.get();
      context.served_model_name = absl::GetFlag(FLAGS_served_model_name);
      if (context.served_model_name.empty()) {
        context.served_model_name = std::filesystem::path(model_dir).lexically_normal().filename().string();
        if (context.served_model_name.empty()) {
          context.served_model_name =
              std::filesystem::path(model_dir).lexically_normal().parent_path().filename().string();
        }
      }
      context.limits = limits;
      http::HttpServerOptions options;
      options.host = absl::GetFlag(FLAGS_host);
      options.port = absl::GetFlag(FLAGS_http_port);
      options.threads = absl::GetFlag(FLAGS_http_threads);
      options.max_queued_connections = options.threads;
      options.max_body_bytes = static_cast<size_t>(std::max<int64_t>(1, absl::GetFlag(FLAGS_http_max_body)));
      started = http::OpenAiServer::Start(options, engine, std::move(context), served_metrics->get());
    }
    if (!started.ok()) {
      std::fprintf(stderr, "coil-serve: HTTP API: %s\n", started.status().ToString().c_str());
      engine.BeginDrain(std::chrono::milliseconds(0));
      engine.Join().IgnoreError();
      return 1;
    }
    http_server = std::move(started).value();
    COIL_LOG(INFO) << "OpenAI-compatible HTTP API on http://" << absl::GetFlag(FLAGS_host) << ":"
                   << http_server->port() << "/v1 (chat template: "
                   << (chat_template != nullptr ? chat_template->origin() : std::string("none"))
                   << ")";
  }

  // The gRPC port is bound and accepted by coil itself (engine/net/connection_acceptor.h):
  // gRPC 1.51's own accept loop stops for good after one failed accept4, and caps nothing.
  absl::StatusOr<std::unique_ptr<net::Listener>> listener =
      net::Listener::Bind(absl::GetFlag(FLAGS_host), absl::GetFlag(FLAGS_port));
  if (!listener.ok()) {
    std::fprintf(stderr, "coil-serve: %s; choose another --host/--port\n",
                 std::string(listener.status().message()).c_str());
    engine.BeginDrain(std::chrono::milliseconds(0));
    engine.Join().IgnoreError();
    if (http_server != nullptr) http_server->Stop();
    return 1;
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  // Room for the largest request coil's own checks take (text, or token ids at up to 5
  // bytes each), so that those checks, not gRPC's size limit, explain a refusal.
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::max<int64_t>(
      int64_t{4} << 20, std::max<int64_t>(limits.max_text_bytes, int64_t{5} * config.max_model_len) +
                            (int64_t{64} << 10))));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             std::max(1, absl::GetFlag(FLAGS_max_streams_per_connection)));
  if (absl::GetFlag(FLAGS_idle_timeout) > 0) {
    builder.AddChannelArgument(
        GRPC_ARG_MAX_CONNECTION_IDLE_MS,
        static_cast<int>(std::min(absl::GetFlag(FLAGS_idle_timeout) * 1000.0, 2e9)));
  }
  // What gRPC may buffer for all connections together (reads and writes).
  grpc::ResourceQuota quota("coil-serve");
  quota.Resize(size_t{1} << 30);
  builder.SetResourceQuota(quota);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    std::fprintf(stderr, "coil-serve: the gRPC server did not start\n");
    engine.BeginDrain(std::chrono::milliseconds(0));
    engine.Join().IgnoreError();
    if (http_server != nullptr) http_server->Stop();
    return 1;
  }
  int max_connections = absl::GetFlag(FLAGS_max_connections);
  if (max_connections <= 0) {
    const long descriptors = net::RaiseDescriptorLimit();
    max_connections = descriptors < 0 ? 4096
                                      : static_cast<int>(std::clamp<long>(descriptors - 256, 16, 4096));
  }
  grpc::Server* raw_server = server.get();
  absl::StatusOr<std::unique_ptr<net::ConnectionAcceptor>> acceptor = net::ConnectionAcceptor::Start(
      std::move(listener).value(), max_connections, net::ConnectionAcceptor::kDefaultHeadroom, "gRPC",
      [raw_server](int fd) { grpc::AddInsecureChannelFromFd(raw_server, fd); });
  if (!acceptor.ok()) {
    std::fprintf(stderr, "coil-serve: %s\n", std::string(acceptor.status().message()).c_str());
    server->Shutdown();
    engine.BeginDrain(std::chrono::milliseconds(0));
    engine.Join().IgnoreError();
    if (http_server != nullptr) http_server->Stop();
    return 1;
  }
  const int port = (*acceptor)->port();
  // Ready: the engine runs and the port is open. Health answers for the server as a whole
  // ("") and for the service by name; a failure or the drain turns both NOT_SERVING.
  server->GetHealthCheckService()->SetServingStatus(coil::v1::Generation::service_full_name(),
                                                    true);
  server->GetHealthCheckService()->SetServingStatus(true);
  failures.Serving(&engine, server.get());
  COIL_LOG(INFO) << "serving " << model_dir << " on " << absl::GetFlag(FLAGS_host) << ":" << port
                 << " (TP " << runtime.size() << ", " << config.state_rows << " state rows, "
                 << config.kv_pages << " KV pages of " << config.block_size << " tokens, at most "
                 << max_connections << " connections)";
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    const std::string path = absl::GetFlag(FLAGS_port_file);
    {
      std::ofstream out(path + ".tmp");
      out << port << "\n" << (exporter != nullptr ? exporter->port() : -1) << "\n"
          << (http_server != nullptr ? http_server->port() : -1) << "\n";
    }
    std::rename((path + ".tmp").c_str(), path.c_str());  // readers never see half a file
  }

  // The signals stay blocked in every thread; this thread takes them synchronously.
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  if (failures.failed()) {
    // mpirun's kill sequence after a lost rank (its SIGTERM comes odls_base_sigkill_timeout
    // after the death): the failure handler is already ending the process with status 3,
    // which a drain, waiting for the lost rank, would only race.
    COIL_LOG(INFO) << "signal " << signal_number << " after the job lost a rank: not draining";
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  const int drain_seconds = std::max(0, absl::GetFlag(FLAGS_drain_timeout));
  COIL_LOG(INFO) << "signal " << signal_number << ": draining (up to " << drain_seconds
                 << " s for in-flight requests)";
  server->GetHealthCheckService()->SetServingStatus(false);
  engine.BeginDrain(std::chrono::seconds(drain_seconds));
  const absl::Status workers = engine.Join();
  failures.Serving(nullptr, nullptr);
  // No new connections for a server about to shut down.
  (*acceptor)->Stop();
  // Every HTTP handler has its final output now; closing the listener lets them finish.
  if (http_server != nullptr) http_server->Stop();
  // Every stream has its final message queued; give the writes a moment, then close.
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server->Wait();
  if (!workers.ok()) {
    std::fprintf(stderr, "coil-serve: shutting down the workers: %s\n", workers.ToString().c_str());
    return 1;
  }
  COIL_LOG(INFO) << "drained; exiting";
  return 0;
}

int Main(int argc, char** argv) {
  // Block the stop signals before any thread exists (MPI's, gRPC's, the engine's), so every
  // thread inherits the mask and rank 0 takes them with sigwait, outside signal context.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  absl::SetProgramUsageMessage(
      "mpirun -np N --bind-to none --mca odls_base_sigkill_timeout 1 coil-serve --model DIR "
      "[--port 50051] [--state-rows R | --memory-budget 2GiB] [--max-model-len L]");
  ParseDashedCommandLine(argc, argv);
  RouteProtobufLogs();
  // Every connection is a descriptor: take all the hard limit allows (a soft limit of 1024
  // would let about a thousand idle clients use them up).
  net::RaiseDescriptorLimit();

  absl::StatusOr<std::unique_ptr<RankRuntime>> connected = RankRuntime::Connect(&argc, &argv);
  if (!connected.ok()) {
    std::fprintf(stderr, "coil-serve: %s\n", connected.status().ToString().c_str());
    return 1;
  }
  RankRuntime& runtime = **connected;
  const int rank = runtime.rank();
  // From here on a lost rank is noticed (start-up included: loading may take minutes).
  FailureHandler failures(runtime);
  if (!Ready(runtime.StartMonitor(FlagSeconds(absl::GetFlag(FLAGS_rank_timeout)),
                                  FlagSeconds(absl::GetFlag(FLAGS_step_timeout)),
                                  [&failures](const absl::Status& status) { failures.Fail(status); }),
             "rank monitor", rank)) {
    return 1;
  }
  if (rank != 0) {
    // mpirun hands every rank the signal; only rank 0 decides when the workers stop.
    std::signal(SIGTERM, SIG_IGN);
    std::signal(SIGINT, SIG_IGN);
  }

  // 1. Configuration, before anything is allocated or loaded.
  const std::string model_dir = absl::GetFlag(FLAGS_model);
  absl::StatusOr<ServePlan> plan = CheckConfiguration(model_dir, runtime.size());
  if (!Ready(runtime.Agree(plan.status()), "configuration", rank)) return 1;
  if (rank == 0) {
    COIL_LOG(INFO)
        << "budgets per rank: " << plan->budgets.description << " (SSM state "
        << (RunnerOptionsFromCommandLine().state_dtype == DType::kBF16 ? "bf16" : "f32")
        << "); max_num_seqs "
        << plan->scheduler.max_num_seqs << ", max_batched_tokens "
        << plan->scheduler.max_batched_tokens << ", max_model_len " << plan->scheduler.max_model_len
        << ", max_queue " << plan->scheduler.max_queue << "; prefix cache "
        << (!plan->scheduler.prefix_cache
                ? std::string(absl::GetFlag(FLAGS_prefix_cache)
                                  ? absl::StrCat("off: --block-size ", plan->scheduler.block_size,
                                                 " does not divide the model's chunk "
                                                 "size ",
                                                 plan->scheduler.ssd_chunk_size)
                                  : "off")
            : plan->scheduler.prefix_cache_max_rows > 0
                ? absl::StrCat("on, at most ", plan->scheduler.prefix_cache_max_rows, " rows")
                : std::string("on, in any row no request holds"));
  }

  // 2. The device; with --device cuda the state pool is checked against the GPU's memory.
  const auto check_device = [&](Backend& backend) -> absl::Status {
#if COIL_WITH_CUDA
    if (auto* cuda_backend = dynamic_cast<cuda::CudaBackend*>(&backend)) {
      return CheckDeviceMemory(*plan, cuda_backend->device_index());
    }
#endif
    return absl::OkStatus();
  };
  if (!Ready(runtime.OpenDevice(plan->device.device, plan->device.options, check_device), "device",
             rank)) {
    return 1;
  }

  // 3. Weights and the state pool, then the tokenizer on rank 0.
  model::LoadOptions load = plan->load;
  if (rank == 0 && isatty(STDERR_FILENO)) {
    load.progress = [](int64_t done, int64_t total) {
      std::fprintf(stderr, "\rloading weights: layer %lld of %lld%s", static_cast<long long>(done),
                   static_cast<long long>(total), done == total ? "\n" : "");
    };
  }
  RunnerOptions run = RunnerOptionsFromCommandLine();
  run.kv_pages = plan->scheduler.kv_pages;
  run.block_size = plan->scheduler.block_size;
  run.max_context = plan->scheduler.max_model_len;  // the decode graphs' capacity
  // Refused before any weight is read when the weights and the pools do not fit the memory
  // this rank can get (workers/memory_fit.h).
  MemoryLimits limits;
  limits.max_host_bytes = plan->max_host_memory;
  limits.pool_flags = "--memory-budget";
  const absl::Status model_loaded =
      runtime.LoadModel(model_dir, load, plan->scheduler.state_rows, run, limits);
  if (!Ready(model_loaded, "loading", rank)) {
    return 1;
  }
  std::unique_ptr<tokenizer::Tokenizer> tok;
  absl::Status tokenizer_loaded = absl::OkStatus();
  if (rank == 0) {
    absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> loaded =
        tokenizer::LoadTokenizerForModel(model_dir, absl::GetFlag(FLAGS_tokenizer));
    tokenizer_loaded = loaded.status();
    if (loaded.ok()) tok = std::move(loaded).value();
  }
  if (!Ready(runtime.Agree(tokenizer_loaded), "loading the tokenizer", rank)) return 1;
  if (rank == 0) {
    const model::Model& model = runtime.model();
    COIL_LOG(INFO) << "loaded " << model_dir << ": " << model.config().n_layer << " layers, d_model "
                   << model.config().d_model << ", " << DTypeName(model.weight_dtype()) << " weights, "
                   << MiB(static_cast<int64_t>(model.weight_bytes())) << " on rank 0, TP "
                   << runtime.size();
  }

  if (rank != 0) {
    const absl::Status done = runtime.ServePlans();
    if (!done.ok()) {
      std::fprintf(stderr, "coil-serve rank %d: %s\n", rank, done.ToString().c_str());
      // Rank 0 learns of it at once (not after --rank-timeout) and names this rank.
      runtime.ReportFailure(done, std::chrono::seconds(1));
      return 1;
    }
    return 0;
  }
  return Serve(*plan, runtime, *tok, stop_signals, failures);
}

}  // namespace
}  // namespace coil

int main(int argc, char** argv) { return coil::Main(argc, argv); }
