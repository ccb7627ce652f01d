#!/usr/bin/env bash
# run.sh DB_URL RUN_DIR PORT BIN — `make run`: a development OpenID provider (Dex, bin/gpulab-devidp)
# for the portal login, a master, a demo project, user and certificate, and one local slave with
# fake GPUs, all in RUN_DIR (.tmp/run). Ctrl-C stops them all (the slave's job containers are
# left to be re-attached at the next start). GPULAB_DEVIDP_PORT moves Dex off port 5556;
# GPULAB_RUN_SLAVE names the slave (default local-slave); GPULAB_RUN_SSH_PORT is the port of its
# SSH server for jobs, on loopback (default 2222). JUPYTERHUB=0 leaves JupyterHub out; otherwise
# a hub (Debian's jupyterhub, contrib/jupyterhub's spawner and configuration) runs on
# GPULAB_HUB_PORT (default 8000), its API on GPULAB_HUB_API_PORT (8081, every address: the
# notebooks in their containers call it back) and its proxy's API on GPULAB_HUB_PROXY_PORT (8001).
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
hub=${JUPYTERHUB:-1}
hub_port=${GPULAB_HUB_PORT:-8000}
"$bin/gpulab-devidp" --listen "127.0.0.1:$idp_port" --issuer "$issuer" --client-id gpulab-portal \
  --client-secret-file "$dir/oidc-client-secret" --redirect-uri "https://localhost:$port/auth/callback" \
  --redirect-uri "http://localhost:$hub_port/hub/oauth_callback" \
  --users-file "$dir/devidp-users" --login-hint "make run printed the user name (alice); her password is in $dir/alice-password" >"$dir/devidp.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
  curl -sf "$issuer/.well-known/openid-configuration" >/dev/null 2>&1 && break
  kill -0 "${pids[0]}" 2>/dev/null || { cat "$dir/devidp.log" >&2; exit 1; }
  sleep 0.1
done

# The master is the SSH jump host to the jobs (GPULAB_SSH_LISTEN moves it off port 2022).
export GPULAB_SSH_LISTEN="${GPULAB_SSH_LISTEN:-:2022}"
# Job mails go to a local SMTP catcher (scripts/mailcatcher.py) on GPULAB_RUN_SMTP_PORT (2525).
smtp_port=${GPULAB_RUN_SMTP_PORT:-2525}
export GPULAB_SMTP_HOST=127.0.0.1 GPULAB_SMTP_PORT="$smtp_port" GPULAB_SMTP_TLS=none GPULAB_SMTP_FROM="GPULab <gpulab@localhost>"
export GPULAB_PUBLIC_URL="${GPULAB_PUBLIC_URL:-https://localhost:$port}"
# GPUs idle for GPULAB_RUN_IDLE_AFTER (default 2 minutes, so the demo shows it) get the
# idle-GPU warning; a real cluster keeps the master's default of an hour.
"$m" serve --listen ":$port" --admins alice@example.org --oidc-redirect-url "https://localhost:$port/auth/callback" \
  --idle-gpu-after "${GPULAB_RUN_IDLE_AFTER:-2m}" >"$dir/master.log" 2>&1 &
pids+=($!)
# Ready is this master's own "master listening" line and its /readyz answering 200: an answer
# alone could come from another program on the port while this master fails to bind it.
master_ready=0
for _ in $(seq 1 600); do
  kill -0 "${pids[1]}" 2>/dev/null || { cat "$dir/master.log" >&2; exit 1; }
  if grep -q 'master listening' "$dir/master.log" 2>/dev/null &&
    curl -sfk "https://localhost:$port/readyz" >/dev/null 2>&1; then
    master_ready=1
    break
  fi
  sleep 0.1
done
[ "$master_ready" = 1 ] || { echo "the master did not get ready in 60 s:" >&2; tail -n 30 "$dir/master.log" >&2; exit 1; }
cp "$dir/data/ca.pem" "$dir/ca.pem"
/usr/bin/python3 "$(dirname "$0")/mailcatcher.py" --dir "$dir/mail" --port "$smtp_port" >"$dir/mail.log" 2>&1 &
pids+=($!)

# One local slave with two fake GPUs (simulated; every listing marks them fake).
slave=${GPULAB_RUN_SLAVE:-local-slave}
if [ ! -f "$dir/slave/slave.json" ]; then
  (umask 077; "$m" slave-token --name "$slave" --cluster 1 2>/dev/null >"$dir/slave-token")
  "$bin/gpulab-slave" join --master "https://localhost:$port" --ca "$dir/ca.pem" --token-file "$dir/slave-token" --state-dir "$dir/slave" >/dev/null
fi
mkdir -p "$dir/projects"
ssh_port=${GPULAB_RUN_SSH_PORT:-2222}
"$bin/gpulab-slave" run --state-dir "$dir/slave" --scratch-root "$dir/scratch" --fake-gpus 2xV100-32GB --fake-gpu-util 0,85 \
  --storage "/project=$dir/projects/{project}" --ssh-listen "127.0.0.1:$ssh_port" --ssh-advertise "localhost:$ssh_port" >"$dir/slave.log" 2>&1 &
pids+=($!)

