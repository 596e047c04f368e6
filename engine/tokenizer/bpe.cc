#include "engine/tokenizer/bpe.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/unicode.h"

namespace coil::tokenizer {

BpeModel::BpeModel(const std::array<int32_t, 256>& byte_tokens,
                   const std::vector<MergeRule>& merges, size_t cache_entries)
    : byte_tokens_(byte_tokens), cache_(std::make_unique<Cache>()) {
  options_.byte_level = true;
  fallback_ids_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    if (byte_tokens[b] >= 0) byte_chars_[b].ids.push_back(byte_tokens[b]);
  }
  cache_->capacity = cache_entries;
  MergeRules(merges);
}

BpeModel::BpeModel(const std::vector<std::string>& tokens, const std::vector<bool>& present,
                   const std::vector<MergeRule>& merges, const BpeOptions& options,
                   size_t cache_entries)
    : options_(options), cache_(std::make_unique<Cache>()) {
  cache_->capacity = cache_entries;
  fallback_ids_.fill(-1);
  byte_tokens_.fill(-1);
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (!present[id]) continue;
    const std::string& text = tokens[id];
    const auto token = static_cast<int32_t>(id);
    size_t length = 0;
    if (!text.empty() && ValidUtf8Length(text, 0) == text.size()) {
      char_ids_.try_emplace(DecodeUtf8(text, 0, &length), token);
    }
    // The byte tokens are spelled as Rust's format!("<{:#04X}>") spells a byte: <0x0A>.
    if (text.size() == 6 && text.compare(0, 3, "<0x") == 0 && text[5] == '>') {
      int value = 0;
      bool hex = true;
      for (const char c : text.substr(3, 2)) {
        if (c >= '0' && c <= '9') {
          value = value * 16 + (c - '0');
        } else if (c >= 'A' && c <= 'F') {
          value = value * 16 + (c - 'A' + 10);
        } else {
          hex = false;
        }
      }
      if (hex) fallback_ids_[value] = token;
    }
    if (options_.ignore_merges) {
      if (!options_.byte_level) {
        word_ids_.try_emplace(text, token);
      } else if (std::optional<std::string> bytes = ByteLevelToBytes(text); bytes.has_value()) {
        word_ids_.try_emplace(*std::move(bytes), token);
      }
    }
  }
  if (options_.byte_level) {
    for (int b = 0; b < 256; ++b) {
      std::string character;
      AppendUtf8(ByteToCodePoint(static_cast<unsigned char>(b)), &character);
      const auto it = char_ids_.find(ByteToCodePoint(static_cast<unsigned char>(b)));
      byte_chars_[b] = TokensOfCharacter(character, it == char_ids_.end() ? -1 : it->second);
      const auto& ids = byte_chars_[b].ids;
      if (ids.size() == 1 && ids[0] >= 0) {
        byte_tokens_[b] = ids[0];
      } else if (!ids.empty()) {
        simple_bytes_ = false;
      }
    }
  }
  MergeRules(merges);
  if (!options_.byte_level) FindSplitCharacter(tokens, present);
}

void BpeModel::FindSplitCharacter(const std::vector<std::string>& tokens,
                                  const std::vector<bool>& present) {
  constexpr char32_t kSplit = 0x2581;  // the Metaspace character
  if (!char_ids_.contains(kSplit)) return;
  std::string split;
  AppendUtf8(kSplit, &split);
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (!present[id]) continue;
    const std::string& text = tokens[id];
    for (size_t pos = text.find(split, 1); pos != std::string::npos;
         pos = text.find(split, pos + 1)) {
      size_t length = 0;
      joins_split_character_[DecodeUtf8(text, PreviousCodePoint(text, pos), &length)] = true;
    }
  }
  split_character_ = split;
}

void BpeModel::MergeRules(const std::vector<MergeRule>& merges) {
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const MergeRule& rule = merges[rank];
    merges_.insert_or_assign(PairKey(rule.left, rule.right),
                             Merge{static_cast<int32_t>(rank), rule.result});
  }
}

