#!/bin/sh
# Install Debian's Chromium for the browser test (tests/test_browser_player.py drives it with
# Playwright through executable_path, so Playwright never downloads a browser of its own).
# Needs root (CI containers run as root); without it, the test skips and says why.
set -e
if [ -x /usr/bin/chromium ]; then
    echo "chromium already installed: $(/usr/bin/chromium --version 2>/dev/null || true)"
    exit 0
fi
if [ "$(id -u)" != "0" ]; then
    echo "not root: cannot apt-get install chromium; the browser test will skip" >&2
    exit 0
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
