#include "engine/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace coil {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& stop : stops) {
    if (!stop.empty()) stops_.push_back(std::move(stop));
  }
}

StopMatcher::Result StopMatcher::Push(absl::string_view text) {
  Result result;
  if (stopped_) return result;
  pending_.append(text.data(), text.size());

  // The earliest complete stop string wins (the longest one at that position).
  size_t best_position = std::string::npos;
  const std::string* best_stop = nullptr;
  for (const std::string& stop : stops_) {
    const size_t position = pending_.find(stop);
    if (position == std::string::npos) continue;
    if (position < best_position ||
        (position == best_position && stop.size() > best_stop->size())) {
      best_position = position;
      best_stop = &stop;
    }
  }
  if (best_stop != nullptr) {
    result.emit = pending_.substr(0, best_position);
    result.stopped = true;
    result.matched = *best_stop;
    pending_.clear();
    stopped_ = true;
    return result;
  }

  // Hold back the longest suffix that is a proper prefix of some stop string. A stop
  // string is valid UTF-8, so such a suffix starts on a character boundary.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    const size_t longest = std::min(stop.size() - 1, pending_.size());
    for (size_t length = longest; length > hold; --length) {
      if (absl::string_view(pending_).substr(pending_.size() - length) ==
          absl::string_view(stop).substr(0, length)) {
        hold = length;
        break;
      }
    }
  }
  result.emit = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return result;
}

std::string StopMatcher::Flush() {
  if (stopped_) return {};
  return std::exchange(pending_, {});
}

}  // namespace coil
