#!/usr/bin/env bash
# Runs every test: the Rust suites (unit + integration against the real binary, the store on
# SQLite and on a throw-away PostgreSQL cluster, and the agent CLIs against the fake model
# server and the console in a headless Chromium, both in network namespaces), the Dockerfile
# lint and build-stage check, and a smoke run of the README's run command. This is the README's
# test command.
set -euo pipefail
cd "$(dirname "$0")/.."

# The pinned agent CLIs, from the npm registry into the managed prefix (reused when present),
# Debian's Chromium with its WebDriver for the console's browser tests, and the Python tools
# (from PyPI, pinned): the official MCP SDK that drives the MCP server in tests/service/mcp.rs
# and skills-ref, the Agent Skills reference validator tests/service/skills_ref.rs agrees with.
bash scripts/install-agent-clis.sh
bash scripts/install-browser.sh
bash scripts/install-axe.sh
bash scripts/install-python-tools.sh

# No test may leave a file in the working tree (a run that writes outside its own folder is a
# containment bug): what git sees must be the same after the tests as before.
tree_before=$(git status --porcelain --untracked-files=all 2>/dev/null || true)
check_tree() {
  local after
  after=$(git status --porcelain --untracked-files=all 2>/dev/null || true)
  if [ "$after" != "$tree_before" ]; then
    echo "!!! the tests changed the working tree:"
    diff <(echo "$tree_before") <(echo "$after") || true
    exit 1
  fi
}

# The smoke run needs a release build. It checks that the README's command works, not how fast
# the binary is, so its build here skips optimisation (the longest part of it; `scripts/bench.sh`
# builds the optimised binary again before it measures), and it is built at the lowest CPU
# priority while the tests run (they mostly wait; the release profile has its own target folder
# and lock), then waited for before the smoke run. It gets a process group of its own
# (`set -m`) to be stopped with, but stays in this session: with the kernel's autogroups, a new
# session would get an equal share of the CPU whatever its nice value.
export CARGO_PROFILE_RELEASE_OPT_LEVEL=0
mkdir -p target
set -m
nice -n 19 cargo build --release --quiet >target/release-build.log 2>&1 &
release_build=$!
set +m

# The browser tests' screenshots (each console page at 1280 and 375 px among them) are kept as
# the run's artifacts, under target/ (ignored by git).
export SKILL_RUNNER_SCREENSHOTS="${SKILL_RUNNER_SCREENSHOTS:-$PWD/target/screenshots}"

# A throw-away PostgreSQL cluster (Debian's package, installed by the script when missing): the
# store suite runs on it as on SQLite, and so do the service tests that name it. Each test makes
# a database of its own there; the cluster goes with them at the end.
pg_dir=$(mktemp -d)
chmod 0711 "$pg_dir"
cleanup() {
  kill -- "-$release_build" 2>/dev/null || true
  bash scripts/postgres.sh stop "$pg_dir/cluster"
  rm -rf "$pg_dir"
}
trap cleanup EXIT
SKILL_RUNNER_TEST_DATABASE_URL=$(bash scripts/postgres.sh start "$pg_dir/cluster")
export SKILL_RUNNER_TEST_DATABASE_URL

# Many tests spend most of their time waiting: on a real agent CLI and its retries, a headless
# browser, a turn's timeout. One per core (nextest's default) left a 2-core machine idle for much
# of the run; at least four at a time finish the suite in about two thirds of the time.
cores=$(nproc)
export NEXTEST_TEST_THREADS=${NEXTEST_TEST_THREADS:-$((cores > 4 ? cores : 4))}

if cargo nextest --version >/dev/null 2>&1; then
  # .ci/nextest.toml ends a test that hangs instead of letting it hold the run.
  cargo nextest run --config-file .ci/nextest.toml --workspace --all-targets --no-fail-fast
else
  echo "cargo-nextest not found; using cargo test"
  cargo test --workspace --all-targets --no-fail-fast
fi
check_tree
bash scripts/lint-docker.sh
bash scripts/docker-build-check.sh
# A failed build shows again, with its errors, in the smoke run's own `cargo build --release`.
wait "$release_build" || true
bash scripts/smoke-run.sh
# The container lane: the Docker image built from that binary and run with podman as a user
# would run it (`scripts/container-test.sh`).
bash scripts/container-test.sh
check_tree
