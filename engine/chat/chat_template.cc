#include "engine/chat/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace coil::chat {
namespace {

using Json = nlohmann::ordered_json;

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// bos_token / eos_token are strings, or AddedToken objects with "content".
std::string TokenString(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  return "";
}

// One message as the template sees it: text-only content parts joined into one string
// (as vLLM does for templates that expect a string), tool-call arguments given as JSON
// text parsed into objects (as vLLM does, so templates can iterate or tojson them).
absl::StatusOr<Json> NormalizeMessage(const Json& message, size_t index) {
  if (!message.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("messages[", index, "] must be an object"));
  }
  Json out = message;
  auto role = message.find("role");
  if (role == message.end() || !role->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "messages[", index, "].role must be a string (system, user, assistant or tool)"));
  }
  auto content = message.find("content");
  if (content != message.end() && content->is_array()) {
    std::string text;
    bool first = true;
    for (const Json& part : *content) {
      auto type = part.is_object() ? part.find("type") : part.end();
      if (!part.is_object() || type == part.end() || *type != "text" || !part.contains("text") ||
          !part["text"].is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat("messages[", index,
                         "].content: only text parts ({\"type\": \"text\", \"text\": ...}) "
                         "are supported; this model takes no images or audio"));
      }
      if (!first) text += "\n";
      first = false;
      text += part["text"].get<std::string>();
    }
    out["content"] = text;
  } else if (content != message.end() && !content->is_string() && !content->is_null()) {
    return absl::InvalidArgumentError(
        absl::StrCat("messages[", index, "].content must be a string or a list of text parts"));
  }
  auto tool_calls = out.find("tool_calls");
  if (tool_calls != out.end() && tool_calls->is_array()) {
    for (Json& call : *tool_calls) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
        continue;
      Json& function = call["function"];
      auto arguments = function.find("arguments");
      if (arguments != function.end() && arguments->is_string()) {
        Json parsed =
            Json::parse(arguments->get<std::string>(), nullptr, /*allow_exceptions=*/false);
        if (!parsed.is_discarded() && parsed.is_object()) *arguments = std::move(parsed);
      }
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::FromSource(const std::string& source,
                                                                       std::string bos_token,
                                                                       std::string eos_token,
                                                                       std::string origin) {
  absl::StatusOr<Template> parsed = Template::Parse(source);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the chat template from ", origin, " cannot be used: ", parsed.status().message(),
        "; pass a template that uses the supported subset with --chat-template FILE"));
  }
  return std::unique_ptr<ChatTemplate>(new ChatTemplate(
      std::move(parsed).value(), std::move(bos_token), std::move(eos_token), std::move(origin)));
}

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::Load(const std::string& model_dir,
                                                                 const std::string& template_file) {
  Json config = Json::object();
  const std::string config_path =
      (std::filesystem::path(model_dir) / "tokenizer_config.json").string();
  if (!model_dir.empty() && std::filesystem::exists(config_path)) {
    absl::StatusOr<std::string> text = ReadText(config_path);
    if (!text.ok()) return text.status();
    config = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(config_path, " is not a JSON object"));
    }
  }
  std::string bos = TokenString(config, "bos_token");
  std::string eos = TokenString(config, "eos_token");
  if (!template_file.empty()) {
    absl::StatusOr<std::string> source = ReadText(template_file);
    if (!source.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--chat-template: cannot read ", template_file));
    }
    return FromSource(*source, std::move(bos), std::move(eos), template_file);
  }
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return std::unique_ptr<ChatTemplate>();
  if (it->is_string()) {
    return FromSource(it->get<std::string>(), std::move(bos), std::move(eos), config_path);
  }
  // A list of {"name", "template"}: transformers uses "default" unless told otherwise.
  if (it->is_array()) {
    for (const Json& entry : *it) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        return FromSource(entry["template"].get<std::string>(), std::move(bos), std::move(eos),
                          absl::StrCat(config_path, " (the template named \"default\")"));
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat(config_path,
                     " lists named chat templates but none named \"default\"; pass one with "
                     "--chat-template FILE"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(config_path, ": chat_template must be a string or a list of named templates"));
}

absl::StatusOr<std::string> ChatTemplate::Apply(const Json& messages, const Json& tools,
                                                bool add_generation_prompt,
                                                const Json& extra) const {
  if (!messages.is_array() || messages.empty()) {
    return absl::InvalidArgumentError("messages must be a non-empty list of messages");
  }
  Json normalized = Json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    absl::StatusOr<Json> message = NormalizeMessage(messages[i], i);
    if (!message.ok()) return message.status();
    normalized.push_back(std::move(message).value());
  }
  Value::Dict variables;
  if (extra.is_object()) {
    for (const auto& [key, value] : extra.items())
      variables.emplace_back(key, Value::FromJson(value));
  }
  variables.emplace_back("messages", Value::FromJson(normalized));
  if (!tools.is_null()) variables.emplace_back("tools", Value::FromJson(tools));
  variables.emplace_back("add_generation_prompt", Value::Bool(add_generation_prompt));
  variables.emplace_back("bos_token", Value::String(bos_token_));
  variables.emplace_back("eos_token", Value::String(eos_token_));
  return template_.Render(variables);
}

}  // namespace coil::chat
