// ParseRequest against the OpenAI API reference (and vLLM's extensions) parameter by
// parameter: the defaults a client that sends nothing gets, each sampling parameter's
// mapping onto the engine's SamplingParams, the forms `prompt` and `stop` may take, and the
// refusals (status, param, a message that says what to send instead). Expected values are
// the API's documented ones, written out here, not read back from the parser.
#include "engine/http/openai_protocol.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <variant>

#include "engine/chat/chat_template.h"
#include "engine/tokenizer/tokenizer.h"

namespace coil::http {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

uint64_t NextSeed() {
  static uint64_t seed = 1000;
  return seed++;
}

class OpenAiProtocolTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto tokenizer = tokenizer::Tokenizer::FromFile(COIL_GPT_NEOX_TOKENIZER);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = std::move(tokenizer).value().release();
    auto chat = chat::ChatTemplate::FromSource(
        "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}",
        "<|endoftext|>", "<|endoftext|>", "test");
    ASSERT_TRUE(chat.ok()) << chat.status();
    template_ = std::move(chat).value().release();
  }

  ProtocolContext Context(bool with_template = true) const {
    ProtocolContext context;
    context.tokenizer = tokenizer_;
    context.chat_template = with_template ? template_ : nullptr;
    context.served_model_name = "served";
    context.limits.max_model_len = 4096;
    context.limits.vocab_size = tokenizer_->vocab_size();
    context.max_n = 8;
    return context;
  }

  ParsedRequest Parse(Endpoint endpoint, const std::string& body) const {
    auto parsed = ParseRequest(endpoint, body, Context(), &NextSeed);
    if (const ApiError* error = std::get_if<ApiError>(&parsed)) {
      ADD_FAILURE() << body << " refused: " << error->message;
      return {};
    }
    return std::get<ParsedRequest>(std::move(parsed));
  }

  ApiError Refused(Endpoint endpoint, const std::string& body, bool with_template = true) const {
    auto parsed = ParseRequest(endpoint, body, Context(with_template), &NextSeed);
    if (!std::holds_alternative<ApiError>(parsed)) {
      ADD_FAILURE() << body << " was accepted";
      return {};
    }
    return std::get<ApiError>(parsed);
  }

  static std::vector<int32_t> Encode(const std::string& text, bool add_special_tokens) {
    return tokenizer_->Encode(text, add_special_tokens).value();
  }

  static inline tokenizer::Tokenizer* tokenizer_ = nullptr;
  static inline chat::ChatTemplate* template_ = nullptr;
};

TEST_F(OpenAiProtocolTest, CompletionDefaultsAreTheApisDefaults) {
  ParsedRequest request = Parse(Endpoint::kCompletions, R"({"prompt": "Hello"})");
  EXPECT_EQ(request.model, "served");  // `model` may be left out
  EXPECT_FALSE(request.stream);
  EXPECT_FALSE(request.include_usage);
  EXPECT_FALSE(request.echo);
  EXPECT_FALSE(request.logprobs);
  ASSERT_EQ(request.choices.size(), 1u);
  const GenerationInput& input = request.choices[0].input;
  EXPECT_EQ(input.max_tokens, 16);  // the completions API's default
  EXPECT_EQ(input.sampling.temperature, 1.0f);
  EXPECT_EQ(input.sampling.top_p, 1.0f);
  EXPECT_EQ(input.sampling.top_k, 0);
  EXPECT_EQ(input.sampling.min_p, 0.0f);
  EXPECT_EQ(input.sampling.presence_penalty, 0.0f);
  EXPECT_EQ(input.sampling.frequency_penalty, 0.0f);
  EXPECT_EQ(input.sampling.repetition_penalty, 1.0f);
  EXPECT_FALSE(input.ignore_eos);
  EXPECT_TRUE(input.stop.empty());
  EXPECT_EQ(input.prompt, Encode("Hello", true));
  EXPECT_GE(input.sampling.seed, 1000u);  // drawn by the server: no seed was given
}

