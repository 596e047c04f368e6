#!/usr/bin/env bash
# Validates coil's Kubernetes manifests offline (no cluster needed):
#   1. yamllint on the sources (deploy/k8s) and on every rendered overlay;
#   2. every overlay renders with `kubectl kustomize` (or a standalone `kustomize build`);
#   3. every rendered object passes the schema check of deploy/k8s/validate/validate.mjs
#      (the Kubernetes API schemas from the npm package kubernetes-models, plus a strict
#      check for undeclared fields);
#   4. every deliberately broken manifest in tests/unit/deploy/broken-manifests fails that
#      check with the reason its "# expect:" line names (and the valid controls pass),
#      so the check is known to catch what it claims to;
#   5. so does every broken overlay in tests/unit/deploy/broken-overlays (a real overlay
#      with a faulty patch on top): it renders, and its rendering fails the check.
# Installs the validator's npm packages (npm ci, from package-lock.json) when they are
# missing. Exits non-zero on any failure, naming it.
#
# Usage: scripts/check_manifests.sh
set -euo pipefail
cd "$(dirname "$0")/.."

k8s=deploy/k8s
validate_dir=$k8s/validate
broken_dir=tests/unit/deploy/broken-manifests
broken_overlays_dir=tests/unit/deploy/broken-overlays
overlays=(cpu-tp1 cpu-tp2 gpu-tp1 gpu-tp2 cpu-tp2-multipod)
failures=0
fail() {
  echo "check_manifests: FAIL: $*" >&2
  failures=$((failures + 1))
}

# ---- tools: each missing one is an error, never a silent pass ----
if kubectl version --client >/dev/null 2>&1; then
  render() { kubectl kustomize "$1"; }
  renderer="kubectl kustomize ($(kubectl version --client 2>/dev/null | grep -i kustomize | head -n1))"
elif command -v kustomize >/dev/null; then
  render() { kustomize build "$1"; }
  renderer="kustomize build ($(kustomize version 2>/dev/null | head -n1))"
else
  echo "check_manifests: neither kubectl (1.27 or newer, with kustomize v5) nor kustomize is installed;" \
    "install one of them (Debian's kubernetes-client is too old and conflicts with other kubectl packages)" >&2
  exit 1
fi
for tool in yamllint node npm; do
  command -v "$tool" >/dev/null || {
    echo "check_manifests: $tool is not installed; run scripts/setup.sh (yamllint) or install Node.js 18+ (node, npm)" >&2
    exit 1
  }
done
echo "check_manifests: rendering with $renderer"

if [[ ! -d "$validate_dir/node_modules/kubernetes-models" || "$validate_dir/package-lock.json" -nt "$validate_dir/node_modules" ]]; then
  echo "check_manifests: installing the validator's npm packages (npm ci)"
  (cd "$validate_dir" && npm ci --no-audit --no-fund --loglevel=error)
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ---- 1. the sources ----
yamllint -s -c "$k8s/.yamllint" "$k8s" || fail "yamllint found problems in $k8s"

# ---- 2 and 3. every overlay: render, lint, validate ----
for overlay in "${overlays[@]}"; do
  rendered="$work/$overlay.yaml"
  if ! render "$k8s/overlays/$overlay" >"$rendered"; then
    fail "overlay $overlay does not render"
    continue
  fi
  yamllint -s -c "$k8s/.yamllint" "$rendered" || fail "yamllint: rendered overlay $overlay"
  if node "$validate_dir/validate.mjs" "$rendered" >"$work/$overlay.log"; then
    echo "check_manifests: $overlay: $(grep -c ': ok$' "$work/$overlay.log") objects valid"
  else
    cat "$work/$overlay.log" >&2
    fail "overlay $overlay has invalid objects"
  fi
done

# ---- 4. the broken manifests must fail, each for its reason ----
for manifest in "$broken_dir"/*.yaml; do
  expect=$(sed -n 's/^# expect: //p' "$manifest" | head -n1)
  [[ -n "$expect" ]] || { fail "$manifest has no '# expect:' line"; continue; }
  status=0
  output=$(node "$validate_dir/validate.mjs" "$manifest" 2>&1) || status=$?
  if [[ "$expect" == ok ]]; then
    ((status == 0)) || fail "$manifest (the valid control) was rejected: $output"
  elif ((status == 0)); then
    fail "$manifest was accepted; expected: $expect"
  elif [[ "$output" != *"$expect"* ]]; then
    fail "$manifest was rejected for another reason than '$expect': $output"
  else
    echo "check_manifests: $(basename "$manifest"): rejected as expected ($expect)"
  fi
done
# ---- 5. the broken overlays must render, then fail, each for its reason ----
for overlay in "$broken_overlays_dir"/*/; do
  name=$(basename "$overlay")
  expect=$(sed -n 's/^# expect: //p' "$overlay/kustomization.yaml" | head -n1)
  [[ -n "$expect" ]] || { fail "$overlay has no '# expect:' line"; continue; }
  if ! render "$overlay" >"$work/broken-$name.yaml"; then
    fail "broken overlay $name does not render (it must render and then fail the schema check)"
    continue
  fi
  status=0
  output=$(node "$validate_dir/validate.mjs" "$work/broken-$name.yaml" 2>&1) || status=$?
  if ((status == 0)); then
    fail "broken overlay $name was accepted; expected: $expect"
  elif [[ "$output" != *"$expect"* ]]; then
    fail "broken overlay $name was rejected for another reason than '$expect': $output"
  else
    echo "check_manifests: broken overlay $name: rejected as expected ($expect)"
  fi
done

# yamllint must refuse the broken YAML too.
if yamllint -s -c "$k8s/.yamllint" "$broken_dir/duplicate-key.yaml" >/dev/null; then
  fail "yamllint accepted $broken_dir/duplicate-key.yaml"
fi

if ((failures > 0)); then
  echo "check_manifests: $failures failed" >&2
  exit 1
fi
echo "check_manifests: all overlays render, lint and validate; every broken manifest is rejected"
