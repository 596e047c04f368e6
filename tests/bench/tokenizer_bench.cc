// Tokenizer throughput on one core: encoding English prose (the cache warm, as in a
// running server, and cold, every word merged from scratch), multilingual text, decoding,
// and streaming detokenization. Reports bytes or tokens per second; asserts nothing.
//
//   build/tests/bench/tokenizer_bench [--benchmark_filter=Encode]
//
// The English prose is the license texts Debian installs in /usr/share/common-licenses
// (about 250 kB of real English), concatenated once.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/tokenizer/incremental_detokenizer.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/tokenizer.h"

namespace coil::tokenizer {
namespace {

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

const Tokenizer& GptNeox(bool cached) {
  static const std::unique_ptr<Tokenizer> with_cache =
      Tokenizer::FromFile(COIL_GPT_NEOX_TOKENIZER).value();
  static const std::unique_ptr<Tokenizer> without_cache =
      Tokenizer::FromFile(COIL_GPT_NEOX_TOKENIZER, TokenizerOptions{.word_cache_entries = 0})
          .value();
  return cached ? *with_cache : *without_cache;
}

void EncodeBench(benchmark::State& state, const std::string& text, bool cached) {
  const Tokenizer& tokenizer = GptNeox(cached);
  size_t tokens = 0;
  for (auto _ : state) {
    const auto ids = tokenizer.Encode(text);
    tokens = ids->size();
    benchmark::DoNotOptimize(ids->data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["bytes"] = static_cast<double>(text.size());
  state.counters["tokens"] = static_cast<double>(tokens);
}

void BM_EncodeEnglishProse(benchmark::State& state) {
  EncodeBench(state, EnglishProse(), /*cached=*/true);
}
BENCHMARK(BM_EncodeEnglishProse)->Unit(benchmark::kMillisecond);

void BM_EncodeEnglishProseNoCache(benchmark::State& state) {
  EncodeBench(state, EnglishProse(), /*cached=*/false);
}
BENCHMARK(BM_EncodeEnglishProseNoCache)->Unit(benchmark::kMillisecond);

void BM_EncodeMultilingual(benchmark::State& state) {
  EncodeBench(state, MixedText(), /*cached=*/true);
}
BENCHMARK(BM_EncodeMultilingual)->Unit(benchmark::kMillisecond);

void BM_PreTokenizeEnglishProse(benchmark::State& state) {
  const std::string& text = EnglishProse();
  for (auto _ : state) {
    size_t pieces = 0;
    ForEachGpt2Piece(text, [&pieces](absl::string_view) { ++pieces; });
    benchmark::DoNotOptimize(pieces);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_PreTokenizeEnglishProse)->Unit(benchmark::kMillisecond);

void BM_DecodeEnglishProse(benchmark::State& state) {
  const Tokenizer& tokenizer = GptNeox(true);
  const std::vector<int32_t> ids = tokenizer.Encode(EnglishProse()).value();
  for (auto _ : state) {
    const auto text = tokenizer.Decode(ids);
    benchmark::DoNotOptimize(text->data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * ids.size()));
}
BENCHMARK(BM_DecodeEnglishProse)->Unit(benchmark::kMillisecond);

// One Push per token, as the engine streams: items/s is tokens per second.
void BM_StreamDetokenizeEnglishProse(benchmark::State& state) {
  const Tokenizer& tokenizer = GptNeox(true);
  const std::vector<int32_t> ids = tokenizer.Encode(EnglishProse()).value();
  for (auto _ : state) {
    IncrementalDetokenizer detokenizer(tokenizer);
    size_t bytes = 0;
    for (const int32_t id : ids) bytes += detokenizer.Push(id)->size();
    bytes += detokenizer.Finish().size();
    benchmark::DoNotOptimize(bytes);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * ids.size()));
}
BENCHMARK(BM_StreamDetokenizeEnglishProse)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace coil::tokenizer

BENCHMARK_MAIN();
