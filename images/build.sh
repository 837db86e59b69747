#!/usr/bin/env bash
# Build, locally and without any registry, every image the tests and examples need:
#   flow-runner/base:bookworm     Debian bookworm + python3, from mmdebstrap + docker import
#   images/*/Dockerfile           built on the base with --network none
#   examples/*/Dockerfile         the example flows (examples/*/*/Dockerfile: one per flow)
#   Dockerfile                    flow-runner:VERSION and :latest, the runner image
# `build.sh runner` builds only the base and the runner image.
# Each image carries the label flow-runner.recipe = hash of its inputs; an image whose label
# already matches is not rebuilt, so a second run takes a second or two.
# `build.sh --recipes` builds nothing and prints each derived image's name and recipe.
set -euo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."
# One build at a time per checkout: two test sessions started together would both freeze
# the job wrapper into .build/ and build the same images.
mkdir -p .build
exec 9>.build/build.lock
flock 9

BASE=flow-runner/base:bookworm
RECIPES_ONLY=false
[ "${1:-}" = --recipes ] && RECIPES_ONLY=true

recipe_of() { # files... -> short hash of their contents and names
  find "$@" -type f -not -name '*.pyc' -not -path '*/__pycache__/*' -print0 | sort -z \
    | xargs -0 sha256sum | sha256sum | cut -c1-16
}
current_recipe() { docker image inspect -f '{{ index .Config.Labels "flow-runner.recipe" }}' "$1" 2>/dev/null || true; }

build_base() {
  local recipe; recipe=$(recipe_of images/base.sh)
  [ "$(current_recipe "$BASE")" = "$recipe" ] && return 0
  echo "images: building $BASE with mmdebstrap (about 30 s)"
  images/base.sh "$BASE" "$recipe"
}

copied_by() { # dockerfile -> every source its COPY lines name (globs expanded from the checkout)
  local line word
  while read -r line; do
    set -f; set -- $line; set +f
    shift # COPY
    while [ $# -gt 1 ]; do
      case $1 in --*) ;; *) for word in $1; do printf '%s\n' "$word"; done ;; esac
      shift
    done
  done < <(grep -E '^(COPY|ADD)[[:space:]]' "$1")
}

build_dir() { # image-name dockerfile-dir [recipe-dir: extra inputs, default the first]
  local name=$1 dir=$2 recipe
  # Every file the image copies is an input, and so is its directory (the Dockerfile);
  # derived images follow the base: its recipe is part of theirs.
  local -a copied; mapfile -t copied < <(copied_by "$dir/Dockerfile")
  recipe=$({ recipe_of "${3:-$dir}" "${copied[@]}"
             current_recipe "$BASE"; } | sha256sum | cut -c1-16)
  if $RECIPES_ONLY; then echo "$name $recipe"; return 0; fi
  [ "$(current_recipe "$name")" = "$recipe" ] && return 0
  echo "images: building $name"
  # The build context is the checkout so images can carry runner/json1.py and the SDK.
  local log; log=$(mktemp)
  if ! docker build --quiet --network none -f "$dir/Dockerfile" \
      --label "flow-runner.recipe=$recipe" -t "$name" . >"$log" 2>&1; then
    cat "$log" >&2; rm -f "$log"; return 1
  fi
  rm -f "$log"
}

# The runner image (the top-level Dockerfile): flow-runner:VERSION and :latest, from the
# wheels and the tini that images/runner/inputs.sh prepares on this host (PYTHON: the
# interpreter whose pip downloads them). README.md is copied only because pyproject.toml
# names it, so it is not part of the recipe.
build_runner() {
  PYTHON=${PYTHON:-python3} images/runner/inputs.sh
  PYTHON=${PYTHON:-python3} images/job-wrapper/build.sh # .build/job-wrapper: `k8s` pods' wrapper
  local version recipe log
  version=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml)
  recipe=$({ recipe_of Dockerfile images/runner runner sandbox-profiles pyproject.toml \
               .build/wheels .build/tini-static .build/job-wrapper
             current_recipe "$BASE"; } | sha256sum | cut -c1-16)
  [ "$(current_recipe flow-runner:latest)" = "$recipe" ] \
    && [ "$(current_recipe "flow-runner:$version")" = "$recipe" ] && return 0
  echo "images: building flow-runner:$version (the runner image)"
  log=$(mktemp)
  if ! docker build --quiet --network none --label "flow-runner.recipe=$recipe" \
      -t "flow-runner:$version" -t flow-runner:latest . >"$log" 2>&1; then
    cat "$log" >&2; rm -f "$log"; return 1
  fi
  rm -f "$log"
}
$RECIPES_ONLY || build_base
$RECIPES_ONLY || images/busybox.sh # .build/busybox-static: examples/shell-hello's one program
if [ "${1:-}" = runner ]; then # `make image`: the base and the runner image only
  build_runner
  exit 0
fi
for df in images/*/Dockerfile; do
  d=$(dirname "$df"); build_dir "flow-runner/$(basename "$d"):latest" "$d"
done
for df in examples/*/Dockerfile; do
  d=$(dirname "$df"); build_dir "flow-runner/examples-$(basename "$d"):latest" "$d"
done
# An example made of several flows keeps one directory per flow: examples/NAME/PART.
for df in examples/*/*/Dockerfile; do
  d=$(dirname "$df"); p=$(dirname "$d")
  build_dir "flow-runner/examples-$(basename "$p")-$(basename "$d"):latest" "$d" "$p"
done
$RECIPES_ONLY || build_runner
# A rebuilt image leaves its predecessor untagged; remove those (only ours, by label).
$RECIPES_ONLY || docker image prune --force --filter label=flow-runner.recipe >/dev/null
