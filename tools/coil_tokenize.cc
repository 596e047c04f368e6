// coil-tokenize: text to token ids and back, one JSON value per line, for tests and for
// checking what a prompt becomes with a model's tokenizer.
//
//   echo '"Hello world"' | coil-tokenize                  prints [12092,1533]
//   echo '[12092,1533]' | coil-tokenize --decode           prints "Hello world"
//   echo '"Hello world"' | coil-tokenize --tokenizer llama2/tokenizer.json --add_special_tokens
//                                                         prints [1,22557,1526]
//
// Without --tokenizer it uses the GPT-NeoX-20B tokenizer shipped with coil. Any BPE
// tokenizer.json works; one that needs what coil lacks is refused, naming it.
#include <cstdint>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/command_line.h"
#include "engine/tokenizer/tokenizer_files.h"

ABSL_FLAG(std::string, tokenizer, "",
          "tokenizer.json to use (default: the GPT-NeoX-20B file shipped with coil)");
ABSL_FLAG(bool, decode, false,
          "read JSON arrays of ids and print JSON strings, instead of the reverse");
ABSL_FLAG(bool, skip_special_tokens, false, "with --decode: leave out special tokens");
ABSL_FLAG(bool, add_special_tokens, false,
          "when encoding: put the special tokens the tokenizer's post-processor adds around the "
          "ids (Llama 2's BOS <s>, say)");

namespace {

using Json = nlohmann::json;

// Converts one input line; on bad input returns false with `error` set.
bool ConvertLine(const coil::tokenizer::Tokenizer& tokenizer, const std::string& line, bool decode,
                 bool skip_special, bool add_special, std::string* output, std::string* error) {
  const Json value = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    *error = "not valid JSON";
    return false;
  }
  if (!decode) {
    if (!value.is_string()) {
      *error = "expected a JSON string (use --decode for arrays of ids)";
      return false;
    }
    const auto ids = tokenizer.Encode(value.get_ref<const std::string&>(), add_special);
    if (!ids.ok()) {
      *error = std::string(ids.status().message());
      return false;
    }
    *output = Json(*ids).dump();
    return true;
  }
  if (!value.is_array()) {
    *error = "expected a JSON array of token ids (drop --decode to encode strings)";
    return false;
  }
  std::vector<int32_t> ids;
  for (const Json& id : value) {
    if (!id.is_number_integer() || id.get<int64_t>() < INT32_MIN || id.get<int64_t>() > INT32_MAX) {
      *error = absl::StrCat("token id ", id.dump(), " is not a 32-bit integer");
      return false;
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  const auto text = tokenizer.Decode(ids, skip_special);
  if (!text.ok()) {
    *error = std::string(text.status().message());
    return false;
  }
  *output = Json(*text).dump();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "coil-tokenize [--tokenizer FILE] [--add_special_tokens] [--decode "
      "[--skip_special_tokens]]: reads one JSON string per line from stdin and prints its token "
      "ids as a JSON array (--decode: the reverse)");
  coil::ParseDashedCommandLine(argc, argv);
  auto tokenizer = coil::tokenizer::LoadTokenizerForModel("", absl::GetFlag(FLAGS_tokenizer));
  if (!tokenizer.ok()) {
    std::cerr << "coil-tokenize: " << tokenizer.status().message() << "\n";
    return 2;
  }
  const bool decode = absl::GetFlag(FLAGS_decode);
  const bool skip_special = absl::GetFlag(FLAGS_skip_special_tokens);
  const bool add_special = absl::GetFlag(FLAGS_add_special_tokens);
  std::string line;
  std::string output;
  std::string error;
  for (int64_t number = 1; std::getline(std::cin, line); ++number) {
    if (!ConvertLine(**tokenizer, line, decode, skip_special, add_special, &output, &error)) {
      std::cerr << "coil-tokenize: line " << number << ": " << error << "\n";
      return 1;
    }
    std::cout << output << "\n";
  }
  return 0;
}
