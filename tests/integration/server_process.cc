#include "tests/integration/server_process.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace coil::testing {
namespace {

absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, const std::string& log_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int error = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    return absl::InternalError(absl::StrCat("cannot start ", argv[0], ": ", std::strerror(error)));
  }
  return pid;
}

std::optional<int> WaitPid(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      return 128 + WTERMSIG(status);
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<int> RunProgram(const std::vector<std::string>& argv, const std::string& log_path) {
  absl::StatusOr<pid_t> pid = Spawn(argv, log_path);
  if (!pid.ok()) return pid.status();
  std::optional<int> code = WaitPid(*pid, std::chrono::minutes(5));
  if (!code.has_value()) {
    kill(*pid, SIGKILL);
    WaitPid(*pid, std::chrono::seconds(5));
    return absl::DeadlineExceededError(absl::StrCat(argv[0], " did not finish"));
  }
  return *code;
}

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(base != nullptr ? base : "/tmp", "/coil-test-XXXXXX");
  if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
}

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(const std::string& model_dir,
                                                                    const ServerOptions& options) {
  std::unique_ptr<ServerProcess> server(new ServerProcess());
  server->dir_ = std::make_unique<TempDir>();
  server->log_path_ = server->dir_->path() + "/server.log";
  const std::string port_file = server->dir_->path() + "/port";
  std::vector<std::string> argv = options.prefix;
  if (options.use_mpirun) {
    argv.insert(argv.end(), {COIL_MPIEXEC_PATH, "-np", std::to_string(options.ranks),
                             "--oversubscribe", "--allow-run-as-root", "--mca",
                             "odls_base_sigkill_timeout", std::to_string(options.mpi_kill_timeout)});
  }
  argv.insert(argv.end(), {COIL_SERVE_PATH, "--model", model_dir, "--host", "127.0.0.1", "--port",
                           "0", "--metrics-port", "0", "--port_file", port_file, "--threads", "1"});
  argv.insert(argv.end(), options.flags.begin(), options.flags.end());
  absl::StatusOr<pid_t> pid = Spawn(argv, server->log_path_);
  if (!pid.ok()) return pid.status();
  server->pid_ = *pid;
  server->under_mpirun_ = options.use_mpirun;

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120 * TimeScale());
  std::string port;
  while (port.empty()) {
    if (std::optional<int> code = WaitPid(server->pid_, std::chrono::milliseconds(50))) {
      server->reaped_ = true;
      return absl::InternalError(absl::StrCat("coil-serve exited with ", *code, " before serving:\n",
                                              server->LogTail()));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "coil-serve did not listen within ", 120 * TimeScale(), " s:\n", server->LogTail()));
    }
    std::ifstream in(port_file);
    std::string metrics_port, http_port;
    if (in && std::getline(in, port) && std::getline(in, metrics_port)) {
      server->metrics_port_ = std::stoi(metrics_port);
      if (std::getline(in, http_port)) server->http_port_ = std::stoi(http_port);
    }
  }
  server->target_ = absl::StrCat("127.0.0.1:", port);
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Connect(server->target_, std::chrono::seconds(10 * TimeScale()));
  if (!client.ok()) return client.status();
  server->client_ = std::move(client).value();
  absl::StatusOr<bool> serving = server->client_->Health();
  if (!serving.ok()) return serving.status();
  if (!*serving) return absl::InternalError("coil-serve listens but is not SERVING");
  return server;
}

