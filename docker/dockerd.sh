#!/usr/bin/env bash
# A Docker daemon of the suite's own, for CI and for hosts that run none:
#
#   docker/dockerd.sh start    # prints the DOCKER_HOST to export
#   docker/dockerd.sh stop     # stops exactly that daemon (by its pid) and removes its bridge
#   docker/dockerd.sh status
#
# The daemon runs with iptables off (a dockerd with iptables on may leave the host's
# FORWARD policy at DROP), its own data root, exec root, pid file and socket, and a
# default bridge it creates itself (AQ_DOCKERD_BRIDGE, in 198.19.254.0/24 of the
# benchmarking range). `stop` signals only the pid in its own pid file and deletes
# only the bridge recorded by `start`; a daemon the suite did not start is never touched.
set -euo pipefail

STATE_DIR=${AQ_DOCKERD_STATE:-/run/aqsgd-bench/dockerd}       # pid file, socket, exec root
DATA_ROOT=${AQ_DOCKERD_DATA:-/var/lib/aqsgd-bench/docker}    # images survive a restart
BRIDGE=${AQ_DOCKERD_BRIDGE:-aqdk0}
BRIDGE_CIDR=${AQ_DOCKERD_BRIDGE_CIDR:-198.19.254.1/24}
SOCKET="$STATE_DIR/docker.sock"
PIDFILE="$STATE_DIR/dockerd.pid"
START_TIMEOUT_S=60

running() {
    [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

start() {
    if running; then
        echo "DOCKER_HOST=unix://$SOCKET"
        return 0
    fi
    command -v dockerd >/dev/null || { echo "dockerd not found: apt-get install docker.io" >&2; exit 1; }
    mkdir -p "$STATE_DIR" "$DATA_ROOT"
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge
        ip addr add "$BRIDGE_CIDR" dev "$BRIDGE"
        ip link set "$BRIDGE" up
        echo "$BRIDGE" > "$STATE_DIR/bridge"   # ours: `stop` removes it
    fi
    dockerd --iptables=false --ip-masq=false --bridge="$BRIDGE" \
        --data-root "$DATA_ROOT" --exec-root "$STATE_DIR/exec" --pidfile "$PIDFILE" \
        --host "unix://$SOCKET" >"$STATE_DIR/dockerd.log" 2>&1 &
    local deadline=$((SECONDS + START_TIMEOUT_S))
    until DOCKER_HOST="unix://$SOCKET" docker version >/dev/null 2>&1; do
        if (( SECONDS > deadline )); then
            echo "dockerd did not answer within ${START_TIMEOUT_S} s; its log:" >&2
            tail -20 "$STATE_DIR/dockerd.log" >&2
            exit 1
        fi
        sleep 0.5
    done
    echo "DOCKER_HOST=unix://$SOCKET"
}

stop() {
    if running; then
        local pid
        pid=$(cat "$PIDFILE")
        kill -TERM "$pid"
        for _ in $(seq 1 60); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.5
        done
        if kill -0 "$pid" 2>/dev/null; then
            kill -KILL "$pid"
        fi
    fi
    if [[ -f "$STATE_DIR/bridge" ]]; then
        local bridge
        bridge=$(cat "$STATE_DIR/bridge")
        if ip link show "$bridge" >/dev/null 2>&1; then
            ip link del "$bridge"
        fi
        rm -f "$STATE_DIR/bridge"
    fi
    rm -f "$PIDFILE"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) if running; then echo "running, DOCKER_HOST=unix://$SOCKET"; else echo "not running"; exit 1; fi ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