# JupyterHub: every notebook server is an interactive GPULab job in project demo, submitted by
# the hub's service identity for the logged-in user; users log in through the same provider.
hub_msg="  JupyterHub:    not started (JUPYTERHUB=0)"
if [ "$hub" != 0 ]; then
  mkdir -p "$dir/hub"
  [ -f "$dir/hub/service.pem" ] || "$m" service-cert --name jupyterhub --out "$dir/hub/service.pem" >/dev/null
  [ -s "$dir/hub/api-token" ] || (umask 077; od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$dir/hub/api-token")
  # A notebook in its container reaches the hub's API at the host's address on Docker's bridge.
  gw=$(docker network inspect bridge -f '{{(index .IPAM.Config 0).Gateway}}' 2>/dev/null || echo 172.17.0.1)
  here=$(cd "$(dirname "$0")/.." && pwd)
  (cd "$dir/hub" && exec env GPULAB_MASTER_URL="https://localhost:$port" GPULAB_CA="$dir/ca.pem" GPULAB_SERVICE_CERT="$dir/hub/service.pem" \
    GPULAB_HUB_DIR="$dir/hub" GPULAB_HUB_BIND_URL="http://:$hub_port" GPULAB_HUB_API_BIND="0.0.0.0:${GPULAB_HUB_API_PORT:-8081}" \
    GPULAB_HUB_CONNECT_URL="http://$gw:${GPULAB_HUB_API_PORT:-8081}" GPULAB_HUB_PROXY_API="127.0.0.1:${GPULAB_HUB_PROXY_PORT:-8001}" \
    GPULAB_HUB_PROJECT=demo GPULAB_HUB_ADMINS=alice GPULAB_HUB_API_TOKEN_FILE="$dir/hub/api-token" \
    GPULAB_HUB_OIDC_ISSUER="$issuer" GPULAB_HUB_OIDC_CLIENT_ID=gpulab-portal GPULAB_HUB_OIDC_CLIENT_SECRET_FILE="$dir/oidc-client-secret" \
    GPULAB_HUB_OIDC_REDIRECT_URL="http://localhost:$hub_port/hub/oauth_callback" \
    /usr/bin/python3 -m jupyterhub -f "$here/contrib/jupyterhub/jupyterhub_config.py" >"$dir/hub.log" 2>&1) &
  pids+=($!)
  for _ in $(seq 1 150); do
    curl -sf "http://127.0.0.1:$hub_port/hub/api/" >/dev/null 2>&1 && break
    kill -0 "${pids[-1]}" 2>/dev/null || { tail -n 30 "$dir/hub.log" >&2; exit 1; }
    sleep 0.2
  done
  hub_msg="  JupyterHub:    http://localhost:$hub_port   (log in as alice, same password; notebooks run as GPULab jobs in
                 project demo; image gpulab-notebook:latest; log $dir/hub.log)
                 from a script: HUB_URL=http://localhost:$hub_port HUB_TOKEN_FILE=$dir/hub/api-token \\
                   contrib/jupyterhub/hubctl.py spawn alice --options '{\"gpus\": 1}'"
fi

api="https://localhost:$port/api/gpulab/v3.1"
# `make env` prints this file: the database, folders and port this run chose, for admin
# commands and the CLI in another shell (eval "$(make -s env)"). No secret is in it.
cat >"$dir/env.sh" <<ENV
export DATABASE_URL='$db'
export GPULAB_DATA_DIR='$dir/data' GPULAB_AUTHORITY='$GPULAB_AUTHORITY'
export GPULAB_CERT='$dir/alice.pem' GPULAB_SERVER_CERT='$dir/ca.pem' GPULAB_API_BASE='https://localhost:$port/api/'
export PATH='$bin':"\$PATH"
ENV
cat <<MSG

  GPULab master: https://localhost:$port   (API base $api)
  Open https://localhost:$port and log in as alice, password in $dir/alice-password
                 (alice@example.org at the development OpenID provider $issuer)
  Database:      $db
  API login:     user alice (admin, member of project "demo"), certificate $dir/alice.pem
  Master CA:     $dir/ca.pem
  Slave:         $slave in cluster 1, 2 FAKE V100 GPUs (simulated: GPU 0 scripted idle at 0 %, GPU 1 busy at 85 %), storage /project -> $dir/projects/<project>
                 SSH into its running jobs: ssh -p $ssh_port <job id>@localhost (a key of the job or of alice's profile, or -i $dir/alice.pem)
$hub_msg
  Metrics:       curl -k https://localhost:$port/metrics   (Prometheus; Grafana dashboard contrib/grafana/gpulab.json)
  Mail:          every job mail lands as a file in $dir/mail/ (one line each in $dir/mail.log)
  Logs:          $dir/master.log, $dir/slave.log, $dir/devidp.log

  Try it (in another terminal, in this folder):
    eval "\$(make -s env)"     # DATABASE_URL, GPULAB_DATA_DIR, GPULAB_CERT, GPULAB_API_BASE, ... of this run
    $bin/gpulab-cli submit --project demo --wait-done < examples/helloworld.json
    $bin/gpulab-cli jobs
    $bin/gpulab-cli log <job id>
    $bin/gpulab-cli clusters --short
    $bin/gpulab-cli interactive --project demo --duration-minutes 30 --docker-image debian:stable
    curl --cacert $dir/ca.pem --cert $dir/alice.pem --key $dir/alice.pem $api/jobs

  Stop with Ctrl-C.

MSG
wait -n "${pids[@]}"
echo "run.sh: the provider, master, slave or hub stopped; see $dir/devidp.log, $dir/master.log, $dir/slave.log and $dir/hub.log" >&2
