#include "kernels/op_timing.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace coil {

absl::StatusOr<int64_t> HostOpClock::Mark() {
  marks_.push_back(std::chrono::steady_clock::now());
  return static_cast<int64_t>(marks_.size()) - 1;
}

absl::StatusOr<double> HostOpClock::Between(int64_t from, int64_t to) {
  const int64_t count = static_cast<int64_t>(marks_.size());
  if (from < 0 || to < 0 || from >= count || to >= count) {
    return absl::OutOfRangeError(
        absl::StrCat("marks ", from, " and ", to, " of ", count, "; take both before asking"));
  }
  return std::chrono::duration<double>(marks_[to] - marks_[from]).count();
}

absl::Status OpTimer::End(std::string name, int64_t begin) {
  COIL_ASSIGN_OR_RETURN(const int64_t end, clock_->Mark());
  pending_.push_back({std::move(name), begin, end});
  return absl::OkStatus();
}

absl::StatusOr<std::vector<OpTime>> OpTimer::Take() {
  // Whatever happens below, the marks are forgotten: a failed take is not retried.
  std::vector<Interval> pending = std::move(pending_);
  pending_.clear();
  struct ClearOnExit {
    OpClock* clock;
    ~ClearOnExit() { clock->Clear(); }
  } clear{clock_.get()};
  std::vector<OpTime> out;  // in order of first appearance, then sorted
  for (const Interval& interval : pending) {
    COIL_ASSIGN_OR_RETURN(const double seconds, clock_->Between(interval.from, interval.to));
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const OpTime& t) { return t.op == interval.name; });
    if (it == out.end()) {
      out.push_back({interval.name, 0, 0.0});
      it = out.end() - 1;
    }
    ++it->calls;
    it->seconds += seconds;
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
  return out;
}

std::string FormatOpTimes(const std::string& title, const std::vector<OpTime>& times, int steps,
                          double wall_seconds) {
  std::string out =
      absl::StrCat("\n", title, ": ", absl::StrFormat("%.1f", wall_seconds / steps * 1e6),
                   " us per step (wall)\n| op | calls/step | us/step | share |\n"
                   "|---|---:|---:|---:|\n");
  double total = 0.0;
  for (const OpTime& t : times) {
    const bool phase = t.op.find(": ") != std::string::npos;
    if (!phase) total += t.seconds;
    absl::StrAppend(&out, "| ", phase ? "&nbsp;&nbsp;" : "", t.op, " | ",
                    absl::StrFormat("%.2f", static_cast<double>(t.calls) / steps), " | ",
                    absl::StrFormat("%.1f", t.seconds / steps * 1e6), " | ",
                    absl::StrFormat("%.1f%%", 100.0 * t.seconds / wall_seconds), " |\n");
  }
  absl::StrAppend(&out, "| (ops together) | | ", absl::StrFormat("%.1f", total / steps * 1e6),
                  " | ", absl::StrFormat("%.1f%%", 100.0 * total / wall_seconds), " |\n");
  return out;
}

}  // namespace coil
