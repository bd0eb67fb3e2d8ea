#!/bin/sh
# Install Debian's Node.js and npm when missing: the workshop's proxy (configurable-http-proxy)
# runs on Node (the website does not need it).  Needs root (CI runs as root); without it, the
# hub test skips and says why.
set -e
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != "0" ]; then
    echo "not root: cannot apt-get install nodejs npm; the workshop hub test will skip" >&2
    exit 0
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm
