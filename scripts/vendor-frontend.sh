#!/usr/bin/env bash
# Fetches the pinned front-end packages from the npm registry and copies the files the console
# and /docs serve into static/vendor/, with each package's licence and a manifest
# (static/vendor/VENDORED.json: package, version, licence, the registry's integrity hash, and the
# sha256 of every copied file). The binary embeds static/ at build time, so no page loads
# anything from outside the machine. Run it to change a version; the files are committed.
set -euo pipefail
cd "$(dirname "$0")/.."

# package@version  file-in-package=>destination ...
PACKAGES=(
  "htmx.org@2.0.11 dist/htmx.min.js=>htmx/htmx.min.js"
  "htmx-ext-sse@2.2.4 dist/sse.min.js=>htmx-ext-sse/sse.min.js"
  "@xterm/xterm@6.0.0 lib/xterm.js=>xterm/xterm.js css/xterm.css=>xterm/xterm.css"
  "@xterm/addon-fit@0.11.0 lib/addon-fit.js=>xterm-addon-fit/addon-fit.js"
  "@scalar/api-reference@1.72.1 dist/browser/standalone.js=>scalar/standalone.js"
  "marked@18.2.1 lib/marked.umd.js=>marked/marked.umd.js"
  "dompurify@3.4.18 dist/purify.min.js=>dompurify/purify.min.js"
)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=static/vendor
rm -rf "$out"
mkdir -p "$out"
entries=()
for line in "${PACKAGES[@]}"; do
  read -r spec files <<<"$line"
  name=${spec%@*}
  version=${spec##*@}
  mkdir -p "$work/$name"
  tarball=$(cd "$work/$name" && npm pack --silent "$spec" 2>/dev/null | tail -1)
  tar xzf "$work/$name/$tarball" -C "$work/$name"
  pkg="$work/$name/package"
  license=$(node -e 'console.log(require(process.argv[1]).license || "UNKNOWN")' "$pkg/package.json")
  integrity=$(npm view "$spec" dist.integrity 2>/dev/null | tail -1)
  first_dest=""
  for pair in $files; do
    src=${pair%%=>*}
    dest=${pair##*=>}
    mkdir -p "$out/$(dirname "$dest")"
    cp "$pkg/$src" "$out/$dest"
    first_dest=${first_dest:-$dest}
  done
  dir=$(dirname "$first_dest")
  licence_file=$(ls "$pkg" | grep -iE '^(licen[cs]e|copying)' | head -1 || true)
  if [ -n "$licence_file" ]; then
    cp "$pkg/$licence_file" "$out/$dir/LICENSE"
  fi
  entries+=("$name|$version|$license|$integrity|$dir|$files")
done

python3 - "$out" "${entries[@]}" <<'PY'
import hashlib, json, os, sys
out = sys.argv[1]
manifest = []
for entry in sys.argv[2:]:
    name, version, license, integrity, folder, files = entry.split("|")
    paths = [pair.split("=>")[1] for pair in files.split()]
    licence_path = os.path.join(folder, "LICENSE")
    if os.path.exists(os.path.join(out, licence_path)):
        paths.append(licence_path)
        if license == "UNKNOWN":  # no licence in package.json: the file's title names it
            license = open(os.path.join(out, licence_path)).readline().strip()
    manifest.append({
        "package": name, "version": version, "license": license, "integrity": integrity,
        "licence_file": licence_path if licence_path in paths else None,
        "files": {p: hashlib.sha256(open(os.path.join(out, p), "rb").read()).hexdigest()
                  for p in paths},
    })
with open(os.path.join(out, "VENDORED.json"), "w") as f:
    json.dump(manifest, f, indent=2)
    f.write("\n")
PY
echo "vendored into $out:"
du -sh "$out"/*
