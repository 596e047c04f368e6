#include "workers/comm/polling_backoff.h"

#include <algorithm>
#include <thread>

namespace coil::comm {

std::chrono::microseconds PollingBackoff::NextPause() const {
  if (options_.max_sleep.count() <= 0 || stats_.polls < options_.spin_polls) {
    return std::chrono::microseconds(0);
  }
  return sleep_.count() == 0 ? std::min(options_.first_sleep, options_.max_sleep) : sleep_;
}

void PollingBackoff::Pause() {
  const std::chrono::microseconds pause = NextPause();
  ++stats_.polls;
  if (pause.count() == 0) return;
  std::this_thread::sleep_for(pause);
  ++stats_.sleeps;
  sleep_ = std::min(pause * 2, options_.max_sleep);
}

void PollingBackoff::Reset() {
  sleep_ = std::chrono::microseconds(0);
  stats_ = WaitStats();
}

}  // namespace coil::comm
