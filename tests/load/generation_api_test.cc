// The OpenAI side of coil-loadgen without a server: server-sent events split anywhere come
// out as the same events, HTTP error answers map to the status codes the report counts, and
// a gRPC request becomes the POST /v1/completions body that asks for the same generation.
// Expected values are worked out by hand from the SSE format and coil's HTTP error table
// (docs/openai-api.md).
#include "tools/loadgen/generation_api.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace coil::load {
namespace {

std::vector<std::string> Events(const std::string& stream, size_t piece) {
  std::vector<std::string> events;
  SseParser parser([&](const std::string& data) { events.push_back(data); });
  for (size_t i = 0; i < stream.size(); i += piece) {
    parser.Feed(stream.data() + i, std::min(piece, stream.size() - i));
  }
  return events;
}

TEST(SseParserTest, SameEventsWhateverTheChunking) {
  const std::string stream =
      "data: {\"a\":1}\n\n"
      ": a comment line is no data\n\n"
      "data:{\"b\":2}\n\n"
      "event: message\ndata: line one\ndata: line two\n\n"
      "data: [DONE]\n\n"
      "data: unfinished";
  const std::vector<std::string> expected = {"{\"a\":1}", "{\"b\":2}", "line one\nline two",
                                             "[DONE]"};
  for (size_t piece : {1, 2, 3, 7, 64, 4096}) {
    EXPECT_EQ(Events(stream, piece), expected) << "pieces of " << piece;
  }
}

TEST(StatusFromHttpTest, CodesAndMessages) {
  const std::string body =
      R"({"error": {"message": "'max_tokens' must be positive", "type": "invalid_request_error",
          "param": "max_tokens", "code": null}})";
  const absl::Status bad = StatusFromHttp(400, body);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(), "HTTP 400: 'max_tokens' must be positive");
  EXPECT_EQ(StatusFromHttp(404, "").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(StatusFromHttp(413, "").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StatusFromHttp(431, "").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StatusFromHttp(429, "").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(StatusFromHttp(503, "not json").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(StatusFromHttp(503, "not json").message(), "HTTP 503");
  EXPECT_EQ(StatusFromHttp(500, "").code(), absl::StatusCode::kInternal);
}

TEST(CompletionsBodyTest, AsksForTheSameGeneration) {
  coil::v1::GenerateRequest request;
  request.mutable_token_ids()->add_ids(7);
  request.mutable_token_ids()->add_ids(9);
  request.mutable_sampling()->set_max_tokens(12);
  request.mutable_sampling()->set_ignore_eos(true);
  const nlohmann::json by_ids = nlohmann::json::parse(CompletionsBody(request, "m"));
  EXPECT_EQ(by_ids["model"], "m");
  EXPECT_EQ(by_ids["prompt"], nlohmann::json::array({7, 9}));
  EXPECT_EQ(by_ids["max_tokens"], 12);
  EXPECT_EQ(by_ids["temperature"], 0.0);
  EXPECT_EQ(by_ids["ignore_eos"], true);
  EXPECT_EQ(by_ids["stream"], true);
  EXPECT_EQ(by_ids["stream_options"]["include_usage"], true);
  EXPECT_EQ(by_ids["return_token_ids"], true);

  coil::v1::GenerateRequest text;
  text.set_text("Hello");
  const nlohmann::json by_text = nlohmann::json::parse(CompletionsBody(text, ""));
  EXPECT_EQ(by_text["prompt"], "Hello");
  EXPECT_FALSE(by_text.contains("model"));
}

TEST(MakeOpenAiApiTest, RefusesMalformedTargets) {
  for (const char* target : {"", "localhost", ":80", "host:0", "host:70000", "host:http"}) {
    EXPECT_EQ(MakeOpenAiApi(target, "").status().code(), absl::StatusCode::kInvalidArgument)
        << target;
  }
  EXPECT_TRUE(MakeOpenAiApi("127.0.0.1:8000", "").ok());
}

TEST(RequestCancelTest, AbortRunsOnCancelOrAtOnceWhenAlreadyCancelled) {
  int aborts = 0;
  RequestCancel running;
  running.SetAbort([&] { ++aborts; });
  EXPECT_EQ(aborts, 0);
  running.Cancel();
  EXPECT_EQ(aborts, 1);
  EXPECT_TRUE(running.cancelled());

  RequestCancel early;
  early.Cancel();
  early.SetAbort([&] { ++aborts; });
  EXPECT_EQ(aborts, 2);
  early.SetAbort(nullptr);
  early.Cancel();  // nothing left to abort
  EXPECT_EQ(aborts, 2);
}

}  // namespace
}  // namespace coil::load
