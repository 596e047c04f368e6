#include "engine/tokenizer/decoder.h"

#include <optional>
#include <utility>

#include "common/status_macros.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/unicode.h"

namespace coil::tokenizer {
namespace {

constexpr absl::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

// The byte a ByteFallback token stands for: "<0xNN>" whose two characters Rust's
// u8::from_str_radix(_, 16) accepts ("+F" included), or nullopt.
std::optional<unsigned char> FallbackByte(absl::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return std::nullopt;
  const absl::string_view digits = token.substr(3, 2);
  const auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (digits[0] == '+') {
    const int low = digit(digits[1]);
    if (low < 0) return std::nullopt;
    return static_cast<unsigned char>(low);
  }
  const int high = digit(digits[0]);
  const int low = digit(digits[1]);
  if (high < 0 || low < 0) return std::nullopt;
  return static_cast<unsigned char>(high * 16 + low);
}

// A ByteLevel decoder's bytes for one token: its characters' bytes when all are in the
// ByteLevel alphabet, else its own UTF-8.
std::string ByteLevelBytes(absl::string_view token) {
  std::optional<std::string> bytes = ByteLevelToBytes(token);
  return bytes.has_value() ? *std::move(bytes) : std::string(token);
}

}  // namespace

absl::StatusOr<Decoder> Decoder::Create(bool has_decoder, const std::vector<DecoderStep>& steps,
                                        const std::vector<std::string>& tokens) {
  Decoder decoder;
  std::vector<Step> all;
  for (const DecoderStep& spec : steps) {
    Step step;
    switch (spec.kind) {
      case DecoderStep::Kind::kByteLevel:
        step.kind = Kind::kByteLevel;
        break;
      case DecoderStep::Kind::kMetaspace:
        step.kind = Kind::kMetaspace;
        step.text = spec.replacement;
        step.strip_first = spec.prepend_scheme != PrependScheme::kNever;
        break;
      case DecoderStep::Kind::kByteFallback:
        step.kind = Kind::kByteFallback;
        break;
      case DecoderStep::Kind::kFuse:
        step.kind = Kind::kFuse;
        break;
      case DecoderStep::Kind::kStrip:
        step.kind = Kind::kStrip;
        step.text = spec.content;
        step.start = spec.start;
        step.stop = spec.stop;
        break;
      case DecoderStep::Kind::kReplace:
        step.kind = Kind::kReplace;
        step.text = spec.content;
        COIL_ASSIGN_OR_RETURN(step.pattern, Pattern::Create(spec.pattern));
        break;
    }
    all.push_back(std::move(step));
  }
  if (!has_decoder) {
    Step join;
    join.kind = Kind::kJoin;
    all.push_back(std::move(join));
  }
  // Per-token steps at the head of the chain are applied now, once per token.
  size_t first_streamed = 0;
  while (first_streamed < all.size() &&
         (all[first_streamed].kind == Kind::kReplace || all[first_streamed].kind == Kind::kStrip)) {
    ++first_streamed;
  }
  decoder.token_text_.reserve(tokens.size());
  for (const std::string& token : tokens) {
    std::string text = token;
    for (size_t i = 0; i < first_streamed; ++i) text = ApplyToToken(all[i], text);
    decoder.token_text_.push_back(std::move(text));
  }
  decoder.steps_.assign(
      std::make_move_iterator(all.begin() + static_cast<ptrdiff_t>(first_streamed)),
      std::make_move_iterator(all.end()));
  if (!decoder.steps_.empty() && decoder.steps_[0].kind == Kind::kByteLevel) {
    decoder.token_bytes_.reserve(tokens.size());
    for (const std::string& text : decoder.token_text_) {
      decoder.token_bytes_.push_back(ByteLevelBytes(text));
    }
  } else if (!decoder.steps_.empty() && decoder.steps_[0].kind == Kind::kByteFallback) {
    decoder.token_byte_.reserve(tokens.size());
    for (const std::string& text : decoder.token_text_) {
      const std::optional<unsigned char> byte = FallbackByte(text);
      decoder.token_byte_.push_back(byte.has_value() ? static_cast<int16_t>(*byte) : -1);
    }
  }
  return decoder;
}

std::string Decoder::ApplyToToken(const Step& step, absl::string_view token) {
  std::string out;
  if (step.kind == Kind::kReplace) {
    size_t last = 0;
    step.pattern.ForEachMatch(token, [&](size_t start, size_t end) {
      out.append(token.data() + last, start - last);
      out.append(step.text);
      last = end;
    });
    out.append(token.data() + last, token.size() - last);
    return out;
  }
  // Strip: up to `start` leading and `stop` trailing copies of the character.
  const absl::string_view c = step.text;
  size_t begin = 0;
  for (uint32_t i = 0; i < step.start && token.substr(begin, c.size()) == c; ++i) begin += c.size();
  size_t end = token.size();
  for (uint32_t i = 0;
       i < step.stop && end >= begin + c.size() && token.substr(end - c.size(), c.size()) == c;
       ++i) {
    end -= c.size();
  }
  return std::string(token.substr(begin, end - begin));
}

Decoder::Stream::Stream(const Decoder* decoder)
    : decoder_(decoder), states_(decoder->steps_.size()) {}

size_t Decoder::Stream::held_bytes() const {
  size_t held = 0;
  for (size_t i = 0; i < states_.size(); ++i) {
    held += states_[i].buffer.size() + states_[i].pending.size() +
            states_[i].held * decoder_->steps_[i].text.size();
  }
  return held;
}

void Decoder::Stream::Push(int32_t id, std::string* out) {
  const auto index = static_cast<size_t>(id);
  if (!decoder_->token_bytes_.empty()) {
    EmitBytes(0, decoder_->token_bytes_[index], /*final=*/false, out);
    return;
  }
  if (!decoder_->token_byte_.empty()) {
    const int16_t byte = decoder_->token_byte_[index];
    if (byte >= 0) {
      ByteToken(0, static_cast<unsigned char>(byte), out);
    } else {
      FlushRun(0, out);
      Text(1, decoder_->token_text_[index], out);
      End(1, out);
    }
    return;
  }
  Text(0, decoder_->token_text_[index], out);
  End(0, out);
}

void Decoder::Stream::Finish(std::string* out) {
  Close(0, out);
  for (StepState& state : states_) state = StepState();
}

void Decoder::Stream::EmitBytes(size_t step, absl::string_view bytes, bool final,
                                std::string* out) {
  std::string& pending = states_[step].pending;
  pending.append(bytes.data(), bytes.size());
  std::string text;
  const size_t consumed = AppendUtf8Lossy(pending, final, &text);
  pending.erase(0, consumed);
  if (!text.empty()) Text(step + 1, text, out);
}

void Decoder::Stream::ByteToken(size_t step, unsigned char byte, std::string* out) {
  StepState& state = states_[step];
  if (state.poisoned) {
    Text(step + 1, kReplacementCharacter, out);
    End(step + 1, out);
    return;
  }
  state.pending.push_back(static_cast<char>(byte));
  if (ClassifyUtf8(state.pending) != Utf8Prefix::kInvalid) return;
  // Invalid whatever follows: every byte of the run is a U+FFFD of its own.
  const size_t count = state.pending.size();
  state.pending.clear();
  state.poisoned = true;
  for (size_t i = 0; i < count; ++i) {
    Text(step + 1, kReplacementCharacter, out);
    End(step + 1, out);
  }
}

void Decoder::Stream::FlushRun(size_t step, std::string* out) {
  StepState& state = states_[step];
  state.poisoned = false;
  if (state.pending.empty()) return;
  const std::string run = std::move(state.pending);
  state.pending.clear();
  if (ClassifyUtf8(run) == Utf8Prefix::kComplete) {
    Text(step + 1, run, out);
    End(step + 1, out);
    return;
  }
  for (size_t i = 0; i < run.size(); ++i) {
    Text(step + 1, kReplacementCharacter, out);
    End(step + 1, out);
  }
}

void Decoder::Stream::Text(size_t step, absl::string_view text, std::string* out) {
  if (step == states_.size()) {
    out->append(text.data(), text.size());
    return;
  }
  const Step& spec = decoder_->steps_[step];
  StepState& state = states_[step];
  switch (spec.kind) {
    case Kind::kByteLevel:
    case Kind::kByteFallback:
      state.buffer.append(text.data(), text.size());
      return;
    case Kind::kFuse:
      Text(step + 1, text, out);
      return;
    case Kind::kMetaspace: {
      std::string mapped;
      mapped.reserve(text.size());
      size_t pos = 0;
      while (pos < text.size()) {
        const size_t found = text.find(spec.text, pos);
        const size_t until = found == absl::string_view::npos ? text.size() : found;
        mapped.append(text.data() + pos, until - pos);
        if (found == absl::string_view::npos) break;
        if (!(state.count == 0 && spec.strip_first)) mapped.push_back(' ');
        pos = found + spec.text.size();
      }
      if (!mapped.empty()) Text(step + 1, mapped, out);
      return;
    }
    case Kind::kStrip: {
      const absl::string_view c = spec.text;
      std::string kept;
      size_t pos = 0;
      while (pos < text.size()) {
        const size_t length = Utf8Length(static_cast<unsigned char>(text[pos]));
        const absl::string_view ch = text.substr(pos, length);
        pos += length;
        if (!state.front_done) {
          if (ch == c && state.count < spec.start) {
            ++state.count;
            continue;
          }
          state.front_done = true;
        }
        if (ch == c && spec.stop > 0) {
          // Held back: the element's last `stop` copies are stripped at its end.
          if (++state.held > spec.stop) {
            kept.append(c.data(), c.size());
            --state.held;
          }
          continue;
        }
        for (; state.held > 0; --state.held) kept.append(c.data(), c.size());
        kept.append(ch.data(), ch.size());
      }
      if (!kept.empty()) Text(step + 1, kept, out);
      return;
    }
    case Kind::kReplace: {
      state.buffer.append(text.data(), text.size());
      if (spec.pattern.is_regex()) return;  // a match may span the element: wait for its end
      // Replace the complete matches; keep back a tail that may begin a match.
      const std::string& literal = spec.pattern.literal();
      const absl::string_view buffer = state.buffer;
      std::string done;
      size_t pos = 0;
      for (size_t found = buffer.find(literal); found != absl::string_view::npos;
           found = buffer.find(literal, pos)) {
        done.append(buffer.data() + pos, found - pos);
        done.append(spec.text);
        pos = found + literal.size();
      }
      size_t keep = buffer.size();
      for (size_t q =
               std::max(pos, buffer.size() + 1 - std::min(buffer.size() + 1, literal.size()));
           q < buffer.size(); ++q) {
        if (absl::string_view(literal).substr(0, buffer.size() - q) == buffer.substr(q)) {
          keep = q;
          break;
        }
      }
      done.append(buffer.data() + pos, keep - pos);
      state.buffer.erase(0, keep);
      if (!done.empty()) Text(step + 1, done, out);
      return;
    }
    case Kind::kJoin:
      if (state.pending_separator) {
        state.pending_separator = false;
        Text(step + 1, " ", out);
      }
      Text(step + 1, text, out);
      return;
  }
}

void Decoder::Stream::End(size_t step, std::string* out) {
  if (step == states_.size()) return;
  const Step& spec = decoder_->steps_[step];
  StepState& state = states_[step];
  switch (spec.kind) {
    case Kind::kByteLevel: {
      const std::string bytes = ByteLevelBytes(state.buffer);
      state.buffer.clear();
      EmitBytes(step, bytes, /*final=*/false, out);
      return;  // one element for the whole text: it ends with the stream
    }
    case Kind::kByteFallback: {
      const std::string element = std::move(state.buffer);
      state.buffer.clear();
      if (const std::optional<unsigned char> byte = FallbackByte(element); byte.has_value()) {
        ByteToken(step, *byte, out);
        return;
      }
      FlushRun(step, out);
      Text(step + 1, element, out);
      End(step + 1, out);
      return;
    }
    case Kind::kFuse:
      return;  // one element for the whole text
    case Kind::kMetaspace:
      ++state.count;
      End(step + 1, out);
      return;
    case Kind::kStrip:
      state.count = 0;
      state.held = 0;
      state.front_done = false;
      End(step + 1, out);
      return;
    case Kind::kReplace: {
      std::string replaced =
          spec.pattern.is_regex() ? ApplyToToken(spec, state.buffer) : state.buffer;
      state.buffer.clear();
      if (!replaced.empty()) Text(step + 1, replaced, out);
      End(step + 1, out);
      return;
    }
    case Kind::kJoin:
      // Tokens are joined with spaces: one goes before every token but the first.
      if (state.pending_separator) Text(step + 1, " ", out);
      state.pending_separator = true;
      End(step + 1, out);
      return;
  }
}

void Decoder::Stream::Close(size_t step, std::string* out) {
  if (step == states_.size()) return;
  const Step& spec = decoder_->steps_[step];
  switch (spec.kind) {
    case Kind::kByteLevel:
      if (!states_[step].buffer.empty()) End(step, out);
      EmitBytes(step, "", /*final=*/true, out);
      End(step + 1, out);
      break;
    case Kind::kByteFallback:
      FlushRun(step, out);
      break;
    case Kind::kFuse:
      End(step + 1, out);
      break;
    default:
      break;
  }
  Close(step + 1, out);
}

}  // namespace coil::tokenizer
