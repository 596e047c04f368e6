// A stand-in for the program the container entrypoint launches, used to test the
// entrypoint's signal handling with real processes: it writes its arguments, waits for
// SIGTERM or SIGINT, records which one came, "drains" for a set time, and exits.
//
// Environment: RECORDER_DIR (required) where it writes argv.<pid>, then ready.<pid> once it
// waits, signal.<pid> ("TERM" or "INT") and drained.<pid>; RECORDER_DRAIN_MS (0) how long
// to drain; RECORDER_EXIT_CODE (0) the status after draining; RECORDER_WAIT_MS (30000) how
// long to wait for a signal before exiting with status 3 (so a broken test cannot hang).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>

namespace {

long EnvOr(const char* name, long fallback) {
  const char* value = std::getenv(name);
  return value == nullptr ? fallback : std::strtol(value, nullptr, 10);
}

void WriteFile(const std::string& path, const std::string& text) {
  // Write then rename, so a reader polling for the file never sees it half written.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << text;
  }
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const char* dir = std::getenv("RECORDER_DIR");
  if (dir == nullptr) return 2;
  char suffix[32];  // ".<pid>" (snprintf: GCC 12's -Wrestrict misfires on "." + to_string)
  std::snprintf(suffix, sizeof(suffix), ".%d", static_cast<int>(getpid()));

  std::string args;
  for (int i = 1; i < argc; ++i) args += std::string(argv[i]) + "\n";
  WriteFile(std::string(dir) + "/argv" + suffix, args);

  // Default dispositions first: a background job of a non-interactive shell starts with
  // SIGINT ignored. Then block both and take them synchronously.
  signal(SIGTERM, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  WriteFile(std::string(dir) + "/ready" + suffix, "");

  const long wait_ms = EnvOr("RECORDER_WAIT_MS", 30000);
  timespec timeout{wait_ms / 1000, (wait_ms % 1000) * 1000000};
  const int sig = sigtimedwait(&set, nullptr, &timeout);
  if (sig < 0) return 3;
  WriteFile(std::string(dir) + "/signal" + suffix, sig == SIGTERM ? "TERM" : "INT");

  std::this_thread::sleep_for(std::chrono::milliseconds(EnvOr("RECORDER_DRAIN_MS", 0)));
  WriteFile(std::string(dir) + "/drained" + suffix, "");
  return static_cast<int>(EnvOr("RECORDER_EXIT_CODE", 0));
}
