// The decoders of tokenizer.json (ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace,
// and Sequences of them), as a stream: token strings go in one at a time, text comes out as
// soon as no later token can change it. The reference's decoders turn the whole list of
// token strings into text at once; each step here does the same to the list, but holds back
// only what a later token could still change: an unfinished UTF-8 sequence (ByteLevel), a
// run of byte tokens (ByteFallback: the run is text only if all of it is valid UTF-8),
// trailing characters a Strip may remove, the text of a token not yet complete. So decoding
// a list at once and streaming it give the same text by construction: Tokenizer::Decode is
// the stream run over the whole list.
//
// Steps that act on each token alone (Replace, Strip) at the head of the chain are applied
// to every token once, when the tokenizer is loaded.
#ifndef COIL_ENGINE_TOKENIZER_DECODER_H_
#define COIL_ENGINE_TOKENIZER_DECODER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/pattern.h"
#include "engine/tokenizer/tokenizer_json.h"

namespace coil::tokenizer {

class Decoder {
 public:
  // `tokens[id]` is the string the reference's decoders get for id (its vocabulary entry,
  // or an added token's content); `has_decoder` false joins the token strings with spaces,
  // as the reference does without a decoder.
  static absl::StatusOr<Decoder> Create(bool has_decoder, const std::vector<DecoderStep>& steps,
                                        const std::vector<std::string>& tokens);

  // The state of one decoding.
  class Stream {
   public:
    // Adds token `id` (one the tokens given to Create have); appends the text that became
    // final to `out`.
    void Push(int32_t id, std::string* out);
    // Ends the stream: appends everything held back. The stream can then start again.
    void Finish(std::string* out);
    // Bytes held back now.
    size_t held_bytes() const;

   private:
    friend class Decoder;
    struct StepState {
      std::string buffer;              // text of the current element
      std::string pending;             // ByteLevel: bytes of an unfinished sequence; ByteFallback:
                                       // the current run of byte tokens
      uint32_t count = 0;              // Strip: leading characters stripped; Metaspace: element
      uint32_t held = 0;               // Strip: trailing characters held back
      bool front_done = false;         // Strip
      bool poisoned = false;           // ByteFallback: the current run is already invalid
      bool pending_separator = false;  // the no-decoder join
    };
    explicit Stream(const Decoder* decoder);
    void Text(size_t step, absl::string_view text, std::string* out);
    void End(size_t step, std::string* out);
    void Close(size_t step, std::string* out);
    void ByteToken(size_t step, unsigned char byte, std::string* out);
    void FlushRun(size_t step, std::string* out);
    void EmitBytes(size_t step, absl::string_view bytes, bool final, std::string* out);

    const Decoder* decoder_;
    std::vector<StepState> states_;
  };

  Stream NewStream() const { return Stream(this); }

 private:
  enum class Kind : uint8_t {
    kByteLevel,
    kMetaspace,
    kByteFallback,
    kFuse,
    kStrip,
    kReplace,
    kJoin,
  };
  struct Step {
    Kind kind;
    std::string text;          // Metaspace: the replacement; Strip: the character; Replace: content
    bool strip_first = false;  // Metaspace: the first token loses its replacement characters
    uint32_t start = 0;
    uint32_t stop = 0;
    Pattern pattern;
  };
  // Applies a per-token step (Replace, Strip) to a whole token string.
  static std::string ApplyToToken(const Step& step, absl::string_view token);

  std::vector<Step> steps_;  // the steps run per stream
  // Each token's string after the per-token steps at the head of the chain.
  std::vector<std::string> token_text_;
  // When the first streamed step is ByteLevel: each token's bytes. When it is ByteFallback:
  // each token's byte (-1: not a byte token).
  std::vector<std::string> token_bytes_;
  std::vector<int16_t> token_byte_;
};

}  // namespace coil::tokenizer

#endif  // COIL_ENGINE_TOKENIZER_DECODER_H_
