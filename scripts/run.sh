#!/usr/bin/env bash
# run.sh DB_URL RUN_DIR PORT BIN — `make run`: a development OpenID provider (Dex, bin/gpulab-devidp)
# for the portal login, a master, a demo project, user and certificate, and one local slave with
# fake GPUs, all in RUN_DIR (.tmp/run). Ctrl-C stops them all (the slave's job containers are
# left to be re-attached at the next start). GPULAB_DEVIDP_PORT moves Dex off port 5556;
# GPULAB_RUN_SLAVE names the slave (default local-slave); GPULAB_RUN_SSH_PORT is the port of its
# SSH server for jobs, on loopback (default 2222).
#
# No secret is ever put on a command line (ps shows it to every user) or in a log: alice's
# password, the OpenID client secret and the slave's join token live in files of mode 0600 in
# RUN_DIR, and the programs are given the files (--users-file, --client-secret-file,
# GPULAB_OIDC_CLIENT_SECRET_FILE, --token-file). internal/e2e TestNoSecretInArgumentsOrLogs
# runs this script and checks.
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
(umask 077; printf 'alice:alice@example.org:%s\n' "$(cat "$dir/alice-password")" >"$dir/devidp-users")
export GPULAB_OIDC_ISSUER="$issuer" GPULAB_OIDC_CLIENT_ID=gpulab-portal GPULAB_OIDC_CLIENT_SECRET_FILE="$dir/oidc-client-secret"
"$bin/gpulab-devidp" --listen "127.0.0.1:$idp_port" --issuer "$issuer" --client-id gpulab-portal \
  --client-secret-file "$dir/oidc-client-secret" --redirect-uri "https://localhost:$port/auth/callback" \
  --users-file "$dir/devidp-users" >"$dir/devidp.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
  curl -sf "$issuer/.well-known/openid-configuration" >/dev/null 2>&1 && break
  kill -0 "${pids[0]}" 2>/dev/null || { cat "$dir/devidp.log" >&2; exit 1; }
  sleep 0.1
done

# The master is the SSH jump host to the jobs (GPULAB_SSH_LISTEN moves it off port 2022).
export GPULAB_SSH_LISTEN="${GPULAB_SSH_LISTEN:-:2022}"
"$m" serve --listen ":$port" --admins alice@example.org --oidc-redirect-url "https://localhost:$port/auth/callback" >"$dir/master.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
  curl -sk "https://localhost:$port/readyz" >/dev/null 2>&1 && break
  kill -0 "${pids[1]}" 2>/dev/null || { cat "$dir/master.log" >&2; exit 1; }
  sleep 0.1
done
cp "$dir/data/ca.pem" "$dir/ca.pem"

# One local slave with two fake GPUs (simulated; every listing marks them fake).
slave=${GPULAB_RUN_SLAVE:-local-slave}
if [ ! -f "$dir/slave/slave.json" ]; then
  (umask 077; "$m" slave-token --name "$slave" --cluster 1 2>/dev/null >"$dir/slave-token")
  "$bin/gpulab-slave" join --master "https://localhost:$port" --ca "$dir/ca.pem" --token-file "$dir/slave-token" --state-dir "$dir/slave" >/dev/null
fi
mkdir -p "$dir/projects"
ssh_port=${GPULAB_RUN_SSH_PORT:-2222}
"$bin/gpulab-slave" run --state-dir "$dir/slave" --scratch-root "$dir/scratch" --fake-gpus 2xV100-32GB \
  --storage "/project=$dir/projects/{project}" --ssh-listen "127.0.0.1:$ssh_port" --ssh-advertise "localhost:$ssh_port" >"$dir/slave.log" 2>&1 &
pids+=($!)

api="https://localhost:$port/api/gpulab/v3.1"
cat <<MSG

  GPULab master: https://localhost:$port   (API base $api)
  Open https://localhost:$port and log in as alice, password in $dir/alice-password
                 (alice@example.org at the development OpenID provider $issuer)
  Database:      $db
  API login:     user alice (admin, member of project "demo"), certificate $dir/alice.pem
  Master CA:     $dir/ca.pem
  Slave:         $slave in cluster 1, 2 FAKE V100 GPUs (simulated), storage /project -> $dir/projects/<project>
                 SSH into its running jobs: ssh -p $ssh_port <job id>@localhost (a key of the job or of alice's profile, or -i $dir/alice.pem)
  Logs:          $dir/master.log, $dir/slave.log, $dir/devidp.log

  Try it (in another terminal):
    export GPULAB_CERT=$dir/alice.pem GPULAB_API_BASE=https://localhost:$port/api/ GPULAB_SERVER_CERT=$dir/ca.pem
    $bin/gpulab-cli submit --project demo --wait-done < examples/helloworld.json
    $bin/gpulab-cli jobs
    $bin/gpulab-cli log <job id>
    $bin/gpulab-cli clusters --short
    $bin/gpulab-cli interactive --project demo --duration-minutes 30 --docker-image debian:stable
    curl --cacert $dir/ca.pem --cert $dir/alice.pem --key $dir/alice.pem $api/jobs

  Stop with Ctrl-C.

MSG
wait -n "${pids[@]}"
echo "run.sh: the provider, master or slave stopped; see $dir/devidp.log, $dir/master.log and $dir/slave.log" >&2
