#include "tools/make_model/tokenizer_cut.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace coil::model {
namespace {

using Json = nlohmann::json;

// The byte-level alphabet (GPT-2's bytes_to_unicode): bytes that print stand for
// themselves, the others for U+0100 and up, in byte order. As UTF-8 strings.
std::vector<std::string> ByteSymbols() {
  std::vector<int> printable;
  for (int b = '!'; b <= '~'; ++b) printable.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) printable.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) printable.push_back(b);
  std::vector<int> code(256, -1);
  for (int b : printable) code[b] = b;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    if (code[b] < 0) code[b] = next++;
  }
  std::vector<std::string> symbols(256);
  for (int b = 0; b < 256; ++b) {
    const int cp = code[b];
    std::string& s = symbols[b];
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return symbols;
}

// Bytes that never occur in UTF-8 text: C0, C1 and F5..FF.
bool NeverInUtf8(int byte) { return byte == 0xC0 || byte == 0xC1 || byte >= 0xF5; }

}  // namespace

absl::Status WriteTokenizerForVocab(const std::string& source, int64_t vocab_size,
                                    const std::string& destination) {
  std::ifstream in(source, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", source));
  Json tokenizer = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (tokenizer.is_discarded() || !tokenizer.contains("model") ||
      !tokenizer["model"].contains("vocab") || !tokenizer["model"]["vocab"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, " is not a BPE tokenizer.json"));
  }
  Json& vocab = tokenizer["model"]["vocab"];
  int64_t largest = -1;
  for (const auto& [piece, id] : vocab.items()) largest = std::max<int64_t>(largest, id.get<int64_t>());
  for (const Json& added : tokenizer.value("added_tokens", Json::array())) {
    largest = std::max<int64_t>(largest, added.value("id", int64_t{-1}));
  }
  if (largest < vocab_size) {
    std::ofstream out(destination, std::ios::binary);
    out << text.str();
    return out ? absl::OkStatus()
               : absl::InternalError(absl::StrCat("cannot write ", destination));
  }

  absl::flat_hash_map<std::string, int64_t> kept;
  Json cut_vocab = Json::object();
  for (const auto& [piece, id] : vocab.items()) {
    if (id.get<int64_t>() < vocab_size) {
      kept[piece] = id.get<int64_t>();
      cut_vocab[piece] = id;
    }
  }
  const std::vector<std::string> symbols = ByteSymbols();
  for (int b = 0; b < 256; ++b) {
    if (!NeverInUtf8(b) && !kept.contains(symbols[b])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the tokenizer cannot be cut to the model's ", vocab_size,
          " ids: byte 0x", absl::Hex(b), " would have no token, so some text could not be "
          "encoded; give the shape a vocabulary of at least ", vocab.size(), " or one that "
          "holds every byte"));
    }
  }
  Json cut_merges = Json::array();
  for (const Json& merge : tokenizer["model"].value("merges", Json::array())) {
    std::string left;
    std::string right;
    if (merge.is_string()) {
      const std::string pair = merge.get<std::string>();
      const size_t space = pair.find(' ');
      if (space == std::string::npos) continue;
      left = pair.substr(0, space);
      right = pair.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      continue;
    }
    if (kept.contains(left) && kept.contains(right) && kept.contains(left + right)) {
      cut_merges.push_back(merge);
    }
  }
  Json cut_added = Json::array();
  for (const Json& added : tokenizer.value("added_tokens", Json::array())) {
    if (added.value("id", vocab_size) < vocab_size) cut_added.push_back(added);
  }
  vocab = std::move(cut_vocab);
  tokenizer["model"]["merges"] = std::move(cut_merges);
  tokenizer["added_tokens"] = std::move(cut_added);
  std::ofstream out(destination, std::ios::binary);
  out << tokenizer.dump(1);
  return out ? absl::OkStatus() : absl::InternalError(absl::StrCat("cannot write ", destination));
}

}  // namespace coil::model
