#!/usr/bin/env bash
# deps.sh — install what `make test` and `make run` need and is missing. Idempotent and quiet
# when everything is there. Needs root for apt-get (a fresh machine of this project's kind is).
set -euo pipefail
missing=()
have_pg=""
for v in 17 16 15 14; do [ -x "/usr/lib/postgresql/$v/bin/initdb" ] && have_pg=1; done
[ -n "$have_pg" ] || missing+=(postgresql)
command -v gcc >/dev/null || missing+=(gcc)          # cgo, for go test -race
command -v git >/dev/null || missing+=(git)
command -v curl >/dev/null || missing+=(curl)
command -v openssl >/dev/null || missing+=(openssl)
# The slave runs jobs as Docker containers; tests build their images from busybox-static (a
# static binary copied into the image) and debootstrap (debian:stable for the examples).
command -v dockerd >/dev/null || [ -x /usr/sbin/dockerd ] || missing+=(docker.io)
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' || missing+=(busybox-static)
command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || missing+=(debootstrap)
# The fault suite moves Postgres's clock with libfaketime (internal/chaos, clock scenarios).
dpkg-query -W -f='${Status}' faketime 2>/dev/null | grep -q 'ok installed' || missing+=(faketime)
# SSH into jobs is tested with the real OpenSSH client (ssh, sftp, ssh-keygen).
command -v ssh >/dev/null && command -v sftp >/dev/null || missing+=(openssh-client)
# The portal is tested in headless Chromium (chromedp).
command -v chromium >/dev/null || [ -x /usr/bin/chromium ] || missing+=(chromium)
# JupyterHub (Debian's, with Python's own interpreter) and its proxy: `make run` starts a hub
# whose notebooks are GPULab jobs, and the tests spawn through it (contrib/jupyterhub).
dpkg-query -W -f='${Status}' jupyterhub 2>/dev/null | grep -q 'ok installed' || missing+=(jupyterhub)
# Job mails go to a real SMTP server, Debian's aiosmtpd (scripts/mailcatcher.py: make run, tests).
/usr/bin/python3 -c 'import aiosmtpd' 2>/dev/null || missing+=(python3-aiosmtpd)
# make bench compares with Slurm on the same machine (bench/slurm_test.go: S1, S2), which
# authenticates with MUNGE.
command -v sbatch >/dev/null || missing+=(slurm-client)
[ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] || missing+=(slurmctld slurmd)
[ -x /usr/sbin/munged ] || missing+=(munge)
command -v configurable-http-proxy >/dev/null || missing+=(node-configurable-http-proxy)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "deps.sh: missing ${missing[*]}; run as root or install them" >&2; exit 1
  fi
  echo "deps.sh: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v go >/dev/null || { echo "deps.sh: Go is not installed (expected at /usr/local/go)" >&2; exit 1; }
