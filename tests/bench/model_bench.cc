// The whole model's step time on the CPU: decode at batch 1, 8 and 32 and prefill of one
// 512-token prompt, at TP1 or, under `mpirun -np N`, at TP N (every rank runs the same
// plans; rank 0 prints). Reports tokens/s and the share of each step spent in collectives.
// It prints figures and asserts nothing.
//
//   model_bench --model DIR [--threads T] [--batches 1,8,32] [--decode-steps 32]
//               [--prefill 512] [--weights auto|f32|bf16]
// Without --model it writes the 130m shape (bf16, random) to a temporary directory.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/command_line.h"
#include "kernels/backend_factory.h"
#include "workers/comm/communicator.h"
#include "workers/comm/mpi_session.h"
#include "workers/model/checkpoint.h"
#include "workers/model/mamba2_model.h"
#include "workers/model/model_config.h"
#include "workers/model/model_writer.h"
#include "workers/model_runner.h"

ABSL_FLAG(std::string, model, "", "model directory (default: a random 130m-shape model)");
ABSL_FLAG(int32_t, threads, 1, "CPU threads per rank");
ABSL_FLAG(std::string, batches, "1,8,32", "decode batch sizes");
ABSL_FLAG(int32_t, decode_steps, 32, "timed decode steps per batch size");
ABSL_FLAG(int32_t, prefill, 512, "prefill prompt length");
ABSL_FLAG(std::string, weights, "auto", "matrix weight type: auto, f32, bf16");
ABSL_FLAG(std::string, dtype, "bf16", "weights written when no --model is given: f32 or bf16");

namespace coil {
namespace {

using Clock = std::chrono::steady_clock;

ScheduledSequence Seq(uint64_t id, int32_t slot, std::vector<int32_t> tokens, int32_t start) {
  ScheduledSequence s;
  s.request_id = id;
  s.state_slot = slot;
  s.fresh = start == 0;
  s.start_position = start;
  s.token_ids = std::move(tokens);
  s.sample = true;
  return s;
}

int Main(int argc, char** argv) {
  ParseDashedCommandLine(argc, argv);
  std::unique_ptr<comm::MpiSession> mpi;
  comm::CommunicatorOptions options;
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr) {
    mpi = std::move(comm::MpiSession::Init(&argc, &argv)).value();
    options.kind = comm::CommunicatorKind::kMpi;
  }
  auto comm = std::move(comm::CreateCommunicator(options)).value();
  const int rank = comm->rank();

  std::string dir = absl::GetFlag(FLAGS_model);
  if (dir.empty()) {
    char path[256] = {};
    if (rank == 0) {
      dir = (std::filesystem::temp_directory_path() / absl::StrCat("coil_bench_130m_", ::getpid())).string();
      auto config = *model::NamedModelShape("130m");
      const model::DType dtype = absl::GetFlag(FLAGS_dtype) == "f32" ? model::DType::kF32 : model::DType::kBF16;
      auto status = model::WriteModelDirectory(config, model::RandomModelTensors(config, dtype, model::DType::kF32, 1),
                                               model::WriteOptions{}, dir);
      if (!status.ok()) {
        std::fprintf(stderr, "writing the model: %s\n", status.ToString().c_str());
        return 1;
      }
      std::snprintf(path, sizeof(path), "%s", dir.c_str());
    }
    (void)comm->Broadcast(path, sizeof(path), 0);
    dir = path;
  }
  std::vector<int32_t> batches;
  for (absl::string_view b : absl::StrSplit(absl::GetFlag(FLAGS_batches), ',')) {
    int32_t value = 0;
    if (absl::SimpleAtoi(b, &value) && value > 0) batches.push_back(value);
  }
  const int32_t max_batch = *std::max_element(batches.begin(), batches.end());

