#include "engine/tokenizer/tokenizer_files.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/data_files.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace coil::tokenizer {
namespace {

bool IsRegularFile(const std::filesystem::path& path) {
  std::error_code error;
  return std::filesystem::is_regular_file(path, error);
}

}  // namespace

absl::StatusOr<std::string> ShippedTokenizerPath() {
  absl::StatusOr<std::string> path = FindDataFile(kShippedTokenizer);
  if (path.ok()) return path;
  return absl::NotFoundError(absl::StrCat(path.status().message(), "; or pass --tokenizer FILE"));
}

absl::StatusOr<std::string> TokenizerPathForModel(const std::string& model_dir,
                                                  const std::string& override_path) {
  if (!override_path.empty()) return override_path;
  if (!model_dir.empty()) {
    const std::filesystem::path in_model = std::filesystem::path(model_dir) / "tokenizer.json";
    if (IsRegularFile(in_model)) return in_model.string();
  }
  return ShippedTokenizerPath();
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerForModel(const std::string& model_dir,
                                                                 const std::string& override_path) {
  COIL_ASSIGN_OR_RETURN(const std::string path, TokenizerPathForModel(model_dir, override_path));
  COIL_LOG(INFO) << "tokenizer: loading " << path;
  COIL_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::FromFile(path));
  const std::optional<int32_t> eos = EndOfSequenceId(*tokenizer);
  std::string special = "end of sequence: none";
  if (eos.has_value()) {
    special = absl::StrCat("end of sequence: ", tokenizer->TokenString(*eos).value_or("?"), " (",
                           *eos, ")");
  }
  if (!tokenizer->special_prefix().empty()) {
    absl::StrAppend(&special, "; add_special_tokens puts ", tokenizer->special_prefix().size(),
                    " before the text");
  }
  COIL_LOG(INFO) << "tokenizer: " << tokenizer->description() << "; " << tokenizer->vocab_size()
                 << " ids; " << special;
  return tokenizer;
}

namespace {

// A special token of tokenizer_config.json: a string, or an object with "content".
std::string ConfigToken(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return "";
}

}  // namespace

absl::StatusOr<TokenizerConfigTokens> ReadTokenizerConfig(const std::string& tokenizer_path) {
  const std::filesystem::path config_path =
      std::filesystem::path(tokenizer_path).parent_path() / "tokenizer_config.json";
  std::ifstream file(config_path);
  if (!file) {
    return absl::NotFoundError(absl::StrCat("no tokenizer_config.json at ", config_path.string()));
  }
  const nlohmann::json config = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(config_path.string(), " is not a JSON object; fix or remove it"));
  }
  TokenizerConfigTokens tokens;
  tokens.bos_token = ConfigToken(config, "bos_token");
  tokens.eos_token = ConfigToken(config, "eos_token");
  tokens.pad_token = ConfigToken(config, "pad_token");
  tokens.unk_token = ConfigToken(config, "unk_token");
  return tokens;
}

std::optional<int32_t> EndOfSequenceId(const Tokenizer& tokenizer) {
  if (!tokenizer.source_path().empty()) {
    const absl::StatusOr<TokenizerConfigTokens> config =
        ReadTokenizerConfig(tokenizer.source_path());
    if (config.ok() && !config->eos_token.empty()) {
      if (std::optional<int32_t> id = tokenizer.TokenId(config->eos_token); id.has_value()) {
        return id;
      }
      COIL_LOG(WARNING) << "tokenizer: tokenizer_config.json names the end-of-sequence token '"
                        << config->eos_token << "', which the tokenizer does not have";
    } else if (!config.ok() && config.status().code() != absl::StatusCode::kNotFound) {
      COIL_LOG(WARNING) << "tokenizer: " << config.status().message();
    }
  }
  return tokenizer.AddedTokenId("<|endoftext|>");
}

}  // namespace coil::tokenizer
