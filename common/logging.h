// One logging style for every coil program. Abseil 20220623 has no absl/log, so this is a
// small stream logger: `COIL_LOG(INFO) << "loaded " << n << " tensors";` writes one line
// "I 12:03:04.123 file.cc:42] loaded 7 tensors" to stderr, atomically (one write per line),
// so lines from several threads or MPI ranks never interleave within a line.
#ifndef COIL_COMMON_LOGGING_H_
#define COIL_COMMON_LOGGING_H_

#include <chrono>
#include <cstdint>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>

namespace coil {

enum class LogSeverity { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };

// Messages below this severity are dropped. Default kInfo; COIL_LOG_LEVEL=debug|info|
// warning|error in the environment overrides it at start-up.
void SetMinLogSeverity(LogSeverity severity);
LogSeverity MinLogSeverity();

// A prefix added to every line, e.g. "rank 1" for worker processes.
void SetLogPrefix(std::string prefix);

// Formats one line. Exposed for tests.
std::string FormatLogLine(LogSeverity severity, std::string_view file, int line,
                          std::string_view prefix, std::string_view message);

class LogMessage {
 public:
  LogMessage(LogSeverity severity, const char* file, int line);
  ~LogMessage();  // writes the line; kFatal aborts after writing
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogSeverity severity_;
  const char* file_;
  int line_;
  std::ostringstream stream_;
};

// Lets at most one event through per `interval` and counts the others, so that a log line
// a client can trigger (a malformed request, a refused connection) cannot flood the log.
// Thread-safe.
class LogRateLimiter {
 public:
  explicit LogRateLimiter(std::chrono::milliseconds interval) : interval_(interval) {}
  // True when this event may be logged; then *suppressed is how many were not since the
  // last one that was.
  bool Allow(int64_t* suppressed);

 private:
  const std::chrono::milliseconds interval_;
  std::mutex mu_;
  bool any_ = false;
  std::chrono::steady_clock::time_point last_;
  int64_t suppressed_ = 0;
};

// Swallows the stream when the severity is filtered out, without evaluating arguments.
struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace coil

#define COIL_LOG_SEVERITY_DEBUG ::coil::LogSeverity::kDebug
#define COIL_LOG_SEVERITY_INFO ::coil::LogSeverity::kInfo
#define COIL_LOG_SEVERITY_WARNING ::coil::LogSeverity::kWarning
#define COIL_LOG_SEVERITY_ERROR ::coil::LogSeverity::kError
#define COIL_LOG_SEVERITY_FATAL ::coil::LogSeverity::kFatal

#define COIL_LOG(severity)                                             \
  (COIL_LOG_SEVERITY_##severity < ::coil::MinLogSeverity())            \
      ? (void)0                                                        \
      : ::coil::LogVoidify() &                                         \
            ::coil::LogMessage(COIL_LOG_SEVERITY_##severity, __FILE__, __LINE__).stream()

// An invariant that, if broken, means a bug in coil (never bad user input: that gets a
// Status). Logs the condition and aborts.
#define COIL_CHECK(condition)                                              \
  (condition) ? (void)0                                                    \
              : ::coil::LogVoidify() &                                     \
                    ::coil::LogMessage(::coil::LogSeverity::kFatal, __FILE__, __LINE__) \
                            .stream()                                      \
                        << "check failed: " #condition " "

#endif  // COIL_COMMON_LOGGING_H_
