// PollingBackoff: the waiting schedule between polls of a request that is not complete
// yet. It spins for a few polls (a reply that is already on its way costs no sleep), then
// sleeps, doubling from first_sleep to max_sleep, so a rank idle for seconds uses close
// to no CPU (2 cores here run several ranks) and wakes within max_sleep of its message.
#ifndef COIL_WORKERS_COMM_POLLING_BACKOFF_H_
#define COIL_WORKERS_COMM_POLLING_BACKOFF_H_

#include <chrono>
#include <cstdint>

namespace coil::comm {

struct BackoffOptions {
  // Polls answered with "not yet" before the first sleep.
  int spin_polls = 64;
  std::chrono::microseconds first_sleep{50};
  // Upper bound of one sleep, hence of the extra latency of a message to an idle rank.
  // Zero: never sleep (busy-poll), for measurements only.
  std::chrono::microseconds max_sleep{2000};
};

// What one wait cost, for tests and measurements.
struct WaitStats {
  int64_t polls = 0;   // unsuccessful polls
  int64_t sleeps = 0;  // sleeps taken
};

class PollingBackoff {
 public:
  explicit PollingBackoff(const BackoffOptions& options) : options_(options) {}

  // Called after a poll that found nothing: returns at once while spinning, else sleeps
  // NextPause() and doubles the next one up to max_sleep.
  void Pause();
  // The sleep the next Pause() takes (zero while still spinning or when busy-polling).
  std::chrono::microseconds NextPause() const;
  // Back to spinning, for the next request.
  void Reset();

  const WaitStats& stats() const { return stats_; }

 private:
  BackoffOptions options_;
  std::chrono::microseconds sleep_{0};  // zero until the spin phase is over
  WaitStats stats_;
};

}  // namespace coil::comm

#endif  // COIL_WORKERS_COMM_POLLING_BACKOFF_H_
