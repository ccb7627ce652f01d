#!/usr/bin/env bash
# images.sh — make the local image debian:stable that the job examples use, since no registry can
# be reached: debootstrap (minbase bookworm, from Debian's mirror) imported into the Docker Engine.
# Idempotent: nothing to do when the engine has debian:stable. When debootstrap fails (no network),
# it builds gpulab-examples:busybox from the host's busybox-static instead and warns that examples
# asking for debian:stable will fail. Keeps no cache. Needs root (debootstrap, starting dockerd).
# Env: DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
image=debian:stable
fallback=gpulab-examples:busybox
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
log=/tmp/gpulab-debootstrap.log

"$here/dockerd.sh"
docker image inspect "$image" >/dev/null 2>&1 && exit 0
[ "$(id -u)" = 0 ] || { echo "images.sh: $image is missing and building it needs root" >&2; exit 1; }

work=$(mktemp -d /tmp/gpulab-images.XXXXXX)
cleanup() {
  # A debootstrap that failed half-way can leave proc/sys mounted in the target: detach those
  # (deepest first) before removing anything, and never cross into another file system.
  awk -v d="$work/" 'index($5, d) == 1 { print length($5), $5 }' /proc/self/mountinfo |
    sort -rn | cut -d' ' -f2- | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

debootstrap=$(command -v debootstrap || echo /usr/sbin/debootstrap)
echo "images.sh: building $image with debootstrap from $mirror (about a minute; log: $log)" >&2
if [ -x "$debootstrap" ] && timeout 900 "$debootstrap" --variant=minbase bookworm "$work/rootfs" "$mirror" >"$log" 2>&1; then
  rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"* 2>/dev/null || true
  tar -C "$work/rootfs" -c . |
    docker import -c 'CMD ["bash"]' -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$image" >/dev/null
  echo "images.sh: $image ready" >&2
  exit 0
fi

echo "images.sh: WARNING: debootstrap failed (no network to $mirror?), so $image is MISSING:" >&2
echo "images.sh: WARNING: jobs and examples using $image will fail to start. End of $log:" >&2
tail -n 5 "$log" >&2 || true
if docker image inspect "$fallback" >/dev/null 2>&1; then
  echo "images.sh: use $fallback (already there) for local jobs instead" >&2
  exit 0
fi
busybox=$(command -v busybox || echo /bin/busybox)
# It is copied alone into the image: it must be static (ldd fails on a static binary).
if [ ! -x "$busybox" ] || ldd "$busybox" >/dev/null 2>&1; then
  echo "images.sh: no static busybox for the fallback image either (apt-get install busybox-static)" >&2
  exit 1
fi
root=$work/busybox
mkdir -p "$root/bin" "$root/etc" "$root/root" "$root/proc" "$root/sys" "$root/dev"
mkdir -m 1777 "$root/tmp"
cp "$busybox" "$root/bin/busybox"
for a in $("$busybox" --list); do [ "$a" = busybox ] || ln -s busybox "$root/bin/$a"; done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nusers:x:100:\nnogroup:x:65534:\n' >"$root/etc/group"
tar -C "$root" -c . | docker import -c 'CMD ["/bin/sh"]' -c 'ENV PATH=/bin' - "$fallback" >/dev/null
echo "images.sh: built $fallback (busybox) for local jobs instead" >&2
