#!/usr/bin/env bash
# The Docker image still builds what it ships, without a Docker engine: copies exactly what the
# Dockerfile's build stage COPYs into an empty folder and builds the binary there (a template or
# front-end file left out of a COPY fails the build, since both are compiled in). It type-checks
# (`cargo check`: every macro that reads a template or embeds a file runs, nothing is generated
# or linked), reusing what the lint run checked in ./target, so only the crate itself is read
# again; no build step reads other files than a check does.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The COPY lines of the first stage (up to the next FROM), sources relative to the context.
awk '/^FROM /{n++} n==1 && /^COPY /' Dockerfile | while read -r _ rest; do
  read -r -a words <<<"$rest"
  dest=${words[-1]}
  for src in "${words[@]:0:${#words[@]}-1}"; do
    case "$src" in --*) continue ;; esac
    if [ "$dest" = "./" ]; then
      cp -r "$src" "$work/"
    else
      mkdir -p "$work/$(dirname "${dest#./}")"
      cp -r "$src" "$work/${dest#./}"
    fi
  done
done
echo "docker build stage: $(cd "$work" && ls | tr '\n' ' ')"
(cd "$work" && CARGO_TARGET_DIR="$repo/target" cargo check --locked --quiet --bin skill-runner)
echo "docker build stage: the binary compiles from what the Dockerfile copies"
