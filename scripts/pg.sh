#!/usr/bin/env bash
# pg.sh start|stop|url DIR PORT — a throwaway PostgreSQL cluster in a project-local folder, for
# `make run` and `make test` when no DATABASE_URL is given. Idempotent: `start` on a running
# cluster only prints its URL. Runs as root (initdb runs as the postgres user).
set -euo pipefail
cmd=${1:?start|stop|url}; dir=$(realpath -m "${2:?DIR}"); port=${3:?PORT}
# The port really used is kept in $dir/port: when PORT is taken (another checkout's cluster),
# the next free one is used instead.
[ -f "$dir/port" ] && port=$(cat "$dir/port")
url() { echo "postgres://gpulab@127.0.0.1:${port}/gpulab?sslmode=disable"; }
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pgbin=""
for v in 17 16 15 14; do
  if [ -x "/usr/lib/postgresql/$v/bin/initdb" ]; then pgbin="/usr/lib/postgresql/$v/bin"; break; fi
done
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

case "$cmd" in
url) url ;;
stop)
  [ -f "$dir/data/postmaster.pid" ] && as_pg "$pgbin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true ;;
start)
  if [ -z "$pgbin" ]; then
    echo "pg.sh: PostgreSQL server binaries not found; installing postgresql" >&2
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    for v in 17 16 15 14; do [ -x "/usr/lib/postgresql/$v/bin/initdb" ] && pgbin="/usr/lib/postgresql/$v/bin" && break; done
  fi
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then chown postgres: "$dir"; fi
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    as_pg "$pgbin/initdb" -D "$dir/data" -U gpulab --auth=trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log" >&2; exit 1; }
  fi
  if ! as_pg "$pgbin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
    # Another checkout's cluster may take the port between the check and the start (two
    # `make test` starting at once): then the next free port is tried.
    for try in $(seq 20); do
      while port_busy "$port"; do port=$((port + 1)); done
      echo "$port" > "$dir/port"
      seen=$( (wc -l < "$dir/server.log") 2>/dev/null || echo 0)
      as_pg "$pgbin/pg_ctl" -D "$dir/data" -w -l "$dir/server.log" \
        -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=300 ${PG_EXTRA_OPTS:-}" start >/dev/null 2>&1 && break
      if [ "$try" -lt 20 ] && tail -n +$((seen + 1)) "$dir/server.log" | grep -q "could not bind\|Address already in use"; then
        port=$((port + 1)); continue
      fi
      tail -20 "$dir/server.log" >&2; exit 1
    done
  fi
  as_pg "$pgbin/psql" -h 127.0.0.1 -p "$port" -U gpulab -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='gpulab'" | grep -q 1 \
    || as_pg "$pgbin/createdb" -h 127.0.0.1 -p "$port" -U gpulab gpulab
  url ;;
*) echo "usage: pg.sh start|stop|url DIR PORT" >&2; exit 2 ;;
esac
