#!/usr/bin/env bash
# Prepare .build/busybox-static: Debian's static busybox (`apt-get download busybox-static`),
# the only program of examples/shell-hello's image (a shell and an awk that need no libc).
# Idempotent: skipped once the file is there.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=.build/busybox-static
[ -x "$OUT" ] && exit 0
echo "images: fetching Debian's busybox-static package"
mkdir -p .build
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# As root apt warns that it downloads unsandboxed; the lists may be missing on a new machine.
(cd "$tmp" && { apt-get download busybox-static 2>/dev/null \
  || { apt-get update -qq && apt-get download busybox-static; }; } >/dev/null)
dpkg-deb -x "$tmp"/busybox-static_*.deb "$tmp/x"
install -m 0755 "$tmp/x/bin/busybox" "$OUT"
