// Finds stop strings in streamed text across token boundaries. Text that could still be
// the beginning of a stop string is held back until it is decided, so a stop string never
// leaks into the output, even in part.
#ifndef COIL_ENGINE_STOP_MATCHER_H_
#define COIL_ENGINE_STOP_MATCHER_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace coil {

class StopMatcher {
 public:
  // Empty strings in `stops` are ignored.
  explicit StopMatcher(std::vector<std::string> stops);

  struct Result {
    std::string emit;      // text safe to send now
    bool stopped = false;  // a stop string was found; emit ends just before it
    std::string matched;   // the stop string found
  };

  // Feeds newly decoded text (whole UTF-8 characters). After a stop, further calls emit
  // nothing.
  Result Push(absl::string_view text);

  // Generation ended without a stop: the held-back text is final.
  std::string Flush();

  // Bytes currently held back.
  size_t held() const { return pending_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace coil

#endif  // COIL_ENGINE_STOP_MATCHER_H_
