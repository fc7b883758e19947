#!/usr/bin/env bash
# Starts the service exactly as the README says (`cargo run --release`, 127.0.0.1:8000, ./data)
# and checks that it answers, lists the bundled skills and runs the README's first quick-start
# request, then stops it with SIGTERM.
set -euo pipefail
cd "$(dirname "$0")/.."
base=http://127.0.0.1:8000

if curl -s -o /dev/null "$base/v1/system/ping"; then
  echo "!!! SKIPPED smoke run: something already listens on 127.0.0.1:8000 !!!"
  exit 0
fi
had_data=0; [ -e data ] && had_data=1
cargo build --release --quiet
log=target/smoke-run.log
setsid cargo run --release --quiet >"$log" 2>&1 &
pid=$!
stop() {
  kill -TERM -- "-$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  [ "$had_data" = 1 ] || rm -rf data
}
trap stop EXIT

for _ in $(seq 1 300); do
  curl -s -o /dev/null "$base/v1/system/ping" && break
  sleep 0.1
done
code=$(curl -s -o /dev/null -w '%{http_code}' "$base/v1/system/ping" || true)
if [ "$code" != 204 ]; then
  echo "smoke run: the service did not answer (ping: $code)"; cat "$log"; exit 1
fi
skills=$(curl -s "$base/v1/skills")
if ! grep -q '"id":"text-stats"' <<<"$skills" || grep -q '"health":"degraded"' <<<"$skills"; then
  echo "smoke run: bundled skills missing or degraded: $skills"; exit 1
fi
[ -f data/skill_runner.db ] || { echo "smoke run: no database under ./data"; exit 1; }
# The README's first quick-start request, as written there.
created=$(curl -s -X POST http://127.0.0.1:8000/v1/jobs -H 'content-type: application/json' \
  -d '{"skill_id": "hello", "input": {"name": "Ada"}}')
id=$(sed -n 's/.*"request_id":"\([^"]*\)".*/\1/p' <<<"$created")
[ -n "$id" ] || { echo "smoke run: the quick-start create failed: $created"; exit 1; }
for _ in $(seq 1 100); do
  result=$(curl -s "http://127.0.0.1:8000/v1/jobs/$id/result")
  grep -q '"greeting":"Hello, Ada!"' <<<"$result" && break
  sleep 0.1
done
grep -q '"greeting":"Hello, Ada!"' <<<"$result" || { echo "smoke run: quick start gave: $result"; exit 1; }
echo "smoke run: 'cargo run --release' serves $base, lists the bundled skills, runs the quick start, keeps SQLite under ./data"
