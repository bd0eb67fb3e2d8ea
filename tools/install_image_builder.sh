#!/bin/sh
# What `make image` needs on a machine without a Docker engine, and what the image test builds FROM
# on a machine that cannot reach Docker Hub (the CI machine reaches only PyPI, Debian's archive and
# npm):
#   1. Debian's buildah (no daemon; `make image` runs it with BUILDAH_ISOLATION=chroot, so it needs
#      no runc and no namespaces of its own) and debootstrap.
#   2. A local stand-in for workshop/Dockerfile's default base, docker.io/library/debian:bookworm-slim:
#      Debian 12 "bookworm" made here by `debootstrap --variant=minbase` from Debian's own archive,
#      imported into buildah's storage as localhost/allocator-course-base:bookworm.  Docker Hub's
#      debian:bookworm-slim is made the same way (minbase) from the same archive, so this is the same
#      release, not the same bytes.  Kept in build/image-base/ (ignored by git) and in buildah's
#      storage, so a second run takes a second.
#   3. Only where this machine trusts a certificate authority of its own (a TLS-intercepting egress
#      proxy: /usr/local/share/ca-certificates/*.crt, as on the CI machine): that authority goes into
#      the stand-in base, where Debian's ca-certificates (installed by the Dockerfile) picks it up,
#      plus an /etc/pip.conf pointing pip at the system bundle, as this machine's own /etc/pip.conf
#      does.  Without it pip in the build could not reach PyPI through the proxy.  The Dockerfile
#      itself knows nothing of this; an image built FROM the registry's base has neither file.
# Needs root (CI runs as root); without it, or without the tools, the image test skips and says why.
# Prints the base image's name as its last line.
set -e
BASE_IMAGE=${IMAGE_BASE_NAME:-localhost/allocator-course-base:bookworm}
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE="$ROOT/build/image-base"
TARBALL="$CACHE/$SUITE-minbase.tar"

if [ "$(id -u)" != "0" ]; then
    echo "not root: cannot install buildah or debootstrap a base; the image test will skip" >&2
    exit 0
fi
if ! command -v buildah >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends buildah debootstrap
fi

if buildah inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
    echo "$BASE_IMAGE"
    exit 0
fi

mkdir -p "$CACHE"
if [ ! -s "$TARBALL" ]; then
    rootfs="$CACHE/rootfs"
    rm -rf "$rootfs"
    debootstrap --variant=minbase "$SUITE" "$rootfs" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 || {
        tail -20 "$CACHE/debootstrap.log" >&2; exit 1; }
    # debian:bookworm-slim's sources: the release, its updates and its security archive
    rm -f "$rootfs/etc/apt/sources.list"
    cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    # this machine's own certificate authorities, if it has any (item 3 above)
    if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
        mkdir -p "$rootfs/usr/local/share/ca-certificates"
        cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
        printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$rootfs/etc/pip.conf"
    fi
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar --numeric-owner -C "$rootfs" -cf "$TARBALL.part" .
    mv "$TARBALL.part" "$TARBALL"
    rm -rf "$rootfs"
fi

# FROM scratch plus the file system: the base image, in buildah's own storage
ctx="$CACHE/context"
mkdir -p "$ctx"
ln -f "$TARBALL" "$ctx/rootfs.tar" 2>/dev/null || cp "$TARBALL" "$ctx/rootfs.tar"
printf 'FROM scratch\nADD rootfs.tar /\nCMD ["/bin/bash"]\n' >"$ctx/Containerfile"
BUILDAH_ISOLATION=chroot buildah bud --quiet -f "$ctx/Containerfile" -t "$BASE_IMAGE" "$ctx" >/dev/null
rm -rf "$ctx"
echo "$BASE_IMAGE"