TEST_F(OpenAiProtocolTest, EverySamplingParameterReachesTheEngine) {
  ParsedRequest request = Parse(Endpoint::kCompletions, R"({
      "model": "served", "prompt": [5, 6, 7], "max_tokens": 9, "temperature": 0.7,
      "top_p": 0.9, "top_k": 40, "min_p": 0.05, "presence_penalty": 0.5,
      "frequency_penalty": -0.25, "repetition_penalty": 1.1, "seed": 7, "n": 3,
      "stop": "\n\n", "stop_token_ids": [0, 2], "ignore_eos": true, "user": "someone",
      "logprobs": 2, "return_token_ids": true})");
  ASSERT_EQ(request.choices.size(), 3u);
  EXPECT_TRUE(request.logprobs);
  EXPECT_EQ(request.top_logprobs, 2);
  EXPECT_TRUE(request.return_token_ids);
  EXPECT_TRUE(request.ignored_parameters.empty());
  for (int j = 0; j < 3; ++j) {
    const ChoiceInput& choice = request.choices[j];
    EXPECT_EQ(choice.index, j);
    EXPECT_EQ(choice.prompt_index, 0);
    const GenerationInput& input = choice.input;
    EXPECT_THAT(input.prompt, ElementsAre(5, 6, 7));
    EXPECT_EQ(input.max_tokens, 9);
    EXPECT_FLOAT_EQ(input.sampling.temperature, 0.7f);
    EXPECT_FLOAT_EQ(input.sampling.top_p, 0.9f);
    EXPECT_EQ(input.sampling.top_k, 40);
    EXPECT_FLOAT_EQ(input.sampling.min_p, 0.05f);
    EXPECT_FLOAT_EQ(input.sampling.presence_penalty, 0.5f);
    EXPECT_FLOAT_EQ(input.sampling.frequency_penalty, -0.25f);
    EXPECT_FLOAT_EQ(input.sampling.repetition_penalty, 1.1f);
    EXPECT_TRUE(input.sampling.logprobs);
    EXPECT_EQ(input.sampling.top_logprobs, 2);
    // A given seed makes the n choices reproducible and different: seed + j.
    EXPECT_EQ(input.sampling.seed, 7u + j);
    EXPECT_THAT(input.stop, ElementsAre("\n\n"));  // a string is one stop
    EXPECT_THAT(input.stop_token_ids, ElementsAre(0, 2));
    EXPECT_TRUE(input.ignore_eos);
  }
}

TEST_F(OpenAiProtocolTest, TopKMinusOneAndNullsMeanNotGiven) {
  ParsedRequest request = Parse(
      Endpoint::kCompletions,
      R"({"prompt": "x", "top_k": -1, "temperature": null, "stop": null, "max_tokens": null})");
  ASSERT_EQ(request.choices.size(), 1u);
  EXPECT_EQ(request.choices[0].input.sampling.top_k, 0);
  EXPECT_EQ(request.choices[0].input.sampling.temperature, 1.0f);
  EXPECT_EQ(request.choices[0].input.max_tokens, 16);
  EXPECT_TRUE(request.choices[0].input.stop.empty());
}

TEST_F(OpenAiProtocolTest, PromptForms) {
  // A list of strings and a list of lists of ids: one prompt each, n choices per prompt,
  // indexed prompt-major as the API does.
  ParsedRequest strings =
      Parse(Endpoint::kCompletions, R"({"prompt": ["one", "two words"], "n": 2, "seed": 1})");
  ASSERT_EQ(strings.choices.size(), 4u);
  EXPECT_THAT(strings.prompt_tokens, ElementsAre(Encode("one", true).size(),
                                                 Encode("two words", true).size()));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(strings.choices[i].index, i);
    EXPECT_EQ(strings.choices[i].prompt_index, i / 2);
    EXPECT_EQ(strings.choices[i].input.prompt, Encode(i < 2 ? "one" : "two words", true));
    EXPECT_EQ(strings.choices[i].input.sampling.seed, 1u + i % 2);
  }
  ParsedRequest ids = Parse(Endpoint::kCompletions, R"({"prompt": [[1, 2], [3]], "echo": true})");
  ASSERT_EQ(ids.choices.size(), 2u);
  EXPECT_THAT(ids.choices[1].input.prompt, ElementsAre(3));
  EXPECT_TRUE(ids.echo);
  EXPECT_EQ(ids.prompt_texts[0], tokenizer_->Decode({1, 2}, false).value());  // echoed back
  ParsedRequest list_stop =
      Parse(Endpoint::kCompletions, R"({"prompt": "x", "stop": ["a", "bc"]})");
  EXPECT_THAT(list_stop.choices[0].input.stop, ElementsAre("a", "bc"));
}

