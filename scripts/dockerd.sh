#!/usr/bin/env bash
# A private Docker engine for `make image` on machines without one: dockerd
# (Debian docker.io, installed by scripts/setup.sh apt) on its own socket,
# data root and exec root under $TOOLS/run/docker, no bridge network and no
# iptables (containers use --network host). Images are built FROM scratch or
# imported; nothing is pulled.
# usage: scripts/dockerd.sh start | stop | status | host
#   host: prints the DOCKER_HOST value of this engine
# Run FUSE tasks with --device /dev/fuse --cap-add SYS_ADMIN (where the
# kernel lacks a capability in root's bounding set, --privileged fails).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TOOLS=${TOOLS:-$ROOT/.tools}
DIR=$TOOLS/run/docker
SOCK=$DIR/docker.sock
PIDFILE=$DIR/dockerd.pid
HOST=unix://$SOCK

running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }
answers() { DOCKER_HOST=$HOST docker info >/dev/null 2>&1; }

# unmount_under DIR: what dockerd leaves mounted below DIR (its netns bind
# mount; overlay mounts if it died with containers), deepest first.
unmount_under() {
  awk -v d="$1/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
}

case ${1:-} in
  start)
    if running && answers; then echo "dockerd: running ($HOST)"; exit 0; fi
    command -v dockerd >/dev/null || { echo "dockerd: not installed (scripts/setup.sh apt installs docker.io)" >&2; exit 1; }
    mkdir -p "$DIR/data" "$DIR/exec"
    rm -f "$SOCK"
    setsid dockerd --data-root "$DIR/data" --exec-root "$DIR/exec" --pidfile "$PIDFILE" \
      --host "$HOST" --iptables=false --ip-masq=false --bridge=none \
      </dev/null >"$DIR/dockerd.log" 2>&1 &
    for _ in $(seq 150); do answers && break; sleep 0.2; done
    answers || { echo "dockerd: did not answer within 30 s; see $DIR/dockerd.log" >&2; exit 1; }
    echo "dockerd: started ($HOST); export DOCKER_HOST=$HOST" ;;
  stop)
    if running; then
      pid=$(cat "$PIDFILE")
      kill "$pid"
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    fi
    [ -d "$DIR" ] && unmount_under "$DIR"
    rm -f "$PIDFILE" "$SOCK"
    echo "dockerd: stopped" ;;
  status) if running && answers; then echo "dockerd: running ($HOST)"; else echo "dockerd: not running"; exit 1; fi ;;
  host) echo "$HOST" ;;
  *) sed -n '2,10p' "$0" >&2; exit 2 ;;
esac
