// A rank that dies, or stops, while coil-serve serves. A killed rank is noticed through its
// closed monitor connection: within 2 s every running and queued request ends UNAVAILABLE
// with a message naming the lost rank, health is no longer SERVING, and the other ranks
// exit with status 3; a stopped rank is noticed within --rank-timeout (here 3 s). That is
// whatever mpirun's own timeouts: here 40 s between the signals of its kill sequence, so
// mpirun alone would take 80 s. New requests are refused and every coil-serve rank exits
// by itself (a stopped one once mpirun continues it). With the documented short kill
// timeout (1 s) mpirun itself, the whole job, exits non-zero within 5 s of the death.
// Driven through coil-serve under mpirun at TP2 and TP4, killing rank 0, a middle rank and
// the last rank, and stopping a rank with SIGSTOP. The expected values are the promises of
// docs/serving.md: the codes, the rank in the message, and the times.
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/server_process.h"

namespace coil::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kModelLen = 65536;
// The rank timeout the servers run with, and the margin allowed on top of it for the
// monitor's period and the machine being busy.
const int kRankTimeoutSeconds = 3 * TimeScale();
const auto kMargin = std::chrono::seconds(6 * TimeScale());
// The promises for a rank that dies (rather than stops): noticed, its requests ended and
// the other ranks gone within 2 s; the whole job (mpirun) gone within 5 s.
const auto kDeathNoticed = std::chrono::milliseconds(2000 * TimeScale());
const auto kJobEnded = std::chrono::milliseconds(5000 * TimeScale());

double Seconds(std::chrono::steady_clock::duration duration) {
  return std::chrono::duration<double>(duration).count();
}

std::string& ModelDir() {
  static std::string dir;
  return dir;
}

class ModelEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    dir_ = std::make_unique<TempDir>();
    ModelDir() = dir_->path() + "/tiny";
    absl::StatusOr<int> code = RunProgram(
        {COIL_MAKE_MODEL_PATH, "--shape", "tiny", "--out", ModelDir()}, dir_->path() + "/make.log");
    ASSERT_TRUE(code.ok()) << code.status();
    ASSERT_EQ(*code, 0) << "coil-make-model failed";
  }
  void TearDown() override { dir_.reset(); }

 private:
  std::unique_ptr<TempDir> dir_;
};

coil::v1::GenerateRequest LongRequest(int32_t first_id) {
  coil::v1::GenerateRequest request;
  for (int32_t id : {first_id, 7, 9}) request.mutable_token_ids()->add_ids(id);
  request.mutable_sampling()->set_max_tokens(kModelLen - 8);
  request.mutable_sampling()->set_ignore_eos(true);
  return request;
}

struct Case {
  int ranks;
  int victim;
  int signal;  // SIGKILL or SIGSTOP
  // mpirun's odls_base_sigkill_timeout: 40 (the kill sequence far too slow to be what ends
  // anything within the bounds), or the documented 1, with which mpirun's exit is checked.
  int mpi_kill_timeout = 40;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return absl::StrCat("Tp", info.param.ranks, info.param.signal == SIGKILL ? "Kill" : "Stop",
                      "Rank", info.param.victim,
                      info.param.mpi_kill_timeout < 40 ? "JobExits" : "");
}

class RankFailureTest : public ::testing::TestWithParam<Case> {};