TEST_F(OpenAiProtocolTest, StreamOptionsIncludeUsage) {
  ParsedRequest request = Parse(
      Endpoint::kChatCompletions,
      R"({"messages": [{"role": "user", "content": "Hi"}], "stream": true,
          "stream_options": {"include_usage": true}})");
  EXPECT_TRUE(request.stream);
  EXPECT_TRUE(request.include_usage);
}

TEST_F(OpenAiProtocolTest, ChatRendersTheTemplateWithoutAddingSpecialTokens) {
  ParsedRequest request = Parse(Endpoint::kChatCompletions, R"({
      "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
      "max_tokens": 5, "max_completion_tokens": 3, "frobnicate": 1})");
  const std::string rendered = "<|system|>Be brief.\n<|user|>Hi\n<|assistant|>";
  ASSERT_EQ(request.choices.size(), 1u);
  EXPECT_THAT(request.prompt_texts, ElementsAre(rendered));
  EXPECT_EQ(request.choices[0].input.prompt, Encode(rendered, false));
  EXPECT_EQ(request.choices[0].input.max_tokens, 3);  // max_completion_tokens wins
  EXPECT_THAT(request.ignored_parameters, ElementsAre("frobnicate"));
  // Chat has no default length: up to the context.
  ParsedRequest open = Parse(Endpoint::kChatCompletions,
                             R"({"messages": [{"role": "user", "content": "Hi"}]})");
  EXPECT_FALSE(open.choices[0].input.max_tokens.has_value());
  ParsedRequest no_prompt = Parse(
      Endpoint::kChatCompletions,
      R"({"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": false})");
  EXPECT_THAT(no_prompt.prompt_texts, ElementsAre("<|user|>Hi\n"));
}

struct RefusalCase {
  Endpoint endpoint;
  std::string body;
  int status;
  std::string param;
  std::string message;
};

