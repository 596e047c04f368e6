// coil-cli: talks to a running coil-serve.
//
//   coil-cli --target HOST:PORT generate ("PROMPT" | --ids 1,2,3) [--max-tokens N]
//            [--temperature T] [--seed S] [--cache-prefix-tokens N] [--print-ids]
//   coil-cli --target HOST:PORT info        (exit 1 when unreachable or not serving)
//   coil-cli --target HOST:PORT tokenize "TEXT"
//
// generate streams the text as it arrives (or, with --print-ids, the generated ids
// comma-separated) and then prints what it measured to stderr.
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/command_line.h"
#include "engine/client/client.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "coil-serve address, HOST:PORT");
ABSL_FLAG(std::string, ids, "", "generate: the prompt as comma-separated token ids");
ABSL_FLAG(std::optional<int32_t>, max_tokens, std::nullopt,
          "generate: tokens to generate (default: up to the context limit)");
ABSL_FLAG(float, temperature, 0.0f, "generate: sampling temperature (0: greedy)");
ABSL_FLAG(std::optional<uint64_t>, seed, std::nullopt, "generate: random seed");
ABSL_FLAG(std::vector<std::string>, stop, {}, "generate: stop strings, comma-separated");
ABSL_FLAG(bool, ignore_eos, false, "generate: keep going after the end-of-text token");
ABSL_FLAG(int32_t, cache_prefix_tokens, 0,
          "generate: also keep the server's prefix-cache snapshot after this many prompt tokens");
ABSL_FLAG(bool, print_ids, false, "generate: print the generated ids instead of text");
ABSL_FLAG(bool, add_special_tokens, false,
          "generate, tokenize: put the tokenizer's special tokens around the text, as its "
          "post-processor says (Llama 2's BOS <s>, say)");
ABSL_FLAG(int32_t, timeout_ms, 0, "deadline of the call in milliseconds (0: none)");
ABSL_FLAG(int32_t, connect_timeout_ms, 5000, "how long to wait for the server");

namespace coil {
namespace {

using Clock = std::chrono::steady_clock;

int Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "coil-cli: %s: %s\n", what.c_str(), status.ToString().c_str());
  return 1;
}

const char* FinishName(coil::v1::FinishReason reason) {
  switch (reason) {
    case coil::v1::FINISH_REASON_LENGTH:
      return "length";
    case coil::v1::FINISH_REASON_STOP:
      return "stop";
    case coil::v1::FINISH_REASON_EOS:
      return "eos";
    case coil::v1::FINISH_REASON_CANCELLED:
      return "cancelled";
    default:
      return "unspecified";
  }
}

