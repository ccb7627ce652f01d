#!/usr/bin/env bash
# run.sh DB_URL RUN_DIR PORT BIN — `make run`: a development OpenID provider (Dex, bin/gpulab-devidp)
# for the portal login, a master, a demo project, user and certificate, and one local slave with
# fake GPUs, all in RUN_DIR (.tmp/run). Ctrl-C stops them all (the slave's job containers are
# left to be re-attached at the next start). GPULAB_DEVIDP_PORT moves Dex off port 5556.
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

# The development OpenID provider, on loopback only. alice's password and the client secret are
# made once and kept in RUN_DIR, so a browser's saved password keeps working.
idp_port=${GPULAB_DEVIDP_PORT:-5556}
issuer="http://127.0.0.1:$idp_port/dex"
[ -s "$dir/alice-password" ] || (umask 077; od -An -N9 -tx1 /dev/urandom | tr -d ' \n' >"$dir/alice-password")
[ -s "$dir/oidc-client-secret" ] || (umask 077; od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$dir/oidc-client-secret")
password=$(cat "$dir/alice-password")
export GPULAB_OIDC_ISSUER="$issuer" GPULAB_OIDC_CLIENT_ID=gpulab-portal GPULAB_OIDC_CLIENT_SECRET="$(cat "$dir/oidc-client-secret")"
"$bin/gpulab-devidp" --listen "127.0.0.1:$idp_port" --issuer "$issuer" --client-id gpulab-portal \
  --client-secret "$GPULAB_OIDC_CLIENT_SECRET" --redirect-uri "https://localhost:$port/auth/callback" \
  --user "alice:alice@example.org:$password" >"$dir/devidp.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
  curl -sf "$issuer/.well-known/openid-configuration" >/dev/null 2>&1 && break
  kill -0 "${pids[0]}" 2>/dev/null || { cat "$dir/devidp.log" >&2; exit 1; }
  sleep 0.1
done

"$m" serve --listen ":$port" --admins alice --oidc-redirect-url "https://localhost:$port/auth/callback" >"$dir/master.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
  curl -sk "https://localhost:$port/readyz" >/dev/null 2>&1 && break
  kill -0 "${pids[1]}" 2>/dev/null || { cat "$dir/master.log" >&2; exit 1; }
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
  Open https://localhost:$port and log in as alice / $password
                 (alice@example.org at the development OpenID provider $issuer)
  Database:      $db
  API login:     user alice (admin, member of project "demo"), certificate $dir/alice.pem
  Master CA:     $dir/ca.pem
  Slave:         local-slave in cluster 1, 2 FAKE V100 GPUs (simulated), storage /project -> $dir/projects/<project>
  Logs:          $dir/master.log, $dir/slave.log, $dir/devidp.log

  Try it (in another terminal):
    export GPULAB_CERT=$dir/alice.pem GPULAB_API_BASE=https://localhost:$port/api/ GPULAB_SERVER_CERT=$dir/ca.pem
    $bin/gpulab-cli submit --project demo --wait-done < examples/helloworld.json
    $bin/gpulab-cli jobs
    $bin/gpulab-cli log <job id>
    $bin/gpulab-cli clusters --short
    curl --cacert $dir/ca.pem --cert $dir/alice.pem --key $dir/alice.pem $api/jobs

  Stop with Ctrl-C.

MSG
wait -n "${pids[@]}"
echo "run.sh: the provider, master or slave stopped; see $dir/devidp.log, $dir/master.log and $dir/slave.log" >&2
