// Streams the text of generated tokens as they arrive. A token's text may not be final
// when it arrives: it can end in the middle of a UTF-8 sequence (an emoji is often three or
// four byte tokens), belong to a run of byte-fallback tokens, or begin with a space a
// decoder strips at the start of the text. The decoder's stream (decoder.h) holds back
// exactly what a later token could change. Invariants: every piece returned is valid UTF-8,
// and the concatenation of all pieces (Finish included) equals Tokenizer::Decode of the same
// ids with the same skip_special_tokens.
#ifndef COIL_ENGINE_TOKENIZER_INCREMENTAL_DETOKENIZER_H_
#define COIL_ENGINE_TOKENIZER_INCREMENTAL_DETOKENIZER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/tokenizer/decoder.h"
#include "engine/tokenizer/tokenizer.h"

namespace coil::tokenizer {

class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = true);

  // Adds one token; returns the text that became final (often empty mid-sequence).
  // INVALID_ARGUMENT for an id that names no token (nothing is added then).
  absl::StatusOr<std::string> Push(int32_t id);

  // Ends the stream: returns what was held back (a cut UTF-8 sequence as U+FFFD). The
  // object can be reused for a new stream afterwards.
  std::string Finish();

  // Bytes held back now (for a byte-level tokenizer, a prefix of an unfinished UTF-8
  // sequence: at most 3).
  size_t pending_bytes() const { return stream_.held_bytes(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  Decoder::Stream stream_;
};

}  // namespace coil::tokenizer

#endif  // COIL_ENGINE_TOKENIZER_INCREMENTAL_DETOKENIZER_H_