TEST_F(OpenAiProtocolTest, RefusalsNameTheParameterAndWhatToSend) {
  const Endpoint c = Endpoint::kCompletions;
  const Endpoint chat = Endpoint::kChatCompletions;
  const std::string msgs = R"("messages": [{"role": "user", "content": "Hi"}])";
  const RefusalCase cases[] = {
      {c, "{not json", 400, "", "not valid JSON"},
      {c, "[1, 2]", 400, "", "must be a JSON object, not a list"},
      {c, R"({"model": "other", "prompt": "x"})", 404, "model", "this server serves 'served'"},
      {c, R"({})", 400, "prompt", "'prompt' is required"},
      {c, R"({"prompt": ""})", 400, "prompt", ""},
      {c, R"({"prompt": [1, "a"]})", 400, "prompt", "mixes token ids"},
      {c, R"({"prompt": [999999]})", 400, "prompt", ""},
      {c, R"({"prompt": "x", "temperature": "hot"})", 400, "temperature", "must be a number"},
      {c, R"({"prompt": "x", "temperature": -1})", 400, "temperature", "must be in [0"},
      {c, R"({"prompt": "x", "top_p": 0})", 400, "top_p", "must be in (0"},
      {c, R"({"prompt": "x", "top_k": -2})", 400, "top_k", "must be in [0"},
      {c, R"({"prompt": "x", "min_p": 1.5})", 400, "min_p", "must be in [0, 1]"},
      {c, R"({"prompt": "x", "presence_penalty": 2.5})", 400, "presence_penalty", "[-2, 2]"},
      {c, R"({"prompt": "x", "frequency_penalty": -3})", 400, "frequency_penalty", "[-2, 2]"},
      {c, R"({"prompt": "x", "repetition_penalty": 0})", 400, "repetition_penalty", "(0"},
      {c, R"({"prompt": "x", "user": 5})", 400, "user", "'user' must be a string"},
      {c, R"({"prompt": "x", "stop": 5})", 400, "stop", "a string or a list of strings"},
      {c, R"({"prompt": "x", "max_tokens": 0})", 400, "max_tokens", "must be in [1, 4096]"},
      {c, R"({"prompt": "x", "n": 9})", 400, "n", "must be in [1, 8]"},
      {c, R"({"prompt": ["a", "b", "c"], "n": 3})", 400, "n", "the limit is 8"},
      {c, R"({"prompt": "x", "logit_bias": {"5": 1}})", 400, "logit_bias", "not supported"},
      {c, R"({"prompt": "x", "best_of": 2})", 400, "best_of", "not supported"},
      {c, R"({"prompt": "x", "suffix": "y"})", 400, "suffix", "not supported"},
      {c, R"({"prompt": "x", "echo": true, "logprobs": 1})", 400, "echo", "drop one of them"},
      {c, R"({"prompt": "x", "stream_options": {}})", 400, "stream_options",
       "only allowed when 'stream' is true"},
      {c, R"({"prompt": "x", "logprobs": 21})", 400, "logprobs", "[0, 20]"},
      {chat, R"({})", 400, "messages", "'messages' is required"},
      {chat, R"({"messages": []})", 400, "messages", "non-empty list"},
      {chat, "{" + msgs + R"(, "top_logprobs": 2})", 400, "top_logprobs", "needs 'logprobs'"},
      {chat, "{" + msgs + R"(, "response_format": {"type": "json_object"}})", 400,
       "response_format", "not supported"},
      {chat, "{" + msgs + R"(, "tool_choice": "required"})", 400, "tool_choice", "\"auto\""},
      {chat, "{" + msgs + R"(, "max_completion_tokens": 5000})", 400, "max_completion_tokens",
       ""},
  };
  for (const RefusalCase& refusal : cases) {
    ApiError error = Refused(refusal.endpoint, refusal.body);
    EXPECT_EQ(error.status, refusal.status) << refusal.body << ": " << error.message;
    EXPECT_EQ(error.param, refusal.param) << refusal.body << ": " << error.message;
    EXPECT_THAT(error.message, HasSubstr(refusal.message)) << refusal.body;
    EXPECT_FALSE(error.message.empty()) << refusal.body;
  }
  // A 404 for the model carries the API's code; the rest are invalid requests.
  EXPECT_EQ(Refused(c, R"({"model": "x", "prompt": "y"})").code, "model_not_found");
  EXPECT_EQ(Refused(c, R"({"prompt": "x", "n": 0})").type, "invalid_request_error");
}

TEST_F(OpenAiProtocolTest, ChatWithoutATemplateSaysHowToGiveOne) {
  ApiError error = Refused(Endpoint::kChatCompletions,
                           R"({"messages": [{"role": "user", "content": "Hi"}]})",
                           /*with_template=*/false);
  EXPECT_EQ(error.status, 400);
  EXPECT_EQ(error.param, "messages");
  EXPECT_THAT(error.message, HasSubstr("--chat-template"));
  EXPECT_THAT(error.message, HasSubstr("/v1/completions"));
}

TEST_F(OpenAiProtocolTest, ErrorObjectsAndStatuses) {
  ApiError full = FromStatus(absl::ResourceExhaustedError("queue full"), "");
  EXPECT_EQ(full.status, 429);
  EXPECT_EQ(full.type, "rate_limit_error");
  EXPECT_EQ(full.code, "queue_full");
  ApiError draining = FromStatus(absl::UnavailableError("draining"), "");
  EXPECT_EQ(draining.status, 503);
  EXPECT_EQ(draining.type, "service_unavailable");
  ApiError bad = FromStatus(absl::InvalidArgumentError("bad stop"), "stop");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.param, "stop");
  EXPECT_EQ(FromStatus(absl::InternalError("step failed"), "").status, 500);
  const Json json = BadParam("top_p", "'top_p' is 2").ToJson();
  EXPECT_EQ(json.dump(),
            R"({"error":{"message":"'top_p' is 2","type":"invalid_request_error",)"
            R"("param":"top_p","code":null}})");
  EXPECT_STREQ(FinishReasonName(StreamFinish::kLength), "length");
  EXPECT_STREQ(FinishReasonName(StreamFinish::kStop), "stop");
  EXPECT_STREQ(FinishReasonName(StreamFinish::kEos), "stop");
}

}  // namespace
}  // namespace coil::http
