#!/usr/bin/env bash
# Make sure a Docker engine answers on this machine:
# Debian's docker.io, and a dockerd with no bridge network and no iptables rules.
# `start` is idempotent; `stop` stops only the dockerd this script started, by its pid.
# `runsc` registers gVisor (Debian's runsc package) as the runtime `runsc` with the flags
# the `strict` sandbox profile needs; it is idempotent, a no-op once the engine lists runsc
# with those flags, and updates a registration that lacks one. `runsc-config FILE` only
# writes that registration into a daemon.json FILE (no engine is touched).
set -euo pipefail

PIDFILE=/run/flow-runner-dockerd.pid
LOG=/var/log/flow-runner-dockerd.log
DAEMON_JSON=/etc/docker/daemon.json

engine_answers() { timeout 5 docker info >/dev/null 2>&1; }

start() {
  if ! command -v dockerd >/dev/null 2>&1; then
    echo "engine: installing Debian's docker.io"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends docker.io >/dev/null
  fi
  if engine_answers; then
    return 0
  fi
  echo "engine: starting dockerd --bridge=none --iptables=false --ip-masq=false"
  nohup dockerd --bridge=none --iptables=false --ip-masq=false >"$LOG" 2>&1 &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 100); do
    engine_answers && return 0
    sleep 0.2
  done
  echo "engine: dockerd did not answer within 20 s; see $LOG" >&2
  tail -n 20 "$LOG" >&2 || true
  exit 1
}

# The flag the `strict` profile needs from runsc: without --oci-seccomp runsc ignores the
# container's seccomp profile (the component runs with no filter at all).
RUNSC_NEEDS='["--oci-seccomp"]'
# Added where a registration names no platform or network of its own: ptrace is the
# platform that works here; --network=none: containers have no network anyway, and runsc
# cannot set up network namespaces on this kind of host ("cannot run with network enabled
# in root namespace").
RUNSC_DEFAULTS='["--platform=ptrace", "--network=none"]'

# True when the engine offers runsc with every flag in RUNSC_NEEDS.
engine_has_runsc() {
  docker info --format '{{json .Runtimes}}' 2>/dev/null | python3 -c '
import json, sys
runsc = json.load(sys.stdin).get("runsc") or {}
sys.exit(0 if set(json.loads(sys.argv[1])) <= set(runsc.get("runtimeArgs") or []) else 1)
' "$RUNSC_NEEDS"
}

# Merge the runsc registration into the daemon.json FILE, keeping whatever else it holds:
# an existing runsc entry keeps its flags (its platform too) and gains what it lacks.
write_runsc_config() { # FILE RUNSC-BINARY
  mkdir -p "$(dirname "$1")"
  python3 - "$1" "$2" "$RUNSC_NEEDS" "$RUNSC_DEFAULTS" <<'PY'
import json, os, sys
path, binary = sys.argv[1], sys.argv[2]
needs, defaults = json.loads(sys.argv[3]), json.loads(sys.argv[4])
config = json.load(open(path)) if os.path.exists(path) else {}
old = config.setdefault("runtimes", {}).get("runsc") or {}
args = list(old.get("runtimeArgs") or [])
named = {arg.split("=")[0] for arg in args}
args += [arg for arg in needs if arg not in args]
args += [arg for arg in defaults if arg.split("=")[0] not in named]
config["runtimes"]["runsc"] = {**old, "path": old.get("path", binary), "runtimeArgs": args}
with open(path + ".tmp", "w") as f:
    json.dump(config, f, indent=2)
    f.write("\n")
os.replace(path + ".tmp", path)
PY
}

register_runsc() {
  start
  engine_has_runsc && return 0
  if ! type -P runsc >/dev/null; then
    echo "engine: installing Debian's runsc (gVisor)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends runsc >/dev/null
  fi
  echo "engine: registering runsc in $DAEMON_JSON with $RUNSC_NEEDS"
  write_runsc_config "$DAEMON_JSON" "$(type -P runsc)"
  # dockerd reloads its runtimes on SIGHUP (running containers are not touched); only the
  # dockerd this script started is signalled.
  if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    kill -HUP "$(cat "$PIDFILE")"
    for _ in $(seq 1 25); do
      engine_has_runsc && return 0
      sleep 0.2
    done
    echo "engine: dockerd did not pick up runsc with $RUNSC_NEEDS; see $LOG" >&2
    exit 1
  fi
  echo "engine: this dockerd was not started by $0; reload it (SIGHUP or" \
    "\`systemctl reload docker\`) so that it reads $DAEMON_JSON" >&2
  exit 1
}

stop() {
  if [ -f "$PIDFILE" ]; then
    kill "$(cat "$PIDFILE")" 2>/dev/null || true
    rm -f "$PIDFILE"
  fi
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  runsc) register_runsc ;;
  runsc-config) write_runsc_config "${2:?usage: $0 runsc-config FILE}" "$(type -P runsc || echo /usr/bin/runsc)" ;;
  *) echo "usage: $0 start|stop|runsc|runsc-config FILE" >&2; exit 2 ;;
esac