TEST_P(RankFailureTest, RequestsEndUnavailableNamingTheRankAndTheJobEnds) {
  const Case c = GetParam();
  ServerOptions options;
  options.ranks = c.ranks;
  // A stopped rank is not noticed by mpirun at all: its kill sequence starts only when coil's
  // ranks exit, and then a short one lets the test see mpirun's own exit status.
  options.mpi_kill_timeout = c.signal == SIGSTOP ? 1 : c.mpi_kill_timeout;
  options.flags = {"--rank-timeout", std::to_string(kRankTimeoutSeconds), "--state-rows", "2",
                   "--max-model-len", std::to_string(kModelLen), "--max-queue", "8"};
  auto started = ServerProcess::Start(ModelDir(), options);
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& server = **started;
  Client& client = server.client();

  // Two requests running (the two state rows) and one queued behind them.
  constexpr int kRequests = 3;
  std::vector<absl::Status> statuses(kRequests);
  std::vector<std::chrono::steady_clock::time_point> ended(kRequests);
  std::atomic<int> streaming{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      bool counted = false;
      auto generation = client.Generate(LongRequest(2 + i), [&](const auto&) {
        if (!counted) streaming.fetch_add(1);
        counted = true;
        return true;
      });
      statuses[i] = generation.status();
      ended[i] = std::chrono::steady_clock::now();
    });
    // In order, so that the third one is the one that waits.
    if (i < 2) {
      while (streaming.load() <= i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  for (int attempt = 0; attempt < 500; ++attempt) {
    auto info = client.Info();
    if (info.ok() && info->waiting_requests() == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(server.RankPid(c.victim).has_value()) << server.LogTail();

  const auto signalled = std::chrono::steady_clock::now();
  server.SignalRank(c.victim, c.signal);
  // When health stops answering SERVING (a failed call counts: rank 0 has gone).
  std::chrono::steady_clock::time_point not_serving{};
  std::thread health([&] {
    while (std::chrono::steady_clock::now() - signalled < std::chrono::seconds(30)) {
      auto serving = client.Health();
      if (!(serving.ok() && *serving)) {
        not_serving = std::chrono::steady_clock::now();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  // The other ranks, when the victim is rank 0: gone (exited, maybe not yet reaped).
  std::chrono::steady_clock::time_point others_gone{};
  std::vector<std::optional<int>> wait_statuses(c.ranks);
  if (c.victim == 0) {
    while (std::chrono::steady_clock::now() - signalled < std::chrono::seconds(30)) {
      bool any = false;
      for (int r = 1; r < c.ranks; ++r) {
        if (server.RankPid(r).has_value()) {
          any = true;
        } else if (!wait_statuses[r].has_value()) {
          wait_statuses[r] = server.RankWaitStatus(r);
        }
      }
      if (!any) {
        others_gone = std::chrono::steady_clock::now();
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  for (std::thread& thread : threads) thread.join();
  health.join();

  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(statuses[i].code(), absl::StatusCode::kUnavailable) << "request " << i << ": "
                                                                  << statuses[i];
    if (c.victim != 0) {
      // Rank 0 names the lost rank; with rank 0 itself gone the connection just closes.
      EXPECT_THAT(std::string(statuses[i].message()), HasSubstr(absl::StrCat("rank ", c.victim)))
          << "request " << i;
    }
    const auto bound = c.signal == SIGKILL
                           ? std::chrono::duration_cast<std::chrono::milliseconds>(kDeathNoticed)
                           : std::chrono::seconds(kRankTimeoutSeconds) + kMargin;
    std::printf("request %d ended %s %.3f s after SIG%s of rank %d\n", i,
                statuses[i].ok() ? "OK" : "UNAVAILABLE", Seconds(ended[i] - signalled),
                c.signal == SIGKILL ? "KILL" : "STOP", c.victim);
    EXPECT_LT(ended[i] - signalled, bound) << "request " << i << " ended late";
  }
  ASSERT_NE(not_serving, std::chrono::steady_clock::time_point{}) << "health stayed SERVING";
  std::printf("health not SERVING %.3f s after the signal\n", Seconds(not_serving - signalled));
  if (c.signal == SIGKILL) {
    EXPECT_LT(not_serving - signalled, kDeathNoticed) << "health SERVING too long";
  }
  if (c.victim == 0) {
    ASSERT_NE(others_gone, std::chrono::steady_clock::time_point{}) << server.LogTail();
    std::printf("ranks 1..%d gone %.3f s after rank 0's death\n", c.ranks - 1,
                Seconds(others_gone - signalled));
    // By themselves: mpirun's kill sequence would need 2 x 40 s (or, with the short
    // timeout, sends SIGKILL only about 1.25 s after the death).
    EXPECT_LT(others_gone - signalled, kDeathNoticed) << server.LogTail();
    for (int r = 1; r < c.ranks; ++r) {
      // Seen only while mpirun has not reaped the rank; where seen, it is status 3.
      if (wait_statuses[r].has_value()) {
        EXPECT_TRUE(WIFEXITED(*wait_statuses[r]) && WEXITSTATUS(*wait_statuses[r]) == 3)
            << "rank " << r << " ended with wait status " << *wait_statuses[r];
      }
    }
  }
  if (c.victim != 0) {
    // Refused, not left hanging: either by the failed engine or, a moment later, because the
    // server has closed.
    CallOptions call;
    call.timeout = std::chrono::seconds(10 * TimeScale());
    auto refused = client.Generate(LongRequest(40), nullptr, call);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
    auto serving = client.Health();
    EXPECT_FALSE(serving.ok() && *serving) << "health still SERVING after losing a rank\n"
                                           << server.LogTail();
    auto named = client.Health("coil.v1.Generation");
    EXPECT_FALSE(named.ok() && *named)
        << "health of coil.v1.Generation still SERVING after losing a rank\n"
        << server.LogTail();
  }

  // Every coil-serve rank ends by itself, the victim included once mpirun continues it.
  const auto deadline = signalled + std::chrono::seconds(kRankTimeoutSeconds) + 2 * kMargin;
  while (server.AnyRankRuns() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(server.AnyRankRuns()) << "coil-serve ranks still run\n" << server.LogTail();
  if (c.signal == SIGKILL && c.mpi_kill_timeout < 40) {
    // The whole job: mpirun exits non-zero (so a restart policy applies) within 5 s.
    std::optional<int> code = server.Wait(std::chrono::seconds(30 * TimeScale()));
    const auto exited = std::chrono::steady_clock::now();
    ASSERT_TRUE(code.has_value()) << "mpirun did not exit\n" << server.LogTail();
    std::printf("mpirun exited with %d %.3f s after the death\n", *code,
                Seconds(exited - signalled));
    EXPECT_NE(*code, 0) << server.LogTail();
    EXPECT_LT(exited - signalled, kJobEnded) << server.LogTail();
    if (c.victim == 0) {
      // Its output now complete: the other ranks said why they exit, and with which status.
      EXPECT_THAT(server.Log(), HasSubstr("coil-serve rank 1: rank 0 died"));
      EXPECT_THAT(server.Log(), HasSubstr("exiting with status 3"));
    } else {
      EXPECT_THAT(server.Log(), HasSubstr(absl::StrCat("rank ", c.victim, " died")));
    }
  } else if (c.signal == SIGSTOP) {
    // mpirun's exit follows its short kill sequence: non-zero, the ranks' status.
    std::optional<int> code = server.Wait(std::chrono::seconds(30 * TimeScale()));
    ASSERT_TRUE(code.has_value()) << "mpirun did not exit\n" << server.LogTail();
    EXPECT_NE(*code, 0) << server.LogTail();
    EXPECT_THAT(server.LogTail(), HasSubstr(absl::StrCat("rank ", c.victim, " stopped answering")));
  } else {
    // mpirun itself would linger through its 40 s kill sequence: the ranks are what matter.
    server.Kill();
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, RankFailureTest,
                         ::testing::Values(Case{2, 1, SIGKILL}, Case{2, 1, SIGSTOP},
                                           Case{2, 0, SIGKILL}, Case{4, 0, SIGKILL},
                                           Case{4, 2, SIGKILL}, Case{4, 3, SIGKILL},
                                           Case{4, 2, SIGSTOP}, Case{2, 1, SIGKILL, 1},
                                           Case{2, 0, SIGKILL, 1}),
                         CaseName);

}  // namespace
}  // namespace coil::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new coil::testing::ModelEnvironment());  // owned by gtest
  return RUN_ALL_TESTS();
}
