// Tokenizer throughput on one core: encoding English prose with each tokenizer family (the
// word cache warm, as in a running server, and for GPT-NeoX also cold, every word merged
// from scratch), multilingual text, the pre-tokenizers alone (the hand-written GPT-2 scanner,
// coil's regular expressions on the Llama 3 pattern, and ICU's regular expressions on it
// for comparison), decoding, and streaming detokenization. Reports bytes or tokens per
// second; asserts nothing.
//
//   build/tests/bench/tokenizer_bench [--benchmark_filter=Encode]
//
// The English prose is the license texts Debian installs in /usr/share/common-licenses
// (about 190 kB of real English), concatenated once. The family files (Llama 3, Qwen 3,
// Gemma 3, Llama 2) are the ones the tests fetch into build/tokenizer-families; a benchmark
// whose file is missing says so. tests/bench/tokenizer_reference_bench.mjs times Hugging
// Face's implementation on the same text.
#include <benchmark/benchmark.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>
#include <unicode/utext.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/tokenizer/gpt2_split.h"
#include "engine/tokenizer/incremental_detokenizer.h"
#include "engine/tokenizer/regex.h"
#include "engine/tokenizer/tokenizer.h"

namespace coil::tokenizer {
namespace {

constexpr char kLlama3Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

const std::string& EnglishProse() {
  static const std::string prose = [] {
    std::string text;
    for (const char* name : {"GPL-3", "GPL-2", "LGPL-2.1", "GFDL-1.3", "MPL-2.0", "MPL-1.1",
                             "Apache-2.0", "Artistic", "CC0-1.0", "LGPL-3", "GPL-1"}) {
      text += ReadFile(std::filesystem::path("/usr/share/common-licenses") / name);
    }
    if (text.empty()) {
      // Not Debian: a fallback paragraph, repeated.
      for (int i = 0; i < 2000; ++i) {
        text +=
            "The engine turns each prompt into tokens, schedules the work, and streams "
            "the generated text back to the client as soon as it is stable. ";
      }
    }
    return text;
  }();
  return prose;
}

// Every test string of the reference vectors (many scripts, emoji, code, a long English
// paragraph), one after another.
const std::string& MixedText() {
  static const std::string text = [] {
    std::string all;
    std::ifstream file(COIL_TOKENIZER_TEST_DATA_DIR "/gpt_neox_vectors.jsonl");
    std::string line;
    while (std::getline(file, line)) {
      all += nlohmann::json::parse(line)["text"].get<std::string>() + "\n";
    }
    return all;
  }();
  return text;
}

// The tokenizer of `family` ("gpt-neox" is the shipped file), loaded once; null when its
// file is missing.
const Tokenizer* Family(const std::string& family, bool cached = true) {
  static auto* loaded = new std::map<std::pair<std::string, bool>, std::unique_ptr<Tokenizer>>();
  const auto key = std::make_pair(family, cached);
  if (auto it = loaded->find(key); it != loaded->end()) return it->second.get();
  const std::string path = family == "gpt-neox" ? std::string(COIL_GPT_NEOX_TOKENIZER)
                                                : std::string(COIL_TOKENIZER_FAMILY_DIR) + "/" +
                                                      family + "/tokenizer.json";
  TokenizerOptions options;
  if (!cached) options.word_cache_entries = 0;
  auto tokenizer = Tokenizer::FromFile(path, options);
  (*loaded)[key] = tokenizer.ok() ? std::move(*tokenizer) : nullptr;
  return (*loaded)[key].get();
}

void EncodeBench(benchmark::State& state, const std::string& family, const std::string& text,
                 bool cached) {
  const Tokenizer* tokenizer = Family(family, cached);
  if (tokenizer == nullptr) {
    state.SkipWithError(
        ("no " + family + " tokenizer.json (run the tokenizer tests to fetch it)").c_str());
    return;
  }
  (void)tokenizer->Encode(text);  // warms the word cache
  size_t tokens = 0;
  for (auto _ : state) {
    const auto ids = tokenizer->Encode(text);
    tokens = ids->size();
    benchmark::DoNotOptimize(ids->data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["bytes"] = static_cast<double>(text.size());
  state.counters["tokens"] = static_cast<double>(tokens);
}

void BM_EncodeEnglishProse(benchmark::State& state, const char* family) {
  EncodeBench(state, family, EnglishProse(), /*cached=*/true);
}
BENCHMARK_CAPTURE(BM_EncodeEnglishProse, gpt_neox, "gpt-neox")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeEnglishProse, llama3, "llama3")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeEnglishProse, qwen3, "qwen3")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeEnglishProse, gemma3, "gemma3")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeEnglishProse, llama2, "llama2")->Unit(benchmark::kMillisecond);

