// Reads a Hugging Face tokenizer.json into a TokenizerSpec: the BPE vocabulary and merges,
// the added tokens with the ids the reference library gives them, and every pipeline
// component as plain data. Everything coil does not implement is refused here, by name and
// by where it sits in the file ("pre_tokenizer.pretokenizers[1]: type 'UnicodeScripts'"),
// rather than encoded differently from the reference: a malformed file is INVALID_ARGUMENT,
// a valid but unsupported one UNIMPLEMENTED.
#ifndef COIL_ENGINE_TOKENIZER_TOKENIZER_JSON_H_
#define COIL_ENGINE_TOKENIZER_TOKENIZER_JSON_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/bpe.h"

namespace coil::tokenizer {

// A Split or Replace pattern: a literal string or a regular expression.
struct PatternSpec {
  bool is_regex = false;
  std::string text;
};

// How a Split keeps what its pattern matches (the reference's SplitDelimiterBehavior).
enum class SplitBehavior : uint8_t {
  kRemoved,
  kIsolated,
  kMergedWithPrevious,
  kMergedWithNext,
  kContiguous,
};

enum class PrependScheme : uint8_t { kFirst, kNever, kAlways };

struct NormalizerStep {
  enum class Kind : uint8_t { kNfc, kNfd, kNfkc, kNfkd, kPrepend, kReplace, kStrip, kLowercase };
  Kind kind = Kind::kNfc;
  std::string text;     // kPrepend: what is prepended; kReplace: the replacement
  PatternSpec pattern;  // kReplace
  bool left = false;    // kStrip
  bool right = false;   // kStrip
  std::string where;    // its place in the file, for messages
};

struct PreTokenizerStep {
  enum class Kind : uint8_t {
    kByteLevel,
    kSplit,
    kMetaspace,
    kDigits,
    kPunctuation,
    kWhitespace,
    kWhitespaceSplit,
  };
  Kind kind = Kind::kByteLevel;
  bool add_prefix_space = false;                          // kByteLevel
  bool use_regex = true;                                  // kByteLevel
  PatternSpec pattern;                                    // kSplit
  SplitBehavior behavior = SplitBehavior::kIsolated;      // kSplit, kPunctuation
  bool invert = false;                                    // kSplit
  std::string replacement;                                // kMetaspace (one character)
  PrependScheme prepend_scheme = PrependScheme::kAlways;  // kMetaspace
  bool split = true;                                      // kMetaspace
  bool individual_digits = false;                         // kDigits
  std::string where;
};

struct DecoderStep {
  enum class Kind : uint8_t { kByteLevel, kMetaspace, kByteFallback, kFuse, kStrip, kReplace };
  Kind kind = Kind::kByteLevel;
  std::string replacement;                                // kMetaspace (one character)
  PrependScheme prepend_scheme = PrependScheme::kAlways;  // kMetaspace
  PatternSpec pattern;                                    // kReplace
  std::string content;  // kReplace: the replacement; kStrip: the character stripped
  uint32_t start = 0;   // kStrip: at most this many leading `content` characters
  uint32_t stop = 0;    // kStrip: at most this many trailing ones
  std::string where;
};

struct AddedTokenSpec {
  int32_t id = 0;
  std::string content;       // UTF-8, as written in the file
  bool special = false;      // dropped by decoding with skip_special_tokens
  bool normalized = true;    // matched in the normalized text (else in the raw text)
  bool lstrip = false;       // takes the whitespace before it
  bool rstrip = false;       // takes the whitespace after it
  bool single_word = false;  // matched only between non-word characters
};

// The special tokens a TemplateProcessing post-processor puts around a single sequence.
struct PostProcessorSpec {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
  std::string description;  // "TemplateProcessing <s> $A", for logs
};

struct TokenizerSpec {
  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> pre_tokenizer;
  bool has_decoder = false;  // none: tokens are joined with spaces
  std::vector<DecoderStep> decoder;
  PostProcessorSpec post_processor;

  BpeOptions bpe;          // byte_level, ignore_merges, byte_fallback, unk, fuse_unk
  int32_t vocab_size = 0;  // the largest id (vocabulary or added) plus one
  // The vocabulary: each entry's text as the file spells it (ByteLevel characters for a
  // byte-level vocabulary), and the entry of each id (-1: no entry has that id).
  std::vector<std::string> model_tokens;
  std::vector<bool> model_present;
  int32_t model_entries = 0;      // entries in the vocabulary
  std::vector<MergeRule> merges;  // in rank order
  std::vector<AddedTokenSpec> added_tokens;

  // A summary of the components, for logs: "BPE byte_fallback, normalizer Replace, ...".
  std::string description;
  // Added tokens whose id differs from the one the file gives, for a warning.
  std::vector<std::string> id_warnings;
};

// Parses the contents of a tokenizer.json file.
absl::StatusOr<TokenizerSpec> ParseTokenizerJson(absl::string_view json_text);

}  // namespace coil::tokenizer

#endif  // COIL_ENGINE_TOKENIZER_TOKENIZER_JSON_H_
