#include "engine/http/openai_protocol.h"

#include <cmath>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace coil::http {
namespace {

// Parameters are checked one by one; the first refusal unwinds to ParseRequest as this
// exception (a request has dozens of fields, each of which can fail).
struct Refusal {
  ApiError error;
};

[[noreturn]] void Refuse(std::string param, std::string message) {
  throw Refusal{BadParam(std::move(param), std::move(message))};
}

const char* TypeName(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "a list";
    case Json::value_t::object:
      return "an object";
    default:
      return "a number";
  }
}

// The member `key`, or null when absent or JSON null (OpenAI treats null as "not given").
const Json* Find(const Json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> Number(const Json& body, const char* key) {
  const Json* value = Find(body, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number()) {
    Refuse(key, absl::StrCat("'", key, "' must be a number, not ", TypeName(*value)));
  }
  const double x = value->get<double>();
  if (!std::isfinite(x)) Refuse(key, absl::StrCat("'", key, "' must be finite"));
  return x;
}

std::optional<int64_t> Integer(const Json& body, const char* key) {
  const Json* value = Find(body, key);
  if (value == nullptr) return std::nullopt;
  if (value->is_number_integer() || value->is_number_unsigned()) {
    if (value->is_number_unsigned() &&
        value->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      Refuse(key, absl::StrCat("'", key, "' is too large"));
    }
    return value->get<int64_t>();
  }
  if (value->is_number_float()) {
    const double x = value->get<double>();
    if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 9e15) {
      return static_cast<int64_t>(x);
    }
  }
  Refuse(key, absl::StrCat("'", key, "' must be an integer, not ", TypeName(*value)));
}

std::optional<bool> Boolean(const Json& body, const char* key) {
  const Json* value = Find(body, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_boolean()) {
    Refuse(key, absl::StrCat("'", key, "' must be true or false, not ", TypeName(*value)));
  }
  return value->get<bool>();
}

int32_t InRange(const char* key, int64_t value, int64_t low, int64_t high) {
  if (value < low || value > high) {
    Refuse(key, absl::StrCat("'", key, "' is ", value, "; it must be in [", low, ", ", high, "]"));
  }
  return static_cast<int32_t>(value);
}

float InRange(const char* key, double value, double low, double high, bool low_open = false) {
  if (value < low || value > high || (low_open && value == low)) {
    Refuse(key, absl::StrCat("'", key, "' is ", value, "; it must be in ", low_open ? "(" : "[",
                             low, ", ", high, "]"));
  }
  return static_cast<float>(value);
}

std::vector<int32_t> TokenIds(const Json& list, const char* param) {
  std::vector<int32_t> ids;
  for (const Json& id : list) {
    if (!id.is_number_integer() && !id.is_number_unsigned()) {
      Refuse(param, absl::StrCat("'", param, "' mixes token ids with ", TypeName(id),
                                 "; send a string, a list of strings, a list of token ids or a "
                                 "list of lists of token ids"));
    }
    const int64_t value = id.get<int64_t>();
    if (value < std::numeric_limits<int32_t>::min() ||
        value > std::numeric_limits<int32_t>::max()) {
      Refuse(param, absl::StrCat("token id ", value, " in '", param, "' is out of range"));
    }
    ids.push_back(static_cast<int32_t>(value));
  }
  return ids;
}

const absl::flat_hash_set<std::string>& KnownParameters(Endpoint endpoint) {
  static const auto* common = new absl::flat_hash_set<std::string>{"model",
                                                                   "stream",
                                                                   "stream_options",
                                                                   "max_tokens",
                                                                   "temperature",
                                                                   "top_p",
                                                                   "seed",
                                                                   "stop",
                                                                   "presence_penalty",
                                                                   "frequency_penalty",
                                                                   "logprobs",
                                                                   "n",
                                                                   "user",
                                                                   "top_k",
                                                                   "min_p",
                                                                   "repetition_penalty",
                                                                   "ignore_eos",
                                                                   "return_token_ids",
                                                                   "stop_token_ids",
                                                                   "add_special_tokens",
                                                                   "logit_bias"};
  static const auto* completions = [] {
    auto* names = new absl::flat_hash_set<std::string>(*common);
    names->insert({"prompt", "echo", "best_of", "suffix"});
    return names;
  }();
  static const auto* chat = [] {
    auto* names = new absl::flat_hash_set<std::string>(*common);
    names->insert({"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice",
                   "parallel_tool_calls", "response_format", "chat_template_kwargs",
                   "add_generation_prompt"});
    return names;
  }();
  return endpoint == Endpoint::kCompletions ? *completions : *chat;
}

