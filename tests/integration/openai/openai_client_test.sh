#!/usr/bin/env bash
# Runs openai_client_test.mjs (node's test runner) with the official OpenAI Node client,
# installing it from package-lock.json when it is missing. Exits 77 (skipped) when node,
# npm or the npm registry is unreachable, saying so.
#
# Usage: openai_client_test.sh COIL_SERVE COIL_MAKE_MODEL COIL_CLI MPIEXEC
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export COIL_SERVE=$1 COIL_MAKE_MODEL=$2 COIL_CLI=$3 MPIEXEC=$4
for tool in node npm; do
  if ! command -v "$tool" >/dev/null; then
    echo "openai_client_test: SKIPPED: $tool is not installed (Node.js 18+ runs the OpenAI client)"
    exit 77
  fi
done
if [[ ! -d "$here/node_modules/openai" || "$here/package-lock.json" -nt "$here/node_modules" ]]; then
  if ! timeout 60 npm ping --loglevel=error >/dev/null 2>&1; then
    echo "openai_client_test: SKIPPED: the npm registry is unreachable, so the openai package cannot be installed"
    exit 77
  fi
  echo "openai_client_test: installing the openai package (npm ci)"
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
fi
cd "$here"
exec node --test --test-concurrency=1 openai_client_test.mjs
