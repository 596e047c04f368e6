// A rank that dies mid-job takes the whole job down (docs/ARCHITECTURE.md §3): mpirun exits
// non-zero within seconds, with the dying rank's message, instead of leaving the others waiting.
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace {

struct Outcome {
  int exit_code = -1;
  double seconds = 0;
  std::string output;
};

// Runs the probe under mpirun with `ranks` ranks. coreutils' timeout (exit 124) keeps a
// hung job from hanging the test.
Outcome RunProbe(int ranks, const std::string& mode) {
  const std::string command = std::string("timeout 60 ") + COIL_MPIEXEC + " -n " +
                              std::to_string(ranks) + " --oversubscribe --allow-run-as-root " +
                              COIL_RANK_DEATH_PROBE + " " + mode + " 2>&1";
  Outcome outcome;
  const auto start = std::chrono::steady_clock::now();
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return outcome;
  std::array<char, 4096> buffer;
  size_t read = 0;
  while ((read = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
    outcome.output.append(buffer.data(), read);
  }
  const int status = pclose(pipe);
  outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return outcome;
}

class RankDeathTest : public testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(RankDeathTest, MpirunEndsTheJobWithinSeconds) {
  const auto& [ranks, mode] = GetParam();
  const Outcome outcome = RunProbe(ranks, mode);
  EXPECT_NE(outcome.exit_code, 0) << outcome.output;
  EXPECT_NE(outcome.exit_code, 124) << "mpirun hung until the 60 s timeout\n" << outcome.output;
  // Start-up takes about a second per pair of ranks here; 20 s is a generous bound that
  // a hang (the failure this guards against) would exceed.
  EXPECT_LT(outcome.seconds, 20.0) << outcome.output;
  EXPECT_NE(outcome.output.find("rank 1 dies mid-job (" + mode + ")"), std::string::npos)
      << outcome.output;
  EXPECT_EQ(outcome.output.find("was not ended by mpirun"), std::string::npos) << outcome.output;
}

INSTANTIATE_TEST_SUITE_P(Modes, RankDeathTest,
                         testing::Combine(testing::Values(2, 3),
                                          testing::Values(std::string("abort"),
                                                          std::string("exit"))),
                         [](const auto& info) {
                           return std::get<1>(info.param) + "_np" +
                                  std::to_string(std::get<0>(info.param));
                         });

}  // namespace
