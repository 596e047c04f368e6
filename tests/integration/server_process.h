// A coil-serve started by a test: spawned (under mpirun or alone) with its output in a log
// file, waited for until it listens and reports SERVING, and stopped with SIGTERM.
#ifndef COIL_TESTS_INTEGRATION_SERVER_PROCESS_H_
#define COIL_TESTS_INTEGRATION_SERVER_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/client/client.h"

namespace coil::testing {

// How much slower this build runs than a plain Release build: waits and timeouts in the
// tests are multiplied by it (AddressSanitizer builds run several times slower).
constexpr int TimeScale() {
#if defined(__SANITIZE_ADDRESS__)
  return 10;
#else
  return 1;
#endif
}

// Runs `argv` to completion; returns its exit code (or an error when it could not start).
absl::StatusOr<int> RunProgram(const std::vector<std::string>& argv, const std::string& log_path);

// A fresh directory under $TMPDIR (or /tmp), removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct ServerOptions {
  int ranks = 1;          // mpirun -np
  bool use_mpirun = true;  // false: coil-serve alone (one rank, no MPI)
  // mpirun's odls_base_sigkill_timeout: how long mpirun waits between the signals of its
  // own kill sequence (after a rank fails, or when it is signalled).
  int mpi_kill_timeout = 40;
  std::vector<std::string> flags;  // coil-serve flags besides --model/--host/--port
  // A program (and its arguments) to start everything under, e.g. prlimit for a lower
  // descriptor limit.
  std::vector<std::string> prefix;
};

class ServerProcess {
 public:
  // Starts coil-serve on `model_dir` and waits until it reports SERVING.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(const std::string& model_dir,
                                                              const ServerOptions& options);
  ~ServerProcess();  // Signal(SIGTERM), then SIGKILL if it does not end within 30 s

  const std::string& target() const { return target_; }
  int metrics_port() const { return metrics_port_; }
  // The OpenAI API's port (with --http-port among the flags), else -1.
  int http_port() const { return http_port_; }
  // GET /metrics from the server's Prometheus endpoint: the body, or an error.
  absl::StatusOr<std::string> FetchMetrics() const;
  Client& client() { return *client_; }
  pid_t pid() const { return pid_; }

  // Sends `signal` to coil-serve's rank 0 (under mpirun: to that rank, not to mpirun, whose
  // kill sequence would deliver it only after odls_base_sigkill_timeout; the other ranks
  // end through rank 0's shutdown plan and mpirun then exits by itself).
  void Signal(int signal);
  // Under mpirun: the pid of rank `rank` (nullopt once it has exited or not started), and
  // whether any rank still runs (a rank that exited but is not yet reaped does not).
  std::optional<pid_t> RankPid(int rank) const;
  bool AnyRankRuns() const;
  // Under mpirun: the wait status of rank `rank` once it has exited and while mpirun has not
  // yet reaped it (Open MPI 4.1's mpirun reaps only between the sleeps of its kill
  // sequence), else nullopt.
  std::optional<int> RankWaitStatus(int rank) const;
  // Sends `signal` to rank `rank` itself.
  void SignalRank(int rank, int signal);
  // Ends mpirun (and any rank left) with SIGKILL at once, without its kill sequence.
  void Kill();
  // Waits for the process to end; its exit code, or nullopt on timeout.
  std::optional<int> Wait(std::chrono::seconds timeout);
  // The end of its log, for failure messages; the whole log.
  std::string LogTail() const;
  std::string Log() const;

 private:
  ServerProcess() = default;

  pid_t pid_ = -1;
  bool under_mpirun_ = false;
  bool reaped_ = false;
  std::unique_ptr<TempDir> dir_;
  std::string log_path_;
  std::string target_;
  int metrics_port_ = -1;
  int http_port_ = -1;
  std::unique_ptr<Client> client_;
};

}  // namespace coil::testing

#endif  // COIL_TESTS_INTEGRATION_SERVER_PROCESS_H_
