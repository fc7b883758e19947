#!/usr/bin/env bash
# Retakes the console screenshots in docs/screenshots/ (docs/console.md shows them) by running the
# browser tests with SKILL_RUNNER_SCREENSHOTS set; the tests themselves never write them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-browser.sh
out="$(pwd)/docs/screenshots"
SKILL_RUNNER_SCREENSHOTS="$out" cargo nextest run --workspace --test console --test example_client \
  -E 'test(/^browser_/)' --no-fail-fast
ls -l "$out"