int Generate(Client& client, const std::vector<std::string>& args) {
  coil::v1::GenerateRequest request;
  if (!absl::GetFlag(FLAGS_ids).empty()) {
    for (absl::string_view piece :
         absl::StrSplit(absl::GetFlag(FLAGS_ids), ',', absl::SkipEmpty())) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(piece, &id)) {
        return Fail("--ids", absl::InvalidArgumentError(std::string(piece) + " is not a token id"));
      }
      request.mutable_token_ids()->add_ids(id);
    }
  } else if (args.size() == 3) {
    request.set_text(args[2]);
    request.set_add_special_tokens(absl::GetFlag(FLAGS_add_special_tokens));
  } else {
    return Fail("generate", absl::InvalidArgumentError("give a PROMPT or --ids 1,2,3"));
  }
  coil::v1::SamplingParams* sampling = request.mutable_sampling();
  if (auto max_tokens = absl::GetFlag(FLAGS_max_tokens)) sampling->set_max_tokens(*max_tokens);
  sampling->set_temperature(absl::GetFlag(FLAGS_temperature));
  if (auto seed = absl::GetFlag(FLAGS_seed)) sampling->set_seed(*seed);
  for (const std::string& stop : absl::GetFlag(FLAGS_stop)) sampling->add_stop(stop);
  sampling->set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  request.set_cache_prefix_tokens(absl::GetFlag(FLAGS_cache_prefix_tokens));

  const bool print_ids = absl::GetFlag(FLAGS_print_ids);
  bool first_id = true;
  const Clock::time_point start = Clock::now();
  std::optional<Clock::time_point> first_token;
  CallOptions options;
  if (absl::GetFlag(FLAGS_timeout_ms) > 0) {
    options.timeout = std::chrono::milliseconds(absl::GetFlag(FLAGS_timeout_ms));
  }
  auto generation = client.Generate(
      request,
      [&](const coil::v1::GenerateResponse& response) {
        if (!first_token.has_value() && response.token_ids_size() > 0) first_token = Clock::now();
        if (print_ids) {
          for (int32_t id : response.token_ids()) {
            std::printf(first_id ? "%d" : ",%d", id);
            first_id = false;
          }
        } else {
          std::fputs(response.text().c_str(), stdout);
        }
        std::fflush(stdout);
        return true;
      },
      options);
  std::printf("\n");
  std::fflush(stdout);  // before the summary on stderr
  if (!generation.ok()) return Fail("generate", generation.status());
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double ttft =
      first_token.has_value() ? std::chrono::duration<double>(*first_token - start).count() : 0.0;
  const auto& final = generation->final;
  const int32_t generated = static_cast<int32_t>(generation->token_ids.size());
  std::fprintf(stderr,
               "finish: %s; %d prompt (%d from the prefix cache) + %d generated tokens; time "
               "to first token %.1f ms; %.1f ms in all; %.1f tokens/s after the first "
               "(server: queue %.1f ms, ttft %.1f ms)\n",
               FinishName(final.finish_reason()), final.usage().prompt_tokens(),
               final.usage().cached_prompt_tokens(), generated, ttft * 1e3, seconds * 1e3,
               generated > 1 && seconds > ttft ? (generated - 1) / (seconds - ttft) : 0.0,
               final.timings().queue_seconds() * 1e3,
               final.timings().time_to_first_token_seconds() * 1e3);
  return 0;
}

int Info(Client& client) {
  auto serving = client.Health();
  if (!serving.ok()) return Fail("health", serving.status());
  auto info = client.Info();
  if (!info.ok()) return Fail("info", info.status());
  std::printf("%s", info->DebugString().c_str());
  std::printf("health: %s\n", *serving ? "SERVING" : "NOT_SERVING");
  return *serving ? 0 : 1;
}

int Tokenize(Client& client, const std::vector<std::string>& args) {
  if (args.size() != 3) return Fail("tokenize", absl::InvalidArgumentError("give the TEXT"));
  auto ids = client.Tokenize(args[2], absl::GetFlag(FLAGS_add_special_tokens));
  if (!ids.ok()) return Fail("tokenize", ids.status());
  std::printf("%s\n", absl::StrJoin(*ids, ",").c_str());
  return 0;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "coil-cli --target HOST:PORT (generate (\"PROMPT\" | --ids 1,2,3) [--max-tokens N] "
      "[--temperature T] [--seed S] [--print-ids] [--add-special-tokens] | info | tokenize "
      "\"TEXT\" [--add-special-tokens])");
  const std::vector<std::string> args = ParseDashedCommandLine(argc, argv);
  if (args.size() < 2) {
    std::fprintf(stderr, "%s\n", absl::ProgramUsageMessage().data());
    return 2;
  }
  const std::string command = args[1];
  if (command != "generate" && command != "info" && command != "tokenize") {
    std::fprintf(stderr, "coil-cli: unknown command '%s'; use generate, info or tokenize\n",
                 command.c_str());
    return 2;
  }
  auto client = Client::Connect(absl::GetFlag(FLAGS_target),
                                std::chrono::milliseconds(absl::GetFlag(FLAGS_connect_timeout_ms)));
  if (!client.ok()) return Fail("connect", client.status());
  if (command == "generate") return Generate(**client, args);
  if (command == "info") return Info(**client);
  return Tokenize(**client, args);
}

}  // namespace
}  // namespace coil

int main(int argc, char** argv) { return coil::Main(argc, argv); }