void BM_EncodeEnglishProseNoCache(benchmark::State& state, const char* family) {
  EncodeBench(state, family, EnglishProse(), /*cached=*/false);
}
BENCHMARK_CAPTURE(BM_EncodeEnglishProseNoCache, gpt_neox, "gpt-neox")
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeEnglishProseNoCache, llama3, "llama3")->Unit(benchmark::kMillisecond);

void BM_EncodeMultilingual(benchmark::State& state, const char* family) {
  EncodeBench(state, family, MixedText(), /*cached=*/true);
}
BENCHMARK_CAPTURE(BM_EncodeMultilingual, gpt_neox, "gpt-neox")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeMultilingual, llama3, "llama3")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeMultilingual, gemma3, "gemma3")->Unit(benchmark::kMillisecond);

void BM_PreTokenizeGpt2Scanner(benchmark::State& state) {
  const std::string& text = EnglishProse();
  for (auto _ : state) {
    size_t pieces = 0;
    ForEachGpt2Piece(text, [&pieces](absl::string_view) { ++pieces; });
    benchmark::DoNotOptimize(pieces);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_PreTokenizeGpt2Scanner)->Unit(benchmark::kMillisecond);

void BM_PreTokenizeLlama3Regex(benchmark::State& state) {
  const std::string& text = EnglishProse();
  const auto regex = Regex::Compile(kLlama3Pattern).value();
  size_t pieces = 0;
  for (auto _ : state) {
    pieces = 0;
    regex->ForEachMatch(text, [&pieces](size_t, size_t) { ++pieces; });
    benchmark::DoNotOptimize(pieces);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["pieces"] = static_cast<double>(pieces);
}
BENCHMARK(BM_PreTokenizeLlama3Regex)->Unit(benchmark::kMillisecond);

// ICU's regular expressions on the same pattern (over UTF-8 through a UText), for the
// choice of engine: what they would cost, measured rather than guessed.
void BM_PreTokenizeLlama3IcuRegex(benchmark::State& state) {
  const std::string& text = EnglishProse();
  UErrorCode error = U_ZERO_ERROR;
  std::unique_ptr<icu::RegexPattern> pattern(
      icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(kLlama3Pattern), 0, error));
  if (U_FAILURE(error)) {
    state.SkipWithError(u_errorName(error));
    return;
  }
  UText* utext = utext_openUTF8(nullptr, text.data(), static_cast<int64_t>(text.size()), &error);
  std::unique_ptr<icu::RegexMatcher> matcher(pattern->matcher(error));
  matcher->reset(utext);
  size_t pieces = 0;
  for (auto _ : state) {
    pieces = 0;
    matcher->reset(utext);
    while (matcher->find(error)) ++pieces;
    benchmark::DoNotOptimize(pieces);
  }
  utext_close(utext);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["pieces"] = static_cast<double>(pieces);
}
BENCHMARK(BM_PreTokenizeLlama3IcuRegex)->Unit(benchmark::kMillisecond);

void BM_DecodeEnglishProse(benchmark::State& state, const char* family) {
  const Tokenizer* tokenizer = Family(family);
  if (tokenizer == nullptr) {
    state.SkipWithError("tokenizer.json missing");
    return;
  }
  const std::vector<int32_t> ids = tokenizer->Encode(EnglishProse()).value();
  for (auto _ : state) {
    const auto text = tokenizer->Decode(ids);
    benchmark::DoNotOptimize(text->data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * ids.size()));
}
BENCHMARK_CAPTURE(BM_DecodeEnglishProse, gpt_neox, "gpt-neox")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DecodeEnglishProse, llama2, "llama2")->Unit(benchmark::kMillisecond);

// One Push per token, as the engine streams: items/s is tokens per second.
void BM_StreamDetokenizeEnglishProse(benchmark::State& state, const char* family) {
  const Tokenizer* tokenizer = Family(family);
  if (tokenizer == nullptr) {
    state.SkipWithError("tokenizer.json missing");
    return;
  }
  const std::vector<int32_t> ids = tokenizer->Encode(EnglishProse()).value();
  for (auto _ : state) {
    IncrementalDetokenizer detokenizer(*tokenizer);
    size_t bytes = 0;
    for (const int32_t id : ids) bytes += detokenizer.Push(id)->size();
    bytes += detokenizer.Finish().size();
    benchmark::DoNotOptimize(bytes);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * ids.size()));
}
BENCHMARK_CAPTURE(BM_StreamDetokenizeEnglishProse, gpt_neox, "gpt-neox")
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_StreamDetokenizeEnglishProse, llama2, "llama2")->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace coil::tokenizer

BENCHMARK_MAIN();