BpeModel::CharTokens BpeModel::TokensOfCharacter(absl::string_view character, int32_t id) const {
  CharTokens tokens;
  if (id >= 0) {
    tokens.ids.push_back(id);
    return tokens;
  }
  if (options_.byte_fallback) {
    bool all = true;
    for (const char c : character) {
      const int32_t byte_id = fallback_ids_[static_cast<unsigned char>(c)];
      if (byte_id < 0) {
        all = false;
        break;
      }
      tokens.ids.push_back(byte_id);
    }
    if (all) return tokens;
    tokens.ids.clear();
  }
  if (options_.unk_id >= 0) tokens.ids.push_back(CharTokens::kUnknown);
  return tokens;
}

void BpeModel::InitialTokens(absl::string_view word, Symbols* tokens) const {
  // As the reference's merge_word: a pending unknown token is added when a known character
  // follows (byte-fallback tokens do not flush it: they go first), or at the end; with
  // fuse_unk a run of unknown characters shares one.
  bool pending_unknown = false;
  const auto known = [&](int32_t id) {
    if (pending_unknown) {
      tokens->push_back(options_.unk_id);
      pending_unknown = false;
    }
    tokens->push_back(id);
  };
  const auto unknown = [&](const CharTokens& chars) {
    if (chars.ids.size() == 1 && chars.ids[0] == CharTokens::kUnknown) {
      if (pending_unknown && !options_.fuse_unk) tokens->push_back(options_.unk_id);
      pending_unknown = true;
      return;
    }
    tokens->insert(tokens->end(), chars.ids.begin(), chars.ids.end());
  };
  if (options_.byte_level) {
    for (const char c : word) {
      const auto b = static_cast<unsigned char>(c);
      if (byte_tokens_[b] >= 0) {
        known(byte_tokens_[b]);
      } else {
        unknown(byte_chars_[b]);
      }
    }
  } else {
    size_t pos = 0;
    while (pos < word.size()) {
      size_t length = 0;
      const char32_t cp = DecodeUtf8(word, pos, &length);
      const auto it = char_ids_.find(cp);
      if (it != char_ids_.end()) {
        known(it->second);
      } else {
        unknown(TokensOfCharacter(word.substr(pos, length), -1));
      }
      pos += length;
    }
  }
  if (pending_unknown) tokens->push_back(options_.unk_id);
}

