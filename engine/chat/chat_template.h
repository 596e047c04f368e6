// A model's chat template: the Jinja source from --chat-template FILE or from the model
// directory's tokenizer_config.json (`chat_template`, a string or a list of named
// templates), parsed once at start-up, and the bos/eos token strings it refers to.
// Apply turns an OpenAI `messages` list (and `tools`) into the prompt text the way
// transformers' apply_chat_template does. Invariant: a ChatTemplate exists only for a
// template that parsed, so Apply fails only for what the conversation decides.
#ifndef COIL_ENGINE_CHAT_CHAT_TEMPLATE_H_
#define COIL_ENGINE_CHAT_CHAT_TEMPLATE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/chat/jinja.h"
#include "nlohmann/json.hpp"

namespace coil::chat {

class ChatTemplate {
 public:
  // `template_file` (may be empty) wins over tokenizer_config.json. Returns null when
  // neither has a template (state-spaces/mamba2-* ship none); INVALID_ARGUMENT when the
  // template uses a construct the interpreter does not implement (naming it) or a file
  // cannot be read or parsed.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> Load(const std::string& model_dir,
                                                            const std::string& template_file);
  // From the template text and the special token strings.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> FromSource(const std::string& source,
                                                                  std::string bos_token,
                                                                  std::string eos_token,
                                                                  std::string origin);

  // Renders `messages` (an OpenAI messages array). `tools` may be null (absent); `extra`
  // (may be null) adds variables, as vLLM's chat_template_kwargs does. INVALID_ARGUMENT
  // for a malformed message (naming it) or when the template raises an exception.
  absl::StatusOr<std::string> Apply(const nlohmann::ordered_json& messages,
                                    const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                    const nlohmann::ordered_json& extra) const;

  const std::string& origin() const { return origin_; }  // where the template came from
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 private:
  ChatTemplate(Template parsed, std::string bos, std::string eos, std::string origin)
      : template_(std::move(parsed)),
        bos_token_(std::move(bos)),
        eos_token_(std::move(eos)),
        origin_(std::move(origin)) {}

  Template template_;
  std::string bos_token_;
  std::string eos_token_;
  std::string origin_;
};

}  // namespace coil::chat

#endif  // COIL_ENGINE_CHAT_CHAT_TEMPLATE_H_
