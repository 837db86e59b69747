#!/usr/bin/env bash
# Build, locally and without any registry, every image the tests and examples need:
#   flow-runner/base:bookworm     Debian bookworm + python3, from mmdebstrap + docker import
#   images/*/Dockerfile           built on the base with --network none
#   examples/*/Dockerfile         the example flows
# Each image carries the label flow-runner.recipe = hash of its inputs; an image whose label
# already matches is not rebuilt, so a second run takes a second or two.
set -euo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."

BASE=flow-runner/base:bookworm
MIRROR=${FLOW_RUNNER_DEBIAN_MIRROR:-http://deb.debian.org/debian}

recipe_of() { # files... -> short hash of their contents and names
  find "$@" -type f -not -name '*.pyc' -not -path '*/__pycache__/*' -print0 | sort -z \
    | xargs -0 sha256sum | sha256sum | cut -c1-16
}
current_recipe() { docker image inspect -f '{{ index .Config.Labels "flow-runner.recipe" }}' "$1" 2>/dev/null || true; }

build_base() {
  local recipe; recipe=$(recipe_of images/build.sh)
  [ "$(current_recipe "$BASE")" = "$recipe" ] && return 0
  command -v mmdebstrap >/dev/null || {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
  }
  echo "images: building $BASE with mmdebstrap (about 30 s)"
  local tmp; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' RETURN
  # Docs, man pages and locales are dropped; .pyc files are kept (imports in a read-only
  # container take 40 ms with them, 217 ms without). perl-base is essential but unused.
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
    --change "LABEL flow-runner.recipe=$recipe" \
    "$tmp/rootfs.tar" "$BASE" >/dev/null
}

build_dir() { # image-name context-dir
  local name=$1 dir=$2 recipe
  recipe=$(recipe_of "$dir" runner/json1.py runner/component images/build.sh)
  [ "$(current_recipe "$name")" = "$recipe" ] && return 0
  echo "images: building $name"
  # The build context is the checkout so images can carry runner/json1.py and the SDK.
  docker build --quiet --network none -f "$dir/Dockerfile" \
    --label "flow-runner.recipe=$recipe" -t "$name" . >/dev/null
}

build_base
for df in images/*/Dockerfile; do
  d=$(dirname "$df"); build_dir "flow-runner/$(basename "$d"):latest" "$d"
done
for df in examples/*/Dockerfile; do
  d=$(dirname "$df"); build_dir "flow-runner/examples-$(basename "$d"):latest" "$d"
done
# A rebuilt image leaves its predecessor untagged; remove those (only ours, by label).
docker image prune --force --filter label=flow-runner.recipe >/dev/null