  auto checkpoint = model::OpenCheckpoint(dir);
  if (!checkpoint.ok()) {
    std::fprintf(stderr, "%s\n", checkpoint.status().ToString().c_str());
    return 1;
  }
  BackendOptions backend_options;
  backend_options.threads = absl::GetFlag(FLAGS_threads);
  auto backend = std::move(CreateBackend(BackendKind::kCpu, backend_options)).value();
  model::LoadOptions load;
  load.weight_type = *model::ParseWeightType(absl::GetFlag(FLAGS_weights));
  auto m = model::Mamba2Model::Load(**checkpoint, *backend, *comm, load);
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
    return 1;
  }
  auto runner = std::move(ModelRunner::Create(**m, *backend, *comm, max_batch)).value();
  const auto& config = (*m)->config();
  uint64_t step = 0;
  auto run = [&](std::vector<ScheduledSequence> seqs, int32_t decodes) {
    StepPlan plan;
    plan.step_id = ++step;
    plan.num_decodes = decodes;
    plan.sequences = std::move(seqs);
    StepResult result = runner->Execute(plan);
    if (!result.ok) {
      std::fprintf(stderr, "step failed: %s\n", result.error.c_str());
      std::exit(1);
    }
    return result;
  };
  if (rank == 0) {
    std::printf("model %s: %lld layers, d_model %lld, %s weights, TP %d, %d thread(s) per rank, %zu MiB weights on rank 0\n",
                dir.c_str(), static_cast<long long>(config.n_layer), static_cast<long long>(config.d_model),
                DTypeName((*m)->weight_dtype()), comm->size(), absl::GetFlag(FLAGS_threads),
                (*m)->weight_bytes() >> 20);
    std::printf("| phase | batch | tokens/s | ms/step | comm share |\n|---|---:|---:|---:|---:|\n");
  }
  for (int32_t batch : batches) {
    std::vector<ScheduledSequence> prefill;
    for (int32_t s = 0; s < batch; ++s) prefill.push_back(Seq(s, s, {1 + s, 2, 3, 4, 5, 6, 7, 8}, 0));
    run(prefill, 0);
    std::vector<int32_t> last(static_cast<size_t>(batch), 9);
    int32_t position = 8;
    auto decode_step = [&]() {
      std::vector<ScheduledSequence> seqs;
      for (int32_t s = 0; s < batch; ++s) seqs.push_back(Seq(s, s, {last[s]}, position));
      StepResult r = run(seqs, batch);
      for (int32_t s = 0; s < batch; ++s) last[s] = r.tokens[s].token_id;
      ++position;
    };
    for (int w = 0; w < 2; ++w) decode_step();
    const int steps = absl::GetFlag(FLAGS_decode_steps);
    const double comm_before = (*m)->comm_seconds();
    const auto start = Clock::now();
    for (int i = 0; i < steps; ++i) decode_step();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const double comm_share = ((*m)->comm_seconds() - comm_before) / seconds;
    if (rank == 0) {
      std::printf("| decode | %d | %.1f | %.2f | %.1f%% |\n", batch, batch * steps / seconds,
                  seconds / steps * 1e3, comm_share * 100);
    }
  }
  const int32_t prompt = absl::GetFlag(FLAGS_prefill);
  if (prompt > 0) {
    std::vector<int32_t> tokens(static_cast<size_t>(prompt));
    for (int32_t i = 0; i < prompt; ++i) tokens[i] = (i * 7919) % static_cast<int32_t>(config.vocab_size);
    run({Seq(0, 0, tokens, 0)}, 0);  // warm-up
    double best = 1e30, comm_at_best = 0;
    for (int rep = 0; rep < 3; ++rep) {
      const double comm_before = (*m)->comm_seconds();
      const auto start = Clock::now();
      run({Seq(0, 0, tokens, 0)}, 0);
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (seconds < best) best = seconds, comm_at_best = (*m)->comm_seconds() - comm_before;
    }
    if (rank == 0) {
      std::printf("| prefill | 1 x %d | %.1f | %.2f | %.1f%% |\n", prompt, prompt / best, best * 1e3,
                  comm_at_best / best * 100);
    }
  }
  if (rank == 0 && absl::GetFlag(FLAGS_model).empty()) std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace coil

int main(int argc, char** argv) { return coil::Main(argc, argv); }
