#!/usr/bin/env bash
# Build the base image IMAGE (Debian bookworm + python3) from Debian packages alone:
# mmdebstrap makes a root file system, `docker import` turns it into an image labelled
# with RECIPE. No container registry is involved. Called by images/build.sh.
set -euo pipefail
IMAGE=$1 RECIPE=$2
MIRROR=${FLOW_RUNNER_DEBIAN_MIRROR:-http://deb.debian.org/debian}

command -v mmdebstrap >/dev/null || {
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# Docs, man pages and locales are dropped; .pyc files are kept (imports in a read-only
# container take 40 ms with them, 217 ms without).
mmdebstrap --quiet --variant=essential --include=python3 \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-include=/usr/share/locale/locale.alias' \
  --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/*' \
  bookworm "$tmp/rootfs.tar" "deb $MIRROR bookworm main" </dev/null
docker import \
  --change 'CMD ["/usr/bin/python3"]' \
  --change 'ENV LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1' \
  --change "LABEL flow-runner.recipe=$RECIPE" \
  "$tmp/rootfs.tar" "$IMAGE" >/dev/null
