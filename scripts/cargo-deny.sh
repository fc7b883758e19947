#!/usr/bin/env bash
# Checks the dependency graph against deny.toml with a pinned cargo-deny, built from crates.io
# into a cache outside the working tree (about two and a half minutes on two cores; reused
# when the pinned version is already there).
#
# The advisories check is left out: it reads the RustSec database from GitHub, which this
# machine cannot reach. Licenses, bans (duplicate versions, wildcards) and sources are checked.
set -euo pipefail
cd "$(dirname "$0")/.."
DENY_VERSION="0.20.2"
root="${SKILL_RUNNER_CARGO_DENY_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/skill-runner-tests/cargo-deny}"
deny="$root/bin/cargo-deny"
if ! [ -x "$deny" ] || [ "$("$deny" --version)" != "cargo-deny $DENY_VERSION" ]; then
  cargo install --quiet --locked --force --root "$root" "cargo-deny@$DENY_VERSION"
fi
"$deny" --version
"$deny" check licenses bans sources
