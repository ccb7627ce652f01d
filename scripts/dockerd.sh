#!/usr/bin/env bash
# dockerd.sh — make sure a Docker Engine answers (the slave runs jobs in it; tests use it). Starts
# dockerd when `docker version` gets no answer (nothing starts it on a machine without systemd),
# waits up to 30 s for it, and says why when it does not come. Quiet no-op when it already runs.
# Needs root to start the engine.
set -euo pipefail
log=/tmp/gpulab-dockerd.log
answers() { docker version >/dev/null 2>&1; }

command -v docker >/dev/null || { echo "dockerd.sh: the docker CLI is missing; run scripts/deps.sh (as root)" >&2; exit 1; }
answers && exit 0
if [ -n "${DOCKER_HOST:-}" ] && [ "${DOCKER_HOST}" != unix:///var/run/docker.sock ] && [ "${DOCKER_HOST}" != unix:///run/docker.sock ]; then
  echo "dockerd.sh: DOCKER_HOST=$DOCKER_HOST does not answer; start that engine, or unset DOCKER_HOST to use a local one" >&2
  exit 1
fi
dockerd=$(command -v dockerd || echo /usr/sbin/dockerd)
[ -x "$dockerd" ] || { echo "dockerd.sh: dockerd is missing; run scripts/deps.sh (as root)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "dockerd.sh: the Docker Engine is not running and starting it needs root" >&2; exit 1; }

echo "dockerd.sh: starting the Docker Engine (log: $log)" >&2
# setsid: the engine outlives this script and ignores a ^C meant for `make run`.
setsid "$dockerd" </dev/null >"$log" 2>&1 &
pid=$!
for _ in $(seq 150); do
  answers && exit 0
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.2
done
if kill -0 "$pid" 2>/dev/null; then
  echo "dockerd.sh: dockerd (pid $pid) did not answer within 30 s; it is still running. End of $log:" >&2
else
  echo "dockerd.sh: dockerd exited without answering. End of $log:" >&2
fi
tail -n 20 "$log" >&2
exit 1
