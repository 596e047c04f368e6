// The normalizers of tokenizer.json (NFC, NFD, NFKC, NFKD, Prepend, Replace, Strip,
// Lowercase, and Sequences of them), applied in order to each stretch of text between
// added tokens, as the reference applies them. Besides the text, it follows how many of the
// leading characters stand for the first character of the request (the reference's
// alignments do this), which Metaspace's prepend_scheme "first" needs.
#ifndef COIL_ENGINE_TOKENIZER_NORMALIZER_H_
#define COIL_ENGINE_TOKENIZER_NORMALIZER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/pattern.h"
#include "engine/tokenizer/tokenizer_json.h"
#include "engine/tokenizer/unicode.h"

namespace coil::tokenizer {

// The number of code points in `text` (valid UTF-8).
int32_t CodePointCount(absl::string_view text);

class Normalizer {
 public:
  static absl::StatusOr<Normalizer> Create(const std::vector<NormalizerStep>& steps);

  bool empty() const { return steps_.empty(); }

  // Normalizes `text` (valid UTF-8) in place. `head` (in and out) counts the characters at
  // the start of `text` that stand for the first character of the request's text: 1 for a
  // stretch that starts the request, 0 for any other; a normalizer can change it (Prepend
  // adds its characters to it, a left Strip removes them).
  absl::Status Apply(std::string* text, int32_t* head) const;

 private:
  struct Step {
    NormalizerStep::Kind kind;
    std::string text;
    Pattern pattern;
    bool left = false;
    bool right = false;
  };
  std::vector<Step> steps_;
};

}  // namespace coil::tokenizer

#endif  // COIL_ENGINE_TOKENIZER_NORMALIZER_H_
