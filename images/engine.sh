#!/usr/bin/env bash
# Make sure a Docker engine answers on this machine, the way DESIGN.md describes:
# Debian's docker.io, and a dockerd with no bridge network and no iptables rules.
# `start` is idempotent; `stop` stops only the dockerd this script started, by its pid.
set -euo pipefail

PIDFILE=/run/flow-runner-dockerd.pid
LOG=/var/log/flow-runner-dockerd.log

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

stop() {
  if [ -f "$PIDFILE" ]; then
    kill "$(cat "$PIDFILE")" 2>/dev/null || true
    rm -f "$PIDFILE"
  fi
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
