// What the tokenizer's fuzz targets do with one input, shared by the libFuzzer entry points
// (fuzz_tokenizer_json.cc, fuzz_tokenizer_regex.cc) and the corpus replay test of the normal
// build (tests/unit/tokenizer/fuzz_corpus_test.cc). Apart from fuzz_bodies.h because these
// need the tokenizer library (and ICU).
#ifndef COIL_TESTS_FUZZ_FUZZ_TOKENIZER_BODIES_H_
#define COIL_TESTS_FUZZ_FUZZ_TOKENIZER_BODIES_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/tokenizer/incremental_detokenizer.h"
#include "engine/tokenizer/regex.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace coil::fuzz {

// A text holding a NUL between two characters (the literal's size keeps it).
inline constexpr char kNulText[] = "\xe2\x96\x81x\xe2\x96\x81\xe2\x96\x81 a\0b";

// Texts every accepted tokenizer encodes: ASCII, spaces, digits, punctuation, accents,
// several scripts, emoji, control characters, and the added tokens of the common families.
inline constexpr absl::string_view kTokenizerTexts[] = {
    "",
    "Hello world",
    "  two  spaces\t\ttabs\r\nlines\n\n",
    "I'm 12345 cats!! DON'T you'll",
    "caf\xc3\xa9 \xce\xa3\xce\x8a\xce\xa3 Stra\xc3\x9f"
    "e \xef\xac\x81 \xc2\xbd",
    "\xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd a\xcc\x81",
    "<|endoftext|> x <s>y</s> [MASK] <unk>",
    absl::string_view(kNulText, sizeof(kNulText) - 1),
};

// Checks what an accepted tokenizer gives for `text`: ids it names, a decode that succeeds
// (plainly and skipping special tokens), and a streaming decode, token by token, whose
// pieces are valid UTF-8 and join to exactly the plain decode (incremental_detokenizer.h).
inline void CheckEncodeDecode(const tokenizer::Tokenizer& tok, absl::string_view text) {
  for (bool special : {false, true}) {
    absl::StatusOr<std::vector<int32_t>> ids = tok.Encode(text, special);
    if (!ids.ok()) continue;  // a normalizer may refuse a text; the status says why
    for (int32_t id : *ids) {
      if (!tok.CheckId(id).ok()) std::abort();  // Encode gave an id that names no token
    }
    absl::StatusOr<std::string> decoded = tok.Decode(*ids, false);
    if (!decoded.ok() || !tok.Decode(*ids, true).ok()) std::abort();
    tokenizer::IncrementalDetokenizer stream(tok, /*skip_special_tokens=*/false);
    std::string joined;
    for (int32_t id : *ids) {
      absl::StatusOr<std::string> piece = stream.Push(id);
      if (!piece.ok() || !tokenizer::IsValidUtf8(*piece)) std::abort();
      joined += *piece;
    }
    joined += stream.Finish();
    if (joined != *decoded) std::abort();  // the stream and the plain decode disagree
  }
}

// tokenizer.json: the loader (tokenizer_json.cc) and everything it builds (normalizers,
// pre-tokenizer with its regular expressions, BPE, decoder, added tokens, post-processor).
// An accepted file encodes the texts above and the input itself, and decodes every id below
// 512 alone and all together.
inline void FuzzTokenizerJson(const uint8_t* data, size_t size) {
  absl::string_view json(reinterpret_cast<const char*>(data), size);
  tokenizer::TokenizerOptions options;
  options.word_cache_entries = 64;
  auto tok = tokenizer::Tokenizer::FromJson(json, options);
  if (!tok.ok()) return;
  for (absl::string_view text : kTokenizerTexts) CheckEncodeDecode(**tok, text);
  if (tokenizer::IsValidUtf8(json)) CheckEncodeDecode(**tok, json.substr(0, 2048));
  std::vector<int32_t> all;
  for (int32_t id = 0; id < (*tok)->vocab_size() && id < 512; ++id) {
    if (!(*tok)->CheckId(id).ok()) continue;
    all.push_back(id);
    if (!(*tok)->Decode({&id, 1}, false).ok()) std::abort();
    (void)(*tok)->TokenString(id);
  }
  if (!(*tok)->Decode(all, true).ok()) std::abort();
}

// The regular expressions of Split and Replace patterns on their own: the input's first
// line is the pattern, the rest (when valid UTF-8) the text. Every match must lie inside
// the text, in order, on character boundaries, and MatchAt must agree with Search.
inline void FuzzTokenizerRegex(const uint8_t* data, size_t size) {
  absl::string_view input(reinterpret_cast<const char*>(data), size);
  size_t newline = input.find('\n');
  absl::string_view pattern = input.substr(0, newline);
  absl::string_view text =
      newline == absl::string_view::npos ? absl::string_view() : input.substr(newline + 1);
  if (!tokenizer::IsValidUtf8(pattern)) return;
  auto regex = tokenizer::Regex::Compile(pattern);
  if (!regex.ok()) return;
  if (!tokenizer::IsValidUtf8(text)) return;
  auto boundary = [&](size_t at) {
    return at == text.size() || (static_cast<unsigned char>(text[at]) & 0xC0) != 0x80;
  };
  size_t previous_end = 0;
  (*regex)->ForEachMatch(text, [&](size_t start, size_t end) {
    if (start < previous_end || end < start || end > text.size() || !boundary(start) ||
        !boundary(end) || (*regex)->MatchAt(text, start) != static_cast<int64_t>(end)) {
      std::abort();  // a match outside the text, out of order, or inside a character
    }
    previous_end = end;
  });
}

}  // namespace coil::fuzz

#endif  // COIL_TESTS_FUZZ_FUZZ_TOKENIZER_BODIES_H_
