// The ByteLevel alphabet of GPT-2-style tokenizers: every byte 0..255 is written in the
// vocabulary as one printable code point (printable Latin-1 bytes as themselves, the other
// 68 bytes as U+0100 onwards, e.g. the space 0x20 as 'Ġ' U+0120). coil keeps token bytes,
// not these code points, so the mapping is only needed to read and write tokenizer.json.
#ifndef COIL_ENGINE_TOKENIZER_BYTE_LEVEL_H_
#define COIL_ENGINE_TOKENIZER_BYTE_LEVEL_H_

#include <array>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace coil::tokenizer {

// The code point that stands for `byte` in a ByteLevel vocabulary.
char32_t ByteToCodePoint(unsigned char byte);

// The bytes a ByteLevel token string stands for, or nullopt when a character of `token`
// (valid UTF-8) is not in the ByteLevel alphabet.
std::optional<std::string> ByteLevelToBytes(absl::string_view token);

// The ByteLevel spelling of raw `bytes` (the inverse of ByteLevelToBytes).
std::string BytesToByteLevel(absl::string_view bytes);

}  // namespace coil::tokenizer

#endif  // COIL_ENGINE_TOKENIZER_BYTE_LEVEL_H_
