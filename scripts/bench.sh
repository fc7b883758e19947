#!/usr/bin/env bash
# Benchmark: start-up time, memory and request throughput of the release binary. Prints figures;
# nothing here passes or fails on timing.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
if ! command -v wrk >/dev/null 2>&1; then
  (apt-get update -qq && apt-get install -y -qq wrk) >/dev/null 2>&1 || echo "wrk unavailable: throughput figures will be skipped"
fi
exec python3 scripts/bench.py "$@"
