// Communication costs, run under mpirun (e.g. `mpirun -np 2 comm_bench`):
//   AllReduce/<algorithm>/<floats>: one deterministic all-reduce of that many floats
//     (768 = one token of mamba2-130m's hidden state; 512 × 768 = a 512-token prefill).
//   PlanLatency/<wait>/<gap_us>: rank 0 sends a 256-byte plan to ranks that have waited
//     gap_us for it, rank 1 acknowledges; time from send to acknowledgement.
//   IdleWaitCpu/<wait>: CPU used by a rank waiting 2 s for a plan, as % of one core.
// <wait> is "backoff" (the default: spin, then sleeps growing from 50 µs to 2 ms) or
// "busy" (polls without sleeping). Every benchmark has a fixed iteration count, so all
// ranks run the same collectives; only rank 0 reports.
#include <mpi.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "workers/comm/broadcast_channel.h"
#include "workers/comm/mpi_communicator.h"
#include "workers/comm/mpi_session.h"

namespace coil::comm {
namespace {

using Clock = std::chrono::steady_clock;

class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec * 1e-6 + usage.ru_stime.tv_sec +
         usage.ru_stime.tv_usec * 1e-6;
}

void RegisterAllReduce(const char* name, MpiCommunicator* comm, int iterations_scale) {
  for (int64_t count : {768, 8 * 768, 32 * 768, 512 * 768}) {
    // Keep each case near 0.1-0.5 s on 2 cores.
    const int64_t iterations = std::max<int64_t>(20, 2000 * 768 / count) * iterations_scale;
    benchmark::RegisterBenchmark(
        (std::string("AllReduce/") + name + "/" + std::to_string(count)).c_str(),
        [comm, count](benchmark::State& state) {
          std::vector<float> data(count, 1.0f);
          MPI_Barrier(MPI_COMM_WORLD);
          for (auto _ : state) {
            if (!comm->AllReduceSum(data.data(), data.size()).ok()) {
              state.SkipWithError("all-reduce failed");
              break;
            }
            benchmark::DoNotOptimize(data.data());
          }
          state.SetBytesProcessed(state.iterations() * count * sizeof(float));
        })
        ->Iterations(iterations)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

void RegisterPlanLatency(const char* name, BroadcastChannel* channel) {
  for (int gap_us : {0, 1000, 20000}) {
    const int iterations = gap_us >= 20000 ? 50 : 200;
    benchmark::RegisterBenchmark(
        (std::string("PlanLatency/") + name + "/" + std::to_string(gap_us)).c_str(),
        [channel, gap_us](benchmark::State& state) {
          const std::string plan(256, 'p');
          const int rank = channel->rank();
          MPI_Barrier(MPI_COMM_WORLD);
          for (auto _ : state) {
            if (rank == 0) {
              std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
              const auto start = Clock::now();
              (void)channel->Send(plan);
              char ack = 0;
              if (channel->size() > 1) {
                MPI_Recv(&ack, 1, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
              }
              state.SetIterationTime(std::chrono::duration<double>(Clock::now() - start).count());
            } else {
              (void)channel->Receive();
              if (rank == 1) MPI_Send("a", 1, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
              state.SetIterationTime(1e-6);
            }
          }
        })
        ->Iterations(iterations)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

void RegisterIdleWaitCpu(const char* name, BroadcastChannel* channel) {
  benchmark::RegisterBenchmark(
      (std::string("IdleWaitCpu/") + name).c_str(),
      [channel](benchmark::State& state) {
        const int rank = channel->rank();
        double percent = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (auto _ : state) {
          if (rank == 0) {
            std::this_thread::sleep_for(std::chrono::seconds(2));
            (void)channel->Send("plan");
          } else {
            const double cpu_before = CpuSeconds();
            const auto start = Clock::now();
            (void)channel->Receive();
            const double wall = std::chrono::duration<double>(Clock::now() - start).count();
            percent = 100.0 * (CpuSeconds() - cpu_before) / wall;
          }
        }
        // Rank 1's figure, reported by rank 0.
        if (channel->size() > 1) {
          if (rank == 1) MPI_Send(&percent, 1, MPI_DOUBLE, 0, 1, MPI_COMM_WORLD);
          if (rank == 0) {
            MPI_Recv(&percent, 1, MPI_DOUBLE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          }
        }
        state.counters["rank1_cpu_percent"] = percent;
      })
      ->Iterations(1)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

int Main(int argc, char** argv) {
  auto session = MpiSession::Init(&argc, &argv);
  if (!session.ok()) {
    std::fprintf(stderr, "cannot start MPI: %s\n", session.status().ToString().c_str());
    return 1;
  }
  benchmark::Initialize(&argc, argv);
  std::vector<std::unique_ptr<MpiCommunicator>> comms;
  const std::pair<const char*, AllReduceAlgorithm> algorithms[] = {
      {"native", AllReduceAlgorithm::kNative},
      {"gather_sum", AllReduceAlgorithm::kGatherSum},
      {"scatter_sum", AllReduceAlgorithm::kScatterSum}};
  for (const auto& [name, algorithm] : algorithms) {
    if (algorithm == AllReduceAlgorithm::kNative && (*session)->world_size() > 2) continue;
    MpiCommunicator::Options options;
    options.all_reduce = algorithm;
    auto comm = MpiCommunicator::Create(options);
    if (!comm.ok()) {
      std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
      return 1;
    }
    comms.push_back(std::move(*comm));
    RegisterAllReduce(name, comms.back().get(), 1);
  }
  BackoffOptions busy;
  busy.max_sleep = std::chrono::microseconds(0);
  auto backoff_channel = BroadcastChannel::Create(0, BackoffOptions());
  auto busy_channel = BroadcastChannel::Create(0, busy);
  if (!backoff_channel.ok() || !busy_channel.ok()) return 1;
  RegisterPlanLatency("backoff", backoff_channel->get());
  RegisterPlanLatency("busy", busy_channel->get());
  RegisterIdleWaitCpu("backoff", backoff_channel->get());
  RegisterIdleWaitCpu("busy", busy_channel->get());

  if ((*session)->world_rank() == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    NullReporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  benchmark::Shutdown();
  return 0;
}

}  // namespace
}  // namespace coil::comm

int main(int argc, char** argv) { return coil::comm::Main(argc, argv); }