namespace {

struct Child {
  pid_t pid = 0;
  int rank = -1;  // OMPI_COMM_WORLD_RANK, -1 when not an MPI rank
  bool zombie = false;
  int wait_status = -1;  // a zombie's status as waitpid would report it (stat field 52)
};

// The children of `parent` (the processes mpirun started), with their MPI rank.
std::vector<Child> ChildrenOf(pid_t parent) {
  std::vector<Child> children;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    const std::string name = entry.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat_file(entry.path() / "stat");
    std::string stat;
    std::getline(stat_file, stat);
    // "pid (comm) state ppid ...": comm may hold spaces, so parse after the last ')'.
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 2));
    std::string state;
    pid_t ppid = 0;
    fields >> state >> ppid;
    if (ppid != parent) continue;
    Child child;
    child.pid = static_cast<pid_t>(std::stol(name));
    child.zombie = state == "Z" || state == "X";
    if (child.zombie) {
      // Fields 5 to 52 follow ppid (field 4); the last is the exit code (Linux 3.5 on).
      std::string field;
      for (int index = 5; index <= 52 && (fields >> field); ++index) {
        if (index == 52) child.wait_status = std::atoi(field.c_str());
      }
    }
    const std::string environment = ReadFile((entry.path() / "environ").string());
    const std::string key = "OMPI_COMM_WORLD_RANK=";
    const size_t at = environment.find(key);
    if (at != std::string::npos && (at == 0 || environment[at - 1] == '\0')) {
      child.rank = std::atoi(environment.c_str() + at + key.size());
    }
    children.push_back(child);
  }
  return children;
}

}  // namespace

ServerProcess::~ServerProcess() {
  client_.reset();
  if (pid_ <= 0 || reaped_) return;
  Signal(SIGTERM);
  if (!WaitPid(pid_, std::chrono::seconds(30 * TimeScale())).has_value()) Kill();
}

void ServerProcess::Kill() {
  if (pid_ <= 0 || reaped_) return;
  // Its ranks first (a stopped one continued), so that none outlives mpirun.
  for (const Child& child : ChildrenOf(pid_)) {
    kill(child.pid, SIGCONT);
    kill(child.pid, SIGKILL);
  }
  kill(pid_, SIGKILL);
  if (WaitPid(pid_, std::chrono::seconds(10)).has_value()) reaped_ = true;
}

std::optional<pid_t> ServerProcess::RankPid(int rank) const {
  if (!under_mpirun_ || reaped_) return std::nullopt;
  for (const Child& child : ChildrenOf(pid_)) {
    if (child.rank == rank && !child.zombie) return child.pid;
  }
  return std::nullopt;
}

std::optional<int> ServerProcess::RankWaitStatus(int rank) const {
  if (!under_mpirun_ || reaped_) return std::nullopt;
  for (const Child& child : ChildrenOf(pid_)) {
    if (child.rank == rank && child.zombie && child.wait_status >= 0) return child.wait_status;
  }
  return std::nullopt;
}

bool ServerProcess::AnyRankRuns() const {
  if (reaped_) return false;
  if (!under_mpirun_) return true;
  for (const Child& child : ChildrenOf(pid_)) {
    if (!child.zombie) return true;
  }
  return false;
}

void ServerProcess::SignalRank(int rank, int signal) {
  if (std::optional<pid_t> pid = RankPid(rank)) kill(*pid, signal);
}

void ServerProcess::Signal(int signal) {
  if (under_mpirun_) {
    if (std::optional<pid_t> rank0 = RankPid(0)) {
      kill(*rank0, signal);
      return;
    }
  }
  kill(pid_, signal);
}

std::optional<int> ServerProcess::Wait(std::chrono::seconds timeout) {
  std::optional<int> code = WaitPid(pid_, timeout);
  if (code.has_value()) reaped_ = true;
  return code;
}

absl::StatusOr<std::string> ServerProcess::FetchMetrics() const {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(metrics_port_));
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to metrics port ", metrics_port_));
  }
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::InternalError("write failed");
  }
  std::string response;
  char buffer[4096];
  for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) > 0;) response.append(buffer, static_cast<size_t>(n));
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.", 0) != 0 || body == std::string::npos ||
      response.find(" 200 ") == std::string::npos) {
    return absl::InternalError(absl::StrCat("unexpected metrics response: ", response.substr(0, 200)));
  }
  return response.substr(body + 4);
}

std::string ServerProcess::Log() const { return ReadFile(log_path_); }

std::string ServerProcess::LogTail() const {
  const std::string log = ReadFile(log_path_);
  return log.size() > 4000 ? log.substr(log.size() - 4000) : log;
}

}  // namespace coil::testing
