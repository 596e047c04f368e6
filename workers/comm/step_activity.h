// StepActivity: what a rank's step thread is doing right now (idle between plans, computing
// step N since some instant, or waiting in a collective), written by that thread and read by
// the rank monitor's thread, so that a rank stuck computing one step (hung in a kernel) can
// be told from one that waits in a collective for a slower or dead peer. Writes are two
// relaxed-or-release atomic stores and a steady-clock read; nothing locks.
// Invariant: a reader that sees the state "computing" sees a `since` at least as recent as
// the transition that set it, so the time it works out is never longer than the truth.
#ifndef COIL_WORKERS_COMM_STEP_ACTIVITY_H_
#define COIL_WORKERS_COMM_STEP_ACTIVITY_H_

#include <atomic>
#include <chrono>
#include <cstdint>

namespace coil::comm {

class StepActivity {
 public:
  using Clock = std::chrono::steady_clock;

  enum class State : uint8_t { kIdle, kComputing, kInCollective };

  struct Snapshot {
    State state = State::kIdle;
    uint64_t step_id = 0;
    // While computing: when this stretch of computing began (the step's start, or the end
    // of its last collective).
    Clock::time_point since;
  };

  // The step thread.
  void BeginStep(uint64_t step_id) {
    step_id_.store(step_id, std::memory_order_relaxed);
    SetState(State::kComputing);
  }
  void EndStep() { SetState(State::kIdle); }
  // Around every collective call; outside a step they change nothing.
  void EnterCollective() {
    if (state_.load(std::memory_order_relaxed) == State::kComputing) {
      state_.store(State::kInCollective, std::memory_order_release);
    }
  }
  void LeaveCollective() {
    if (state_.load(std::memory_order_relaxed) == State::kInCollective) {
      SetState(State::kComputing);
    }
  }

  // Any thread.
  Snapshot Read() const {
    Snapshot snapshot;
    snapshot.state = state_.load(std::memory_order_acquire);
    snapshot.step_id = step_id_.load(std::memory_order_relaxed);
    snapshot.since = Clock::time_point(Clock::duration(since_.load(std::memory_order_relaxed)));
    return snapshot;
  }

 private:
  void SetState(State state) {
    since_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
    state_.store(state, std::memory_order_release);
  }

  std::atomic<State> state_{State::kIdle};
  std::atomic<uint64_t> step_id_{0};
  std::atomic<Clock::rep> since_{0};
};

// Marks one collective call on `activity` (null: nothing).
class ScopedCollective {
 public:
  explicit ScopedCollective(StepActivity* activity) : activity_(activity) {
    if (activity_ != nullptr) activity_->EnterCollective();
  }
  ~ScopedCollective() {
    if (activity_ != nullptr) activity_->LeaveCollective();
  }
  ScopedCollective(const ScopedCollective&) = delete;
  ScopedCollective& operator=(const ScopedCollective&) = delete;

 private:
  StepActivity* activity_;
};

}  // namespace coil::comm

#endif  // COIL_WORKERS_COMM_STEP_ACTIVITY_H_
