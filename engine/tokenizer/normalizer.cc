#include "engine/tokenizer/normalizer.h"

#include <algorithm>
#include <utility>

#include "common/status_macros.h"

namespace coil::tokenizer {
namespace {

// The byte offset of the first `chars` code points of `text` (all of it when shorter).
size_t PrefixBytes(absl::string_view text, int32_t chars) {
  size_t pos = 0;
  for (int32_t i = 0; i < chars && pos < text.size(); ++i) {
    pos += Utf8Length(static_cast<unsigned char>(text[pos]));
  }
  return pos;
}

NormalForm FormOf(NormalizerStep::Kind kind) {
  switch (kind) {
    case NormalizerStep::Kind::kNfd:
      return NormalForm::kNfd;
    case NormalizerStep::Kind::kNfkc:
      return NormalForm::kNfkc;
    case NormalizerStep::Kind::kNfkd:
      return NormalForm::kNfkd;
    default:
      return NormalForm::kNfc;
  }
}

}  // namespace

int32_t CodePointCount(absl::string_view text) {
  int32_t count = 0;
  for (const char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

absl::StatusOr<Normalizer> Normalizer::Create(const std::vector<NormalizerStep>& steps) {
  Normalizer normalizer;
  for (const NormalizerStep& spec : steps) {
    Step step;
    step.kind = spec.kind;
    step.text = spec.text;
    step.left = spec.left;
    step.right = spec.right;
    if (spec.kind == NormalizerStep::Kind::kReplace) {
      COIL_ASSIGN_OR_RETURN(step.pattern, Pattern::Create(spec.pattern));
    }
    normalizer.steps_.push_back(std::move(step));
  }
  return normalizer;
}

absl::Status Normalizer::Apply(std::string* text, int32_t* head) const {
  for (const Step& step : steps_) {
    using Kind = NormalizerStep::Kind;
    switch (step.kind) {
      case Kind::kNfc:
      case Kind::kNfd:
      case Kind::kNfkc:
      case Kind::kNfkd: {
        const NormalForm form = FormOf(step.kind);
        if (IsNormalized(form, *text)) break;
        // What the first character becomes stands for it (its decomposition, say).
        if (*head > 0) {
          COIL_ASSIGN_OR_RETURN(
              const std::string first,
              Normalize(form, absl::string_view(*text).substr(0, PrefixBytes(*text, *head))));
          *head = CodePointCount(first);
        }
        COIL_ASSIGN_OR_RETURN(*text, Normalize(form, *text));
        break;
      }
      case Kind::kPrepend:
        // The reference prepends only to a non-empty text; the prepended characters take the
        // place of the first one.
        if (!text->empty()) {
          text->insert(0, step.text);
          if (*head > 0) *head += CodePointCount(step.text);
        }
        break;
      case Kind::kReplace: {
        // The head of the output is its leading run of characters that stand for the first
        // one: a copied character keeps what it stood for; replacement characters take the
        // place of the match's last byte (of the byte before an empty match; at the very
        // start, of the start).
        std::string out;
        out.reserve(text->size());
        const size_t head_bytes = PrefixBytes(*text, *head);
        bool counting = *head > 0;
        int32_t new_head = 0;
        size_t last = 0;
        const auto copy = [&](size_t from, size_t to) {
          if (counting) {
            if (to <= head_bytes) {
              new_head += CodePointCount(absl::string_view(*text).substr(from, to - from));
            } else {
              if (from < head_bytes) {
                new_head +=
                    CodePointCount(absl::string_view(*text).substr(from, head_bytes - from));
              }
              counting = false;
            }
          }
          out.append(*text, from, to - from);
        };
        step.pattern.ForEachMatch(*text, [&](size_t start, size_t end) {
          copy(last, start);
          if (counting) {
            if (end == 0 || end - 1 < head_bytes) {
              new_head += CodePointCount(step.text);
            } else {
              counting = false;
            }
          }
          out.append(step.text);
          last = end;
        });
        copy(last, text->size());
        *text = std::move(out);
        *head = new_head;
        break;
      }
      case Kind::kStrip: {
        size_t begin = 0, end = text->size();
        int32_t removed_front = 0;
        if (step.left) {
          while (begin < end) {
            size_t length = 0;
            if (!IsWhiteSpace(DecodeUtf8(*text, begin, &length))) break;
            begin += length;
            ++removed_front;
          }
        }
        if (step.right) {
          while (end > begin) {
            const size_t prev = PreviousCodePoint(*text, end);
            size_t length = 0;
            if (!IsWhiteSpace(DecodeUtf8(*text, prev, &length))) break;
            end = prev;
          }
        }
        *text = text->substr(begin, end - begin);
        *head = std::max(0, *head - removed_front);
        *head = std::min(*head, CodePointCount(*text));
        break;
      }
      case Kind::kLowercase: {
        std::string out;
        out.reserve(text->size());
        int32_t new_head = 0;
        size_t pos = 0;
        for (int32_t index = 0; pos < text->size(); ++index) {
          size_t length = 0;
          const char32_t cp = DecodeUtf8(*text, pos, &length);
          const size_t before = out.size();
          AppendLowercase(cp, &out);
          if (index < *head) new_head += CodePointCount(absl::string_view(out).substr(before));
          pos += length;
        }
        *text = std::move(out);
        *head = new_head;
        break;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace coil::tokenizer
