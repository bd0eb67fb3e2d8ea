#!/usr/bin/env bash
# Debian's Chromium for the real-browser widget test (Playwright drives it via executable_path;
# no browser is downloaded). Needs root (apt-get); the test skips and says so without it.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then exit 0; fi
if [ "$(id -u)" != 0 ]; then echo "install_browser.sh: needs root for apt-get" >&2; exit 1; fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium >/dev/null
