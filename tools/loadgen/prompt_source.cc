#include "tools/loadgen/prompt_source.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace coil::load {
namespace {

absl::StatusOr<double> ParseNumber(absl::string_view text, const std::string& spec) {
  double value = 0;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(text), &value) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--prompt-tokens \"", spec, "\" is not a length spec; use N, A-B (uniform) or MEAN,STD"));
  }
  return value;
}

}  // namespace

absl::StatusOr<LengthSpec> LengthSpec::Parse(const std::string& spec) {
  LengthSpec result;
  const std::vector<absl::string_view> normal = absl::StrSplit(spec, ',');
  const std::vector<absl::string_view> uniform = absl::StrSplit(spec, '-');
  if (normal.size() == 2) {
    result.kind_ = Kind::kNormal;
    auto mean = ParseNumber(normal[0], spec);
    auto std = ParseNumber(normal[1], spec);
    if (!mean.ok()) return mean.status();
    if (!std.ok()) return std.status();
    result.a_ = *mean;
    result.b_ = *std;
    if (result.b_ < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prompt-tokens \"", spec, "\" has a negative standard deviation"));
    }
  } else if (uniform.size() == 2) {
    result.kind_ = Kind::kUniform;
    auto lo = ParseNumber(uniform[0], spec);
    auto hi = ParseNumber(uniform[1], spec);
    if (!lo.ok()) return lo.status();
    if (!hi.ok()) return hi.status();
    result.a_ = std::round(*lo);
    result.b_ = std::round(*hi);
    if (result.a_ > result.b_) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prompt-tokens \"", spec, "\": the lower end exceeds the upper end"));
    }
  } else if (normal.size() == 1 && uniform.size() == 1) {
    auto n = ParseNumber(spec, spec);
    if (!n.ok()) return n.status();
    result.a_ = std::round(*n);
  } else {
    return ParseNumber("x", spec).status();
  }
  if (result.a_ < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prompt-tokens \"", spec, "\" allows prompts under 1 token; raise it"));
  }
  return result;
}

int32_t LengthSpec::Sample(std::mt19937_64& rng) const {
  double value = a_;
  switch (kind_) {
    case Kind::kFixed:
      break;
    case Kind::kUniform:
      value = static_cast<double>(std::uniform_int_distribution<int64_t>(
          static_cast<int64_t>(a_), static_cast<int64_t>(b_))(rng));
      break;
    case Kind::kNormal:
      value = std::round(std::normal_distribution<double>(a_, b_)(rng));
      value = std::clamp(value, 1.0, static_cast<double>(Max()));
      break;
  }
  return static_cast<int32_t>(value);
}

int32_t LengthSpec::Max() const {
  switch (kind_) {
    case Kind::kUniform:
      return static_cast<int32_t>(b_);
    case Kind::kNormal:
      return static_cast<int32_t>(std::max(1.0, std::round(a_ + 4 * b_)));
    default:
      return static_cast<int32_t>(a_);
  }
}

const char* DefaultPromptText() {
  return "The harbour town woke before the sun. Fishermen carried their nets down the stone steps "
         "while the baker on the corner pulled the first loaves from an oven that had burned all "
         "night. Gulls argued over the scraps by the market, and a boy with a wooden cart sold "
         "newspapers that still smelled of ink. Nobody hurried, yet everything was done by the "
         "time "
         "the bells of the old church rang seven.\n"
         "In the library at the top of the hill, a woman named Ada kept the records of every ship "
         "that had entered the bay for a hundred years. She wrote in a careful hand: the name of "
         "the vessel, the cargo, the weather, the number of crew. Visitors asked her why she still "
         "used paper. She answered that paper forgets nothing it is told and tells nothing it was "
         "not told, which is more than can be said for most people.\n"
         "One winter a storm closed the harbour for eleven days. The wind tore slates from the "
         "roofs and the sea climbed the walls of the quay. When it was over, the townspeople found "
         "a small boat resting in the square, upright and undamaged, with a sealed jar of seeds "
         "under its bench. Ada wrote it down, as she wrote everything down, and in the spring the "
         "seeds were planted along the road to the lighthouse.\n"
         "They grew into tall yellow flowers that turned to follow the light. Children counted "
         "them on their way to school; there were three hundred and twelve the first year and "
         "more every year after. Travellers who came to see them asked where they had come from, "
         "and the answer was always the same: read the book in the library, page four hundred and "
         "nine, and then decide for yourself.\n"
         "Science, someone once said, is a way of keeping the questions honest. The engineers who "
         "built the new breakwater measured the tides for two full years before they laid a single "
         "stone, and they published every number, including the ones that did not fit. The "
         "breakwater has stood for forty winters. Their notebooks are shelved beside Ada's.\n";
}

std::vector<int32_t> CutWindow(const std::vector<int32_t>& corpus, int32_t length,
                               std::mt19937_64& rng) {
  std::vector<int32_t> out;
  if (corpus.empty()) return out;
  out.reserve(static_cast<size_t>(length));
  size_t at = std::uniform_int_distribution<size_t>(0, corpus.size() - 1)(rng);
  for (int32_t i = 0; i < length; ++i) {
    out.push_back(corpus[at]);
    at = (at + 1) % corpus.size();
  }
  return out;
}

std::vector<int32_t> RandomIds(int32_t length, int32_t first_id, int32_t end_id,
                               std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> id(first_id, end_id - 1);
  std::vector<int32_t> out(static_cast<size_t>(length));
  for (int32_t& value : out) value = id(rng);
  return out;
}

absl::StatusOr<std::vector<Prompt>> ReadPromptsJsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot open --prompts file ", path,
                                            "; give a JSONL file with one prompt per line"));
  }
  std::vector<Prompt> prompts;
  std::string line;
  for (int line_number = 1; std::getline(in, line); ++line_number) {
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const auto where = [&] { return absl::StrCat(path, ":", line_number, ": "); };
    if (!j.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(where(), "not a JSON object"));
    }
    Prompt prompt;
    if (j.contains("prompt") && j["prompt"].is_string()) {
      prompt.text = j["prompt"].get<std::string>();
      if (prompt.text->empty()) {
        return absl::InvalidArgumentError(absl::StrCat(where(), "\"prompt\" is empty"));
      }
    } else if (j.contains("prompt_token_ids") && j["prompt_token_ids"].is_array() &&
               !j["prompt_token_ids"].empty()) {
      for (const auto& id : j["prompt_token_ids"]) {
        if (!id.is_number_integer()) {
          return absl::InvalidArgumentError(
              absl::StrCat(where(), "\"prompt_token_ids\" holds a non-integer"));
        }
        prompt.ids.push_back(id.get<int32_t>());
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), "needs \"prompt\" (a string) or \"prompt_token_ids\" (a non-empty array)"));
    }
    if (j.contains("output_tokens")) {
      if (!j["output_tokens"].is_number_integer() || j["output_tokens"].get<int64_t>() < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), "\"output_tokens\" must be a positive integer"));
      }
      prompt.output_tokens = j["output_tokens"].get<int32_t>();
    }
    prompts.push_back(std::move(prompt));
  }
  if (prompts.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--prompts file ", path, " holds no prompt"));
  }
  return prompts;
}

}  // namespace coil::load
