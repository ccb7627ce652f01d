#!/usr/bin/env bash
# run.sh DB_URL RUN_DIR PORT BIN — `make run`: a master, a demo project, user and certificate,
# and one local slave with fake GPUs, all in RUN_DIR (.tmp/run). Ctrl-C stops master and slave
# (the slave's job containers are left to be re-attached at the next start).
set -euo pipefail
db=$1; dir=$2; port=$3; bin=$4
mkdir -p "$dir"
export DATABASE_URL="$db" GPULAB_DATA_DIR="$dir/data" GPULAB_AUTHORITY="${GPULAB_AUTHORITY:-gpulab.local}"
m="$bin/gpulab-master"
"$m" migrate >/dev/null
"$m" project add demo >/dev/null 2>&1 || true
"$m" cluster add 1 --name local >/dev/null 2>&1 || true
"$m" member add demo alice --email alice@example.org >/dev/null
[ -f "$dir/alice.pem" ] || "$m" user-cert --user alice --email alice@example.org --admin --out "$dir/alice.pem" 2>/dev/null

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

"$m" serve --listen ":$port" --admins alice >"$dir/master.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
  curl -sk "https://localhost:$port/readyz" >/dev/null 2>&1 && break
  kill -0 "${pids[0]}" 2>/dev/null || { cat "$dir/master.log" >&2; exit 1; }
  sleep 0.1
done
cp "$dir/data/ca.pem" "$dir/ca.pem"

# One local slave with two fake GPUs (simulated; every listing marks them fake).
if [ ! -f "$dir/slave/slave.json" ]; then
  token=$("$m" slave-token --name local-slave --cluster 1 2>/dev/null)
  "$bin/gpulab-slave" join --master "https://localhost:$port" --ca "$dir/ca.pem" --token "$token" --state-dir "$dir/slave" >/dev/null
fi
mkdir -p "$dir/projects"
"$bin/gpulab-slave" run --state-dir "$dir/slave" --scratch-root "$dir/scratch" --fake-gpus 2xV100-32GB \
  --storage "/project=$dir/projects/{project}" >"$dir/slave.log" 2>&1 &
pids+=($!)

api="https://localhost:$port/api/gpulab/v3.1"
cat <<MSG

  GPULab master: https://localhost:$port   (API base $api)
  Database:      $db
  Login:         user alice (admin, member of project "demo"), certificate $dir/alice.pem
  Master CA:     $dir/ca.pem
  Slave:         local-slave in cluster 1, 2 FAKE V100 GPUs (simulated), storage /project -> $dir/projects/<project>
  Logs:          $dir/master.log, $dir/slave.log

  Try it (in another terminal):
    export GPULAB_CERT=$dir/alice.pem GPULAB_API_BASE=$api GPULAB_SERVER_CERT=$dir/ca.pem
    $bin/gpulab-cli submit --project demo --wait-done < examples/helloworld.json
    $bin/gpulab-cli jobs
    $bin/gpulab-cli log <job id>
    $bin/gpulab-cli clusters --short
    curl --cacert $dir/ca.pem --cert $dir/alice.pem --key $dir/alice.pem $api/jobs

  Stop with Ctrl-C.

MSG
wait -n "${pids[@]}"
echo "run.sh: master or slave stopped; see $dir/master.log and $dir/slave.log" >&2
