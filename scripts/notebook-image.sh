#!/usr/bin/env bash
# notebook-image.sh — make the local JupyterHub notebook image gpulab-notebook:latest from
# contrib/jupyterhub/notebook-image/Dockerfile: Debian's jupyterhub and python3-notebook on
# top of debian:stable (made first by images.sh), so it needs Debian's mirror and no Python
# registry. Idempotent: the image carries the Dockerfile's checksum as a label and is rebuilt
# only when that changed (about 90 s, 636 MB). Env: GPULAB_NOTEBOOK_IMAGE (default
# gpulab-notebook:latest).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ctx="$here/../contrib/jupyterhub/notebook-image"
image=${GPULAB_NOTEBOOK_IMAGE:-gpulab-notebook:latest}
sum=$(sha256sum "$ctx/Dockerfile" | cut -c1-16)

"$here/images.sh"
have=$(docker image inspect -f '{{index .Config.Labels "gpulab.dockerfile"}}' "$image" 2>/dev/null || true)
[ "$have" = "$sum" ] && exit 0
log=/tmp/gpulab-notebook-image.log
echo "images: building $image (JupyterHub single-user server from Debian packages, about 90 s; log: $log)" >&2
if ! docker build --label "gpulab.dockerfile=$sum" -t "$image" "$ctx" >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  echo "notebook-image.sh: building $image failed (see $log)" >&2
  exit 1
fi
echo "images: $image ready" >&2
