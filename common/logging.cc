#include "common/logging.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

namespace coil {
namespace {

LogSeverity SeverityFromEnvironment() {
  const char* value = std::getenv("COIL_LOG_LEVEL");
  if (value == nullptr) return LogSeverity::kInfo;
  if (std::strcmp(value, "debug") == 0) return LogSeverity::kDebug;
  if (std::strcmp(value, "warning") == 0) return LogSeverity::kWarning;
  if (std::strcmp(value, "error") == 0) return LogSeverity::kError;
  return LogSeverity::kInfo;
}

// Process-wide logger settings: set once at start-up, read by every thread.
struct LogSettings {
  std::atomic<int> min_severity{static_cast<int>(SeverityFromEnvironment())};
  std::mutex prefix_mutex;
  std::string prefix;
};

LogSettings& Settings() {
  static LogSettings* settings = new LogSettings();  // never destroyed: usable at exit
  return *settings;
}

char SeverityLetter(LogSeverity severity) {
  switch (severity) {
    case LogSeverity::kDebug: return 'D';
    case LogSeverity::kInfo: return 'I';
    case LogSeverity::kWarning: return 'W';
    case LogSeverity::kError: return 'E';
    case LogSeverity::kFatal: return 'F';
  }
  return '?';
}

}  // namespace

void SetMinLogSeverity(LogSeverity severity) {
  Settings().min_severity.store(static_cast<int>(severity));
}

LogSeverity MinLogSeverity() {
  return static_cast<LogSeverity>(Settings().min_severity.load(std::memory_order_relaxed));
}

bool LogRateLimiter::Allow(int64_t* suppressed) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (any_ && now - last_ < interval_) {
    ++suppressed_;
    return false;
  }
  any_ = true;
  last_ = now;
  *suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

void SetLogPrefix(std::string prefix) {
  std::lock_guard<std::mutex> lock(Settings().prefix_mutex);
  Settings().prefix = std::move(prefix);
}

std::string FormatLogLine(LogSeverity severity, std::string_view file, int line,
                          std::string_view prefix, std::string_view message) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const int millis = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() %
      1000);
  std::tm local{};
  localtime_r(&seconds, &local);
  char time_text[32];
  std::snprintf(time_text, sizeof(time_text), "%02d:%02d:%02d.%03d", local.tm_hour, local.tm_min,
                local.tm_sec, millis);
  const size_t slash = file.rfind('/');
  if (slash != std::string_view::npos) file.remove_prefix(slash + 1);

  std::string out;
  out.reserve(message.size() + 64);
  out += SeverityLetter(severity);
  out += ' ';
  out += time_text;
  out += ' ';
  if (!prefix.empty()) {
    out += prefix;
    out += ' ';
  }
  out += file;
  out += ':';
  out += std::to_string(line);
  out += "] ";
  out += message;
  out += '\n';
  return out;
}

LogMessage::LogMessage(LogSeverity severity, const char* file, int line)
    : severity_(severity), file_(file), line_(line) {}

LogMessage::~LogMessage() {
  std::string prefix;
  {
    std::lock_guard<std::mutex> lock(Settings().prefix_mutex);
    prefix = Settings().prefix;
  }
  const std::string text = FormatLogLine(severity_, file_, line_, prefix, stream_.str());
  // One write(2) per line keeps lines whole across threads and processes.
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(STDERR_FILENO, text.data() + written, text.size() - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  if (severity_ == LogSeverity::kFatal) std::abort();
}

}  // namespace coil
