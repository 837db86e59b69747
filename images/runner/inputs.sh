#!/usr/bin/env bash
# Prepare on this host what the runner image (the top-level Dockerfile) is built from, so
# that `docker build --network none` needs nothing else:
#   .build/wheels/       every Python dependency of flow-runner, plus pip and setuptools,
#                        for the base image's CPython 3.11 on this machine's architecture,
#                        from the package index pip is configured with (`pip download`)
#   .build/tini-static   the static tini (PID 1) from Debian's tini package (`apt-get download`)
# Idempotent: skipped when pyproject.toml has not changed since the last download.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
OUT=.build
WHEELS=$OUT/wheels
STAMP=$WHEELS/.pyproject.sha256

mkdir -p "$OUT"
if [ ! -x "$OUT/tini-static" ]; then
  echo "runner image: fetching Debian's tini package"
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  # As root apt warns that it downloads unsandboxed; the lists may be missing on a new machine.
  (cd "$tmp" && { apt-get download tini 2>/dev/null || { apt-get update -qq && apt-get download tini; }; } >/dev/null)
  dpkg-deb -x "$tmp"/tini_*.deb "$tmp/x"
  install -m 0755 "$tmp/x/usr/bin/tini-static" "$OUT/tini-static"
fi

want=$(sha256sum pyproject.toml | cut -d' ' -f1)
[ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && exit 0
echo "runner image: downloading wheels into $WHEELS"
rm -rf "$WHEELS"; mkdir -p "$WHEELS"
"$PYTHON" - >"$OUT/requirements.txt" <<'PY'
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))
print("\n".join([*project["project"]["dependencies"], *project["build-system"]["requires"], "pip"]))
PY
arch=$(uname -m)
# Binary wheels only, for the image's interpreter (bookworm: CPython 3.11), not this host's.
"$PYTHON" -m pip download --quiet --disable-pip-version-check --dest "$WHEELS" \
  --only-binary=:all: --implementation cp --python-version 3.11 --abi cp311 --abi abi3 --abi none \
  --platform "manylinux2014_$arch" --platform "manylinux_2_28_$arch" --platform "manylinux_2_34_$arch" \
  --platform any -r "$OUT/requirements.txt"
echo "$want" >"$STAMP"
