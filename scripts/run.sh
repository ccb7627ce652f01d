#!/usr/bin/env bash
# run.sh DB_URL RUN_DIR PORT BIN — `make run`: bootstrap a demo project, user and certificate,
# then run the master in the foreground. Everything lives in RUN_DIR (.tmp/run).
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
cp "$dir/data/ca.pem" "$dir/ca.pem"
api="https://localhost:$port/api/gpulab/v3.1"
cat <<MSG

  GPULab master: https://localhost:$port   (API base $api)
  Database:      $db
  Login:         user alice (admin, member of project "demo"), certificate $dir/alice.pem
  Master CA:     $dir/ca.pem

  Try it (in another terminal):
    export GPULAB_CERT=$dir/alice.pem GPULAB_API_BASE=$api GPULAB_SERVER_CERT=$dir/ca.pem
    $bin/gpulab-cli submit --project demo < examples/helloworld.json
    $bin/gpulab-cli jobs
    curl --cacert $dir/ca.pem --cert $dir/alice.pem --key $dir/alice.pem $api/jobs

  Stop with Ctrl-C.

MSG
exec "$m" serve --listen ":$port" --admins alice
