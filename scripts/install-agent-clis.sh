#!/usr/bin/env bash
# Installs the pinned agent CLIs into the managed npm prefix the service uses
# (<SKILL_RUNNER_AGENT_CACHE_DIR>/npm, default ~/.local/share/skill-runner/agent-cache/npm).
# Reused when the pinned versions are already there; only the npm registry is contacted.
# iFlow's CLI (@iflow-ai/iflow-cli) is not published on the npm registry, so it is not installed.
set -euo pipefail
CACHE="${SKILL_RUNNER_AGENT_CACHE_DIR:-$HOME/.local/share/skill-runner/agent-cache}"
PREFIX="${SKILL_RUNNER_NPM_PREFIX:-$CACHE/npm}"
PACKAGES=(
  "@openai/codex@0.169.0"
  "@google/gemini-cli@0.61.0"
  "@anthropic-ai/claude-code@2.1.329"
  "opencode-ai@1.18.33"
  "@qwen-code/qwen-code@0.24.4"
  "@kilocode/cli@7.7.7"
)
missing=()
for spec in "${PACKAGES[@]}"; do
  name="${spec%@*}"
  version="${spec##*@}"
  manifest="$PREFIX/lib/node_modules/$name/package.json"
  if [ -f "$manifest" ] && grep -q "\"version\": \"$version\"" "$manifest"; then
    continue
  fi
  missing+=("$spec")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "agent CLIs: pinned versions present in $PREFIX"
  exit 0
fi
echo "agent CLIs: installing ${missing[*]} into $PREFIX"
mkdir -p "$PREFIX"
npm install --global --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "${missing[@]}"
