#!/usr/bin/env bash
# Installs Debian's headless-capable Chromium and its WebDriver (packages `chromium` and
# `chromium-driver`) for the console's browser tests. The version is pinned; Debian keeps only
# the current security update of a release in its archive, so when the pinned build has been
# superseded there the current one is installed instead and the script says so loudly.
# A Chinese font comes with it (pinned too): the console is bilingual, and its screenshots must
# not show boxes. Reused when all of it is already installed.
set -euo pipefail
PINNED="156.0.8078.79-1~deb12u1"
FONT="fonts-wqy-zenhei=0.9.45-8"
if command -v chromedriver >/dev/null 2>&1 && command -v chromium >/dev/null 2>&1 \
  && dpkg -s fonts-wqy-zenhei >/dev/null 2>&1; then
  echo "browser: $(chromium --version 2>/dev/null | head -1), $(chromedriver --version | head -1)"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "browser: chromium, chromium-driver or the Chinese font is missing; run this script as root" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
if apt-cache madison chromium | grep -qF "$PINNED"; then
  apt-get install -y -qq --no-install-recommends "chromium=$PINNED" "chromium-common=$PINNED" \
    "chromium-driver=$PINNED" "$FONT" >/dev/null
else
  candidate=$(apt-cache policy chromium | awk '/Candidate:/ {print $2}')
  echo "!!! browser: pinned chromium $PINNED is no longer in the archive; installing $candidate" >&2
  apt-get install -y -qq --no-install-recommends chromium chromium-driver "$FONT" >/dev/null
fi
echo "browser: $(chromium --version 2>/dev/null | head -1), $(chromedriver --version | head -1)"
