#!/usr/bin/env bash
# Make sure a Docker engine answers on this machine:
# Debian's docker.io, and a dockerd with no bridge network and no iptables rules.
# `start` is idempotent; `stop` stops only the dockerd this script started, by its pid.
# `runsc` registers gVisor (Debian's runsc package) as the runtime `runsc` with the flags
# the `strict` sandbox profile needs; it is idempotent, a no-op once the engine lists runsc
# with those flags, and updates a registration that lacks one.
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

# The flags the `strict` profile needs from runsc. --oci-seccomp: without it runsc ignores
# the container's seccomp profile (the component would run with no filter at all).
# ptrace is the platform that works here; --network=none: containers have no network
# anyway, and runsc cannot set up network namespaces on this kind of host ("cannot run with
# network enabled in root namespace").
RUNSC_ARGS='["--platform=ptrace", "--network=none", "--oci-seccomp"]'

# True when the engine offers runsc with every flag in RUNSC_ARGS.
engine_has_runsc() {
  docker info --format '{{json .Runtimes}}' 2>/dev/null | python3 -c '
import json, sys
runsc = json.load(sys.stdin).get("runsc") or {}
sys.exit(0 if set(json.loads(sys.argv[1])) <= set(runsc.get("runtimeArgs") or []) else 1)
' "$RUNSC_ARGS"
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
  echo "engine: registering runsc in $DAEMON_JSON with $RUNSC_ARGS"
  mkdir -p "$(dirname "$DAEMON_JSON")"
  # Merge, keeping whatever else the file holds; an older runsc entry lacking a flag is
  # replaced, any other flag it had is kept.
  python3 - "$DAEMON_JSON" "$(type -P runsc)" "$RUNSC_ARGS" <<'PY'
import json, os, sys
path, binary, wanted = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
config = json.load(open(path)) if os.path.exists(path) else {}
old = config.setdefault("runtimes", {}).get("runsc") or {}
kept = [arg for arg in old.get("runtimeArgs") or [] if arg.split("=")[0]
        not in {w.split("=")[0] for w in wanted}]
config["runtimes"]["runsc"] = {**old, "path": binary, "runtimeArgs": wanted + kept}
with open(path + ".tmp", "w") as f:
    json.dump(config, f, indent=2)
    f.write("\n")
os.replace(path + ".tmp", path)
PY
  # dockerd reloads its runtimes on SIGHUP (running containers are not touched); only the
  # dockerd this script started is signalled.
  if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    kill -HUP "$(cat "$PIDFILE")"
    for _ in $(seq 1 25); do
      engine_has_runsc && return 0
      sleep 0.2
    done
    echo "engine: dockerd did not pick up runsc with $RUNSC_ARGS; see $LOG" >&2
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
  *) echo "usage: $0 start|stop|runsc" >&2; exit 2 ;;
esac