// The parameter a ValidateGeneration message is about.
std::string ParamOfValidation(const std::string& message, Endpoint endpoint) {
  const std::string prompt = endpoint == Endpoint::kCompletions ? "prompt" : "messages";
  if (absl::StartsWith(message, "the prompt (") || absl::StartsWith(message, "max_tokens")) {
    return endpoint == Endpoint::kCompletions ? "max_tokens" : "max_completion_tokens";
  }
  if (absl::StartsWith(message, "the prompt") || absl::StartsWith(message, "prompt token")) {
    return prompt;
  }
  if (absl::StartsWith(message, "stop token id")) return "stop_token_ids";
  if (absl::StrContains(message, "stop string")) return "stop";
  if (absl::StartsWith(message, "presence_penalty")) return "presence_penalty";
  const size_t space = message.find(' ');
  return message.substr(0, space);  // "temperature is ...", "top_k is ..."
}

}  // namespace

Json ApiError::ToJson() const {
  Json error = Json::object();
  error["message"] = message;
  error["type"] = type;
  error["param"] = param.empty() ? Json() : Json(param);
  error["code"] = code.empty() ? Json() : Json(code);
  return Json{{"error", std::move(error)}};
}

ApiError BadParam(std::string param, std::string message) {
  ApiError error;
  error.status = 400;
  error.message = std::move(message);
  error.param = std::move(param);
  return error;
}

ApiError FromStatus(const absl::Status& status, const std::string& param) {
  ApiError error;
  error.message = std::string(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      error.status = 400;
      error.param = param;
      break;
    case absl::StatusCode::kResourceExhausted:
      error.status = 429;
      error.type = "rate_limit_error";
      error.code = "queue_full";
      break;
    case absl::StatusCode::kUnavailable:
      error.status = 503;
      error.type = "service_unavailable";
      break;
    default:
      error.status = 500;
      error.type = "internal_error";
  }
  return error;
}

const char* FinishReasonName(StreamFinish reason) {
  switch (reason) {
    case StreamFinish::kLength:
      return "length";
    case StreamFinish::kStop:
    case StreamFinish::kEos:
      return "stop";
    default:
      return nullptr;
  }
}

Json LogprobsJson(Endpoint endpoint, const std::vector<StreamLogprob>& logprobs,
                  const tokenizer::Tokenizer& tokenizer, bool with_top, int32_t text_offset) {
  auto text_of = [&](int32_t id) {
    auto text = tokenizer.Decode({id}, /*skip_special_tokens=*/false);
    return text.ok() ? *text : std::string();
  };
  auto bytes_of = [](const std::string& text) {
    Json bytes = Json::array();
    for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
    return bytes;
  };
  if (endpoint == Endpoint::kCompletions) {
    Json tokens = Json::array();
    Json token_logprobs = Json::array();
    Json top_logprobs = Json::array();
    Json offsets = Json::array();
    int32_t offset = text_offset;
    for (const StreamLogprob& logprob : logprobs) {
      const std::string text = text_of(logprob.token_id);
      tokens.push_back(text);
      token_logprobs.push_back(logprob.logprob);
      offsets.push_back(offset);
      offset += static_cast<int32_t>(text.size());
      if (with_top) {
        Json top = Json::object();
        for (const TokenLogprob& alternative : logprob.top) {
          top[text_of(alternative.token_id)] = alternative.logprob;
        }
        top_logprobs.push_back(std::move(top));
      } else {
        top_logprobs.push_back(nullptr);
      }
    }
    return Json{{"tokens", std::move(tokens)},
                {"token_logprobs", std::move(token_logprobs)},
                {"top_logprobs", std::move(top_logprobs)},
                {"text_offset", std::move(offsets)}};
  }
  Json content = Json::array();
  for (const StreamLogprob& logprob : logprobs) {
    const std::string text = text_of(logprob.token_id);
    Json top = Json::array();
    if (with_top) {
      for (const TokenLogprob& alternative : logprob.top) {
        const std::string alt = text_of(alternative.token_id);
        top.push_back(
            Json{{"token", alt}, {"logprob", alternative.logprob}, {"bytes", bytes_of(alt)}});
      }
    }
    content.push_back(Json{{"token", text},
                           {"logprob", logprob.logprob},
                           {"bytes", bytes_of(text)},
                           {"top_logprobs", std::move(top)}});
  }
  return Json{{"content", std::move(content)}};
}

