#!/usr/bin/env bash
# Runs every test: the Rust suites (unit + integration against the real binary, and the agent
# CLIs against the fake model server in network namespaces), the Dockerfile lint, and a smoke run
# of the README's run command. This is the README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."

# The pinned agent CLIs, from the npm registry into the managed prefix (reused when present).
bash scripts/install-agent-clis.sh

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --all-targets --no-fail-fast
else
  echo "cargo-nextest not found; using cargo test"
  cargo test --all-targets --no-fail-fast
fi
bash scripts/lint-docker.sh
bash scripts/smoke-run.sh
