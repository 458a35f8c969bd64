#!/usr/bin/env bash
# `make test-docker`: install docker.io if needed, start a private dockerd (own data-root,
# socket, no iptables, no bridge), build the sandbox image from the host's Python, run the
# docker-marked sandbox tests (or, with `bench`, the benchmark), then remove the containers and stop the daemon. Needs root.
set -euo pipefail
PY=${PY:-.venv/bin/python}
ROOT=${MATHRL_DOCKERD_DIR:-/tmp/mathrl-dockerd}
if ! command -v dockerd >/dev/null; then
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || { echo "need root + apt-get for docker.io"; exit 1; }
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
fi
mkdir -p "$ROOT"
export DOCKER_HOST="unix://$ROOT/docker.sock"
start() {
    dockerd --iptables=false --ip6tables=false --bridge=none --data-root "$ROOT/data" \
        --exec-root "$ROOT/exec" --pidfile "$ROOT/dockerd.pid" -H "$DOCKER_HOST" \
        "$@" >"$ROOT/dockerd.log" 2>&1 &
    DPID=$!
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && return 0; kill -0 $DPID 2>/dev/null || return 1; sleep 1; done
    return 1
}
stop() {
    docker ps -aq --filter label=mathrl.sandbox | xargs -r docker rm -f >/dev/null 2>&1 || true
    if [ -n "${DPID:-}" ] && kill -0 "$DPID" 2>/dev/null; then
        kill "$DPID"; wait "$DPID" 2>/dev/null || true
    fi
    # Leave nothing behind unless asked to keep the image cache (MATHRL_DOCKERD_KEEP=1).
    if [ -z "${MATHRL_DOCKERD_KEEP:-}" ] && ! mount | grep -q " $ROOT/"; then rm -rf "$ROOT"; fi
}
trap stop EXIT
# overlay2 on top of an overlay root can fail; vfs always works (slower image unpack).
if ! start; then
    echo "dockerd failed with the default storage driver, retrying with vfs"; tail -3 "$ROOT/dockerd.log"
    stop; DPID=; start --storage-driver=vfs || { tail -20 "$ROOT/dockerd.log"; exit 1; }
fi
echo "dockerd up: $(docker info --format '{{.ServerVersion}} {{.Driver}} cgroup {{.CgroupVersion}}')"
"$PY" -m sandbox build-image
"$PY" -m sandbox doctor || true
if [ "${1:-}" = bench ]; then  # sandbox/test_docker.sh bench [--jobs N]: docker latency too
    shift; "$PY" -m sandbox bench "$@"
elif [ "${1:-}" = exec ]; then  # sandbox/test_docker.sh exec CMD...: any command, daemon up
    shift; "$@"
else
    "$PY" -m pytest -q -m docker -p no:cacheprovider tests/test_sandbox_attacks.py \
        tests/test_sandbox_behaviour.py tests/test_sandbox_crossjob.py \
        tests/test_sandbox_stranger.py tests/test_sandbox_channels.py \
        tests/test_sandbox_forgery.py tests/test_sandbox_seccomp.py \
        tests/test_sandbox_forker.py tests/test_sandbox_ipc.py "$@"
fi
