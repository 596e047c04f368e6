// Per-op timing (Backend::SetOpTiming, model_bench --profile-ops): where a step's time goes,
// op by op. An OpClock marks points in the order a backend does its work (the wall clock
// for a backend whose ops return when done; events on the stream for one that only
// enqueues them); an OpTimer pairs marks into named intervals and sums them per name once
// the work is done. Timing never changes what an op computes.
#ifndef COIL_KERNELS_OP_TIMING_H_
#define COIL_KERNELS_OP_TIMING_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace coil {

// The total of one name's intervals.
struct OpTime {
  std::string op;
  int64_t calls = 0;
  double seconds = 0.0;
};

class OpClock {
 public:
  virtual ~OpClock() = default;
  // A point in the order of the backend's work, placed after everything issued so far.
  virtual absl::StatusOr<int64_t> Mark() = 0;
  // Seconds from mark `from` to mark `to`; waits until the work before `to` is done.
  virtual absl::StatusOr<double> Between(int64_t from, int64_t to) = 0;
  // Forgets every mark; the ids are reused.
  virtual void Clear() = 0;
};

// Marks are the wall clock when they are taken: right for a backend whose ops return when
// their work is done (the CPU).
class HostOpClock final : public OpClock {
 public:
  absl::StatusOr<int64_t> Mark() override;
  absl::StatusOr<double> Between(int64_t from, int64_t to) override;
  void Clear() override { marks_.clear(); }

 private:
  std::vector<std::chrono::steady_clock::time_point> marks_;
};

class OpTimer {
 public:
  explicit OpTimer(std::unique_ptr<OpClock> clock) : clock_(std::move(clock)) {}

  // The mark an interval starts at.
  absl::StatusOr<int64_t> Begin() { return clock_->Mark(); }
  // Ends the interval that started at `begin` now, under `name`. Intervals may nest (an
  // op's phases inside the op). Every mark is kept until Take: take the times after each
  // measured stretch of work.
  absl::Status End(std::string name, int64_t begin);
  // Every interval so far, summed per name, slowest first; waits for the work issued so
  // far, then forgets the marks and starts over. Call it with no interval open.
  absl::StatusOr<std::vector<OpTime>> Take();

 private:
  struct Interval {
    std::string name;
    int64_t from, to;
  };
  std::unique_ptr<OpClock> clock_;
  std::vector<Interval> pending_;
};

// One timed stretch of work as a markdown table: `title` and the wall time per step, then
// per op its calls and microseconds per step and its share of `wall_seconds` (an op's
// phases, named "Op: phase", are inside its own time and indented), then the ops together.
std::string FormatOpTimes(const std::string& title, const std::vector<OpTime>& times, int steps,
                          double wall_seconds);

}  // namespace coil

#endif  // COIL_KERNELS_OP_TIMING_H_