void BpeModel::EncodeUncached(absl::string_view word, std::vector<int32_t>* out) const {
  if (options_.ignore_merges) {
    const auto it = word_ids_.find(word);
    if (it != word_ids_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  MergeWord(word, out);
}

void BpeModel::MergeWord(absl::string_view word, std::vector<int32_t>* out) const {
  Symbols tokens;
  if (options_.byte_level && simple_bytes_) {
    if (word.size() == 1) {
      const int32_t token = byte_tokens_[static_cast<unsigned char>(word[0])];
      if (token >= 0) out->push_back(token);
      return;
    }
    tokens.reserve(word.size());
    for (const char c : word) {
      const int32_t token = byte_tokens_[static_cast<unsigned char>(c)];
      if (token >= 0) tokens.push_back(token);
    }
  } else {
    InitialTokens(word, &tokens);
  }
  if (tokens.size() <= kMaxScannedSymbols) {
    MergeByScanning(tokens, out);
  } else {
    MergeWithHeap(tokens, out);
  }
}

void BpeModel::MergeByScanning(Symbols& tokens, std::vector<int32_t>* out) const {
  // ranks[i] and results[i] describe the pair (tokens[i], tokens[i + 1]). Each step finds
  // the lowest rank by a linear scan (leftmost on a tie), merges, and looks up only the two
  // pairs that changed: on short words this beats a heap.
  constexpr int32_t kNone = std::numeric_limits<int32_t>::max();
  const size_t n = tokens.size();
  Symbols ranks(n, kNone);
  Symbols results(n, 0);
  const auto look_up = [&](size_t i) {
    const auto it = merges_.find(PairKey(tokens[i], tokens[i + 1]));
    if (it == merges_.end()) {
      ranks[i] = kNone;
    } else {
      ranks[i] = it->second.rank;
      results[i] = it->second.result;
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) look_up(i);
  size_t size = n;
  while (size > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < size; ++i) {
      if (ranks[i] < ranks[best]) best = i;
    }
    if (ranks[best] == kNone) break;
    tokens[best] = results[best];
    tokens.erase(tokens.begin() + static_cast<ptrdiff_t>(best) + 1);
    ranks.erase(ranks.begin() + static_cast<ptrdiff_t>(best) + 1);
    results.erase(results.begin() + static_cast<ptrdiff_t>(best) + 1);
    --size;
    if (best + 1 < size) {
      look_up(best);
    } else {
      ranks[best] = kNone;
    }
    if (best > 0) look_up(best - 1);
  }
  out->insert(out->end(), tokens.begin(), tokens.end());
}

void BpeModel::MergeWithHeap(Symbols& tokens, std::vector<int32_t>* out) const {
  // A doubly linked list over the symbols (a merged symbol keeps the left position) and a
  // min-heap of candidate merges keyed by (rank, position): O(n log n) for the long runs
  // (digits, base64) where rescanning would be quadratic. An entry is stale when its pair
  // has changed since it was pushed; a rank names one pair, so comparing the pair's current
  // rank with the entry's detects that.
  const size_t n = tokens.size();
  std::vector<int32_t> prev(n);
  std::vector<int32_t> next(n);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  struct Candidate {
    int32_t rank;
    int32_t pos;
  };
  // std heap functions build a max-heap; "later" puts the lowest (rank, pos) on top.
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::vector<Candidate> heap;
  const auto push_pair = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    const auto it = merges_.find(PairKey(tokens[pos], tokens[next[pos]]));
    if (it == merges_.end()) return;
    heap.push_back(Candidate{it->second.rank, pos});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (size_t i = 0; i + 1 < n; ++i) push_pair(static_cast<int32_t>(i));

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate top = heap.back();
    heap.pop_back();
    const int32_t right = next[top.pos];
    // A merged-away symbol has tokens[] == -1, so its stale entries are skipped here.
    if (tokens[top.pos] < 0 || right < 0) continue;
    const auto it = merges_.find(PairKey(tokens[top.pos], tokens[right]));
    if (it == merges_.end() || it->second.rank != top.rank) continue;
    tokens[top.pos] = it->second.result;
    tokens[right] = -1;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    push_pair(prev[top.pos]);
    push_pair(top.pos);
  }
  for (int32_t pos = 0; pos >= 0; pos = next[pos]) out->push_back(tokens[pos]);
}

void BpeModel::Encode(absl::string_view word, std::vector<int32_t>* out) const {
  if (options_.ignore_merges) {
    const auto it = word_ids_.find(word);
    if (it != word_ids_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  if (split_character_.empty() || word.size() <= kMaxCachedWordBytes) {
    EncodePart(word, out);
    return;
  }
  size_t start = 0;
  for (size_t pos = word.find(split_character_, 1); pos != absl::string_view::npos;
       pos = word.find(split_character_, pos + 1)) {
    size_t length = 0;
    const char32_t before = DecodeUtf8(word, PreviousCodePoint(word, pos), &length);
    if (!char_ids_.contains(before) || joins_split_character_.contains(before)) continue;
    EncodePart(word.substr(start, pos - start), out);
    start = pos;
  }
  EncodePart(word.substr(start), out);
}

void BpeModel::EncodePart(absl::string_view word, std::vector<int32_t>* out) const {
  if (word.size() <= 1 || word.size() > kMaxCachedWordBytes || cache_->capacity == 0) {
    MergeWord(word, out);
    return;
  }
  {
    absl::ReaderMutexLock lock(&cache_->mutex);
    const auto it = cache_->words.find(word);
    if (it != cache_->words.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out->size();
  MergeWord(word, out);
  absl::MutexLock lock(&cache_->mutex);
  // A full cache keeps what it has: the frequent words arrive first and stay.
  if (cache_->words.size() < cache_->capacity) {
    cache_->words.try_emplace(std::string(word), out->begin() + static_cast<ptrdiff_t>(first),
                              out->end());
  }
}

}  // namespace coil::tokenizer