std::variant<ParsedRequest, ApiError> ParseRequest(Endpoint endpoint, const std::string& body_text,
                                                   const ProtocolContext& context,
                                                   uint64_t (*seed_source)()) {
  const bool chat = endpoint == Endpoint::kChatCompletions;
  Json body = Json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    return BadParam("",
                    "the request body is not valid JSON; send a JSON object "
                    "(Content-Type: application/json)");
  }
  if (!body.is_object()) {
    return BadParam("",
                    absl::StrCat("the request body must be a JSON object, not ", TypeName(body)));
  }
  try {
    ParsedRequest request;
    request.endpoint = endpoint;
    for (const auto& [key, value] : body.items()) {
      if (!KnownParameters(endpoint).contains(key)) request.ignored_parameters.push_back(key);
    }

    // model: optional (as in vLLM); when given it must be the served name.
    request.model = context.served_model_name;
    if (const Json* model = Find(body, "model")) {
      if (!model->is_string()) Refuse("model", "'model' must be a string");
      if (model->get<std::string>() != context.served_model_name) {
        ApiError error;
        error.status = 404;
        error.param = "model";
        error.code = "model_not_found";
        error.message = absl::StrCat("The model '", model->get<std::string>(),
                                     "' does not exist; this server serves '",
                                     context.served_model_name, "' (see GET /v1/models)");
        return error;
      }
    }

    // Parameters coil does not implement and that would change the answer are refused,
    // never ignored.
    if (const Json* bias = Find(body, "logit_bias"); bias != nullptr && !bias->empty()) {
      Refuse("logit_bias", "'logit_bias' is not supported by coil; remove it");
    }
    if (!chat) {
      if (const Json* suffix = Find(body, "suffix");
          suffix != nullptr && !(suffix->is_string() && suffix->get<std::string>().empty())) {
        Refuse("suffix", "'suffix' (insertion) is not supported by coil; remove it");
      }
    } else {
      if (const Json* format = Find(body, "response_format")) {
        if (!format->is_object() || format->value("type", "") != "text") {
          Refuse(
              "response_format",
              "'response_format' other than {\"type\": \"text\"} (JSON mode, JSON schema) is not "
              "supported by coil; remove it");
        }
      }
      if (const Json* choice = Find(body, "tool_choice")) {
        if (!choice->is_string() || (*choice != "none" && *choice != "auto")) {
          Refuse("tool_choice",
                 "'tool_choice' may be \"auto\" or \"none\"; coil does not force tool calls");
        }
      }
    }

    request.stream = Boolean(body, "stream").value_or(false);
    if (const Json* options = Find(body, "stream_options")) {
      if (!request.stream) {
        Refuse("stream_options", "'stream_options' is only allowed when 'stream' is true");
      }
      if (!options->is_object()) Refuse("stream_options", "'stream_options' must be an object");
      request.include_usage = Boolean(*options, "include_usage").value_or(false);
    }

    // Sampling.
    GenerationInput base;
    SamplingParams& sampling = base.sampling;
    sampling.temperature =
        InRange("temperature", Number(body, "temperature").value_or(1.0), 0.0, 1e6);
    sampling.top_p = InRange("top_p", Number(body, "top_p").value_or(1.0), 0.0, 1.0, true);
    sampling.presence_penalty =
        InRange("presence_penalty", Number(body, "presence_penalty").value_or(0.0), -2.0, 2.0);
    sampling.frequency_penalty =
        InRange("frequency_penalty", Number(body, "frequency_penalty").value_or(0.0), -2.0, 2.0);
    // vLLM's extras: top_k -1 or 0 disables it.
    const int64_t top_k = Integer(body, "top_k").value_or(0);
    sampling.top_k = top_k == -1 ? 0 : InRange("top_k", top_k, 0, 1 << 30);
    sampling.min_p = InRange("min_p", Number(body, "min_p").value_or(0.0), 0.0, 1.0);
    sampling.repetition_penalty = InRange(
        "repetition_penalty", Number(body, "repetition_penalty").value_or(1.0), 0.0, 1e6, true);
    base.ignore_eos = Boolean(body, "ignore_eos").value_or(false);
    request.return_token_ids = Boolean(body, "return_token_ids").value_or(false);
    const std::optional<int64_t> seed = Integer(body, "seed");

    // Logprobs: an integer on completions, a boolean plus top_logprobs on chat.
    if (chat) {
      request.logprobs = Boolean(body, "logprobs").value_or(false);
      if (auto top = Integer(body, "top_logprobs")) {
        request.top_logprobs = InRange("top_logprobs", *top, 0, 20);
        if (!request.logprobs && request.top_logprobs > 0) {
          Refuse("top_logprobs", "'top_logprobs' needs 'logprobs': true");
        }
      }
    } else if (Find(body, "logprobs") != nullptr) {
      const Json& value = *Find(body, "logprobs");
      if (value.is_boolean()) {  // some clients send a boolean here
        request.logprobs = value.get<bool>();
      } else {
        request.top_logprobs = InRange("logprobs", *Integer(body, "logprobs"), 0, 20);
        request.logprobs = true;
      }
    }
    sampling.logprobs = request.logprobs;
    sampling.top_logprobs = request.top_logprobs;

    // Length.
    std::optional<int64_t> max_tokens = Integer(body, "max_tokens");
    if (chat) {
      if (auto completion = Integer(body, "max_completion_tokens")) max_tokens = completion;
    } else if (!max_tokens.has_value()) {
      max_tokens = 16;  // the completions API's default
    }
    if (max_tokens.has_value()) {
      const char* name = chat && Find(body, "max_completion_tokens") != nullptr
                             ? "max_completion_tokens"
                             : "max_tokens";
      base.max_tokens = InRange(name, *max_tokens, 1, context.limits.max_model_len);
    }

    // Stops.
    if (const Json* stop = Find(body, "stop")) {
      if (stop->is_string()) {
        base.stop.push_back(stop->get<std::string>());
      } else if (stop->is_array()) {
        for (const Json& item : *stop) {
          if (!item.is_string()) Refuse("stop", "'stop' must be a string or a list of strings");
          base.stop.push_back(item.get<std::string>());
        }
      } else {
        Refuse("stop", "'stop' must be a string or a list of strings");
      }
    }
    if (const Json* ids = Find(body, "stop_token_ids")) {
      if (!ids->is_array())
        Refuse("stop_token_ids", "'stop_token_ids' must be a list of token ids");
      base.stop_token_ids = TokenIds(*ids, "stop_token_ids");
    }

    const int32_t n = InRange("n", Integer(body, "n").value_or(1), 1, context.max_n);
    if (!chat) {
      if (auto best_of = Integer(body, "best_of"); best_of.has_value() && *best_of != n) {
        Refuse("best_of", "'best_of' other than 'n' is not supported by coil; remove it");
      }
      request.echo = Boolean(body, "echo").value_or(false);
      if (request.echo && request.logprobs) {
        Refuse("echo",
               "'echo' with 'logprobs' needs the prompt's logprobs, which coil does not "
               "compute; drop one of them");
      }
    }
    if (const Json* user = Find(body, "user"); user != nullptr && !user->is_string()) {
      Refuse("user", "'user' must be a string");
    }

    // Prompts. vLLM's add_special_tokens: the tokenizer post-processor's tokens (Llama 2's
    // BOS) around a text prompt; by default on for completions and off for chat, whose
    // template writes them itself.
    const bool add_special_tokens = Boolean(body, "add_special_tokens").value_or(!chat);
    std::vector<std::vector<int32_t>> prompts;
    auto encode = [&](const std::string& text, const char* param) {
      auto ids = context.tokenizer->Encode(text, add_special_tokens);
      if (!ids.ok()) Refuse(param, absl::StrCat("the prompt text: ", ids.status().message()));
      return std::move(ids).value();
    };
    if (chat) {
      const Json* messages = Find(body, "messages");
      if (messages == nullptr) Refuse("messages", "'messages' is required");
      if (!messages->is_array() || messages->empty()) {
        Refuse("messages", "'messages' must be a non-empty list of messages");
      }
      if (context.chat_template == nullptr) {
        Refuse("messages",
               "this model has no chat template (its tokenizer_config.json has no chat_template); "
               "start coil-serve with --chat-template FILE, or use /v1/completions");
      }
      Json tools;
      if (const Json* given = Find(body, "tools")) {
        if (!given->is_array()) Refuse("tools", "'tools' must be a list of tools");
        if (!given->empty() &&
            !(Find(body, "tool_choice") != nullptr && *Find(body, "tool_choice") == "none")) {
          tools = *given;
        }
      }
      Json extra;
      if (const Json* kwargs = Find(body, "chat_template_kwargs")) {
        if (!kwargs->is_object())
          Refuse("chat_template_kwargs", "'chat_template_kwargs' must be an object");
        extra = *kwargs;
      }
      const bool add_generation_prompt = Boolean(body, "add_generation_prompt").value_or(true);
      auto text = context.chat_template->Apply(*messages, tools, add_generation_prompt, extra);
      if (!text.ok()) Refuse("messages", std::string(text.status().message()));
      request.prompt_texts.push_back(*text);
      prompts.push_back(encode(*text, "messages"));
    } else {
      const Json* prompt = Find(body, "prompt");
      if (prompt == nullptr) Refuse("prompt", "'prompt' is required");
      auto decode = [&](const std::vector<int32_t>& ids) {
        auto text = context.tokenizer->Decode(ids, /*skip_special_tokens=*/false);
        return text.ok() ? *text : std::string();
      };
      if (prompt->is_string()) {
        request.prompt_texts.push_back(prompt->get<std::string>());
        prompts.push_back(encode(prompt->get<std::string>(), "prompt"));
      } else if (prompt->is_array() && !prompt->empty()) {
        if ((*prompt)[0].is_number()) {
          prompts.push_back(TokenIds(*prompt, "prompt"));
          request.prompt_texts.push_back(request.echo ? decode(prompts.back()) : "");
        } else {
          for (const Json& item : *prompt) {
            if (item.is_string()) {
              request.prompt_texts.push_back(item.get<std::string>());
              prompts.push_back(encode(item.get<std::string>(), "prompt"));
            } else if (item.is_array()) {
              prompts.push_back(TokenIds(item, "prompt"));
              request.prompt_texts.push_back(request.echo ? decode(prompts.back()) : "");
            } else {
              Refuse("prompt",
                     "'prompt' must be a string, a list of strings, a list of token ids "
                     "or a list of lists of token ids");
            }
          }
        }
      } else {
        Refuse("prompt",
               "'prompt' must be a non-empty string or list (of strings, of token ids, "
               "or of lists of token ids)");
      }
    }
    if (static_cast<int64_t>(prompts.size()) * n > context.max_n) {
      Refuse("n", absl::StrCat(prompts.size(), " prompts times n = ", n, " is ", prompts.size() * n,
                               " choices; the limit is ", context.max_n));
    }

    for (size_t p = 0; p < prompts.size(); ++p) {
      request.prompt_tokens.push_back(static_cast<int32_t>(prompts[p].size()));
      for (int32_t j = 0; j < n; ++j) {
        ChoiceInput choice;
        choice.index = static_cast<int32_t>(p) * n + j;
        choice.prompt_index = static_cast<int32_t>(p);
        choice.input = base;
        choice.input.prompt = prompts[p];
        // A given seed makes the choices reproducible (seed + j each, so that n samples
        // differ); without one each choice draws its own.
        choice.input.sampling.seed = seed.has_value()
                                         ? static_cast<uint64_t>(*seed) + static_cast<uint64_t>(j)
                                         : seed_source();
        const absl::Status valid = ValidateGeneration(choice.input, context.limits);
        if (!valid.ok()) {
          Refuse(ParamOfValidation(std::string(valid.message()), endpoint),
                 std::string(valid.message()));
        }
        request.choices.push_back(std::move(choice));
      }
    }
    return request;
  } catch (const Refusal& refusal) {
    return refusal.error;
  }
}

}  // namespace coil::http
