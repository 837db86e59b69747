#!/usr/bin/env bash
# Freeze `flow-runner job` into a self-contained directory the runner image carries at
# /opt/flow-runner/job/ (the top-level Dockerfile copies it), so a Job's pod can run any
# component image: an init container copies this directory into an emptyDir that the
# component container runs its command under (runner/k8s/manifests.py).
#   .build/job-wrapper/flow-runner-job     the wrapper (PyInstaller one-folder bootloader)
#   .build/job-wrapper/_internal/          its interpreter, modules and shared libraries
#   .build/job-wrapper/tini                Debian's static tini (PID 1: reaps, forwards)
#   .build/job-wrapper/glibc               the oldest glibc the wrapper runs on (X.Y)
# The interpreter frozen is PYTHON's (its shared libpython), and every library comes from
# this host: the glibc the bundle needs is the newest symbol version any of its files
# asks for, found with objdump and written to `glibc`. PyInstaller comes from the package
# index (pinned); the dependencies from the wheels images/runner/inputs.sh downloaded.
# Idempotent: skipped when no input (runner/, this directory, the wheels, PYTHON's
# version) changed since the last build.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .build
exec 8>.build/job-wrapper.lock  # one freeze at a time: they share .build/freeze-work
flock 8
PYTHON=${PYTHON:-python3}
PYINSTALLER=6.22.3
OUT=.build/job-wrapper
VENV=.build/freeze-venv
WORK=.build/freeze-work

recipe=$({ find runner images/job-wrapper .build/wheels .build/tini-static -type f \
             -not -name '*.pyc' -not -path '*/__pycache__/*' -print0 | sort -z \
             | xargs -0 sha256sum
           "$PYTHON" -VV; echo "pyinstaller $PYINSTALLER"; } | sha256sum | cut -c1-16)
[ -f "$OUT/.recipe" ] && [ "$(cat "$OUT/.recipe")" = "$recipe" ] && exit 0
echo "job wrapper: freezing flow-runner job with PyInstaller $PYINSTALLER (about 20 s)"
if [ ! -x "$VENV/bin/pyinstaller" ] || ! "$VENV/bin/pyinstaller" --version | grep -qx "$PYINSTALLER"; then
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "pyinstaller==$PYINSTALLER"
fi
"$VENV/bin/pip" install --quiet --disable-pip-version-check --find-links .build/wheels \
  -r .build/requirements.txt
rm -rf "$WORK" "$OUT"
# Left out: what `job` never runs (the freezer follows every import it can see, lazy ones
# included): setuptools' run-time hook, requests (jsonschema's remote $ref loader), rich
# (typer's coloured help), tkinter.
"$VENV/bin/pyinstaller" --noconfirm --log-level WARN --onedir --strip \
  --name flow-runner-job --paths . \
  --exclude-module tkinter --exclude-module setuptools --exclude-module pkg_resources \
  --exclude-module requests --exclude-module rich \
  --distpath "$WORK/dist" --workpath "$WORK/build" --specpath "$WORK" \
  images/job-wrapper/entry.py
mv "$WORK/dist/flow-runner-job" "$OUT"
install -m 0755 .build/tini-static "$OUT/tini"
find "$OUT" -type f \( -name flow-runner-job -o -name '*.so*' \) -exec objdump -T {} + 2>/dev/null \
  | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1 >"$OUT/glibc"
rm -rf "$WORK"
echo "$recipe" >"$OUT/.recipe"
echo "job wrapper: $(du -sh "$OUT" | cut -f1) in $OUT, needs glibc >= $(cat "$OUT/glibc")"
