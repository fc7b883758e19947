#!/usr/bin/env bash
# Fetches axe-core (the accessibility checker the console's browser tests run on every page)
# from the npm registry, pinned and checked against the registry's integrity hash, into a cache
# outside the repository. The tests inject it into the page they check; the service never
# serves it. Reused when present.
set -euo pipefail
VERSION="4.14.1"
INTEGRITY="sha512-FHfa+lmNjQZfJz1q8wKqIDwC6DExcHt/pkjNQb09a3NPjCKg2rhu5qb2S4r76ASyFNNtuFooJpZe37OgudVGtQ=="
dest="${SKILL_RUNNER_AXE_DIR:-$HOME/.cache/skill-runner/axe-core-$VERSION}"
if [ -s "$dest/axe.min.js" ]; then
  echo "axe-core: $VERSION at $dest"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tarball=$(cd "$work" && npm pack --silent "axe-core@$VERSION" 2>/dev/null | tail -1)
actual="sha512-$(openssl dgst -sha512 -binary "$work/$tarball" | base64 -w0)"
if [ "$actual" != "$INTEGRITY" ]; then
  echo "axe-core: the tarball's hash $actual is not the pinned $INTEGRITY" >&2
  exit 1
fi
tar xzf "$work/$tarball" -C "$work"
mkdir -p "$dest"
cp "$work/package/axe.min.js" "$work/package/LICENSE" "$dest/"
echo "axe-core: $VERSION installed at $dest"
