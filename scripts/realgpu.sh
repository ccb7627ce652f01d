#!/bin/bash
# The real-GPU checks (README, "Tests"), including the GPU hand-off into a job's container, for a
# machine that has an NVIDIA GPU and its driver but maybe no Go, no Docker Engine and no
# network (such as the device machines lent to some development sessions):
#
#   scripts/realgpu.sh bundle [DIR]   here: builds what the check needs into DIR (.realgpu)
#   scripts/realgpu.sh check [DIR]    on the GPU machine, as root, in a copy of this repository
#
# The bundle holds the slave/gpu test binary, gpulab-cudacheck (slave/gpu/testdata/cudacheck.c),
# busybox, this machine's Docker Engine (dockerd, containerd, runc: Debian's docker.io) and the
# NVIDIA Container Toolkit's runtime and hooks built from their Go source. The check starts that
# engine with its own folders and socket (the machine's own engine, if any, is left alone),
# nvidia-container-runtime as its default runtime in "jit-cdi" mode (the toolkit's CDI mode, the
# one NVIDIA recommends; no libnvidia-container needed), imports an image made of busybox, the
# machine's C library and gpulab-cudacheck, with the PATH and LD_LIBRARY_PATH nvidia/cuda images
# have, and runs `go test -run Real ./slave/gpu` with GPULAB_REAL_DOCKER_HOST naming it.
set -euo pipefail

NCT_VERSION=v1.18.1 # github.com/NVIDIA/nvidia-container-toolkit

cmd=${1:-}
dir=$(realpath -m "${2:-.realgpu}")

bundle() {
	rm -rf "$dir" && mkdir -p "$dir/dk"
	go test -c -ldflags="-s -w" -o "$dir/gpu.test" ./slave/gpu
	gcc -O2 -Wall -o "$dir/dk/gpulab-cudacheck" slave/gpu/testdata/cudacheck.c -ldl
	# The checksum database cannot be reached from every build machine; the toolkit is only
	# ever run by this check, on a throwaway machine.
	local gobin
	gobin=$(mktemp -d)
	(cd "$gobin" && GOBIN="$gobin" GOSUMDB=off GOFLAGS=-mod=mod go install -ldflags="-s -w" \
		github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-container-runtime@$NCT_VERSION \
		github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-container-runtime-hook@$NCT_VERSION \
		github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook@$NCT_VERSION)
	cp "$gobin"/nvidia-* "$dir/dk/"
	rm -rf "$gobin"
	local f
	for f in dockerd containerd containerd-shim-runc-v2 runc; do
		cp "$(command -v $f || echo /usr/sbin/$f)" "$dir/dk/"
	done
	cp "$(readlink -f "$(command -v busybox || echo /bin/busybox)")" "$dir/dk/busybox"
	# Debian's dockerd links libdevmapper, which a CUDA image seldom has.
	cp -L /lib/x86_64-linux-gnu/libdevmapper.so.1.02.1 "$dir/dk/"
	(cd "$dir" && tar -cf - dk | xz -T0 -6 >dk.tar.xz && rm -rf dk)
	du -sh "$dir"
}

check() {
	# Globals: the exit trap and dockerAPI use them.
	D=/tmp/gpulab-realgpu B=/tmp/gpulab-realgpu/dk SOCK=/tmp/gpulab-realgpu/docker.sock pid=""
	rm -rf $D && mkdir -p $D/lib $D/xdg/nvidia-container-runtime
	tar -xJf "$dir/dk.tar.xz" -C $D
	mv $B/libdevmapper.so.1.02.1 $D/lib/
	nvidia-smi -L

	echo "== the real-GPU tests without a Docker Engine"
	GPULAB_REAL_GPU=1 "$dir/gpu.test" -test.run Real -test.v -test.count=1

	# The toolkit finds the driver's libraries through the ld cache, as a driver installed by
	# its packages has them.
	if ! ldconfig -p | grep -q libnvidia-ml.so.1; then
		for f in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
			if [ -d $f ]; then echo $f >>/etc/ld.so.conf.d/zz-gpulab-realgpu.conf; fi
		done
		ldconfig
	fi
	local ldc="@/sbin/ldconfig"
	if [ -x /sbin/ldconfig.real ]; then ldc="@/sbin/ldconfig.real"; fi
	cat >$D/xdg/nvidia-container-runtime/config.toml <<-EOF
		[nvidia-container-cli]
		ldconfig = "$ldc"
		[nvidia-container-runtime]
		mode = "jit-cdi"
		runtimes = ["$B/runc"]
		log-level = "debug"
		debug = "$D/nvidia-container-runtime.log"
		[nvidia-ctk]
		path = "$B/nvidia-cdi-hook"
		[nvidia-container-runtime-hook]
		path = "$B/nvidia-container-runtime-hook"
	EOF
	printf '{"runtimes":{"nvidia":{"path":"%s"}},"default-runtime":"nvidia"}\n' $B/nvidia-container-runtime >$D/daemon.json

	echo "== a Docker Engine with the NVIDIA Container Toolkit"
	local net="" i
	for flags in "" "--bridge=none"; do
		# With nvidia-container-runtime-hook on its PATH, dockerd serves device requests of
		# the "nvidia" driver, as the slave makes them (what `docker run --gpus` does).
		env PATH=$B:$PATH XDG_CONFIG_HOME=$D/xdg LD_LIBRARY_PATH=$D/lib $B/dockerd \
			--config-file $D/daemon.json --data-root $D/data --exec-root $D/exec \
			--pidfile $D/docker.pid -H unix://$SOCK --iptables=false --ip-masq=false $flags \
			>$D/dockerd.log 2>&1 &
		pid=$!
		for i in $(seq 60); do
			dockerAPI GET /_ping >/dev/null 2>&1 && break
			kill -0 $pid 2>/dev/null || break
			sleep 1
		done
		if dockerAPI GET /_ping >/dev/null 2>&1; then
			if [ -n "$flags" ]; then net=none; fi # no bridge: jobs run without a network
			break
		fi
		echo "dockerd $flags did not answer:" && tail -20 $D/dockerd.log
		kill $pid 2>/dev/null || true
		wait $pid 2>/dev/null || true
		rm -rf $D/exec $D/docker.pid
		pid=""
	done
	[ -n "$pid" ] || exit 1
	trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; [ -n "${OUT:-}" ] && cp $D/*.log "$OUT/" 2>/dev/null; true' EXIT

	local R=$D/rootfs lib
	mkdir -p $R/bin $R/sbin $R/etc/ld.so.conf.d $R/tmp $R/proc $R/sys $R/dev $R/root $R/usr/bin
	cp $B/busybox $R/bin/busybox
	for f in sh ls cat echo; do ln -s busybox $R/bin/$f; done
	cp $B/gpulab-cudacheck $R/usr/bin/
	for lib in /lib64/ld-linux-x86-64.so.2 /lib/x86_64-linux-gnu/libc.so.6 /lib/x86_64-linux-gnu/libm.so.6 \
		/lib/x86_64-linux-gnu/libdl.so.2 /lib/x86_64-linux-gnu/libpthread.so.0 /lib/x86_64-linux-gnu/librt.so.1; do
		mkdir -p $R$(dirname $lib) && cp -L $lib $R$lib
	done
	cp -L "${ldc#@}" $R/sbin/ldconfig
	printf 'root:x:0:0:root:/root:/bin/sh\n' >$R/etc/passwd
	printf 'root:x:0:\n' >$R/etc/group
	: >$R/etc/ld.so.conf
	tar -C $R -cf $D/rootfs.tar .
	dockerAPI POST "/images/create?fromSrc=-&repo=gpulab-realgpu&tag=1&changes=ENV%20PATH%3D%2Fusr%2Flocal%2Fnvidia%2Fbin%3A%2Fusr%2Flocal%2Fsbin%3A%2Fusr%2Flocal%2Fbin%3A%2Fusr%2Fsbin%3A%2Fusr%2Fbin%3A%2Fsbin%3A%2Fbin&changes=ENV%20LD_LIBRARY_PATH%3D%2Fusr%2Flocal%2Fnvidia%2Flib%3A%2Fusr%2Flocal%2Fnvidia%2Flib64" $D/rootfs.tar

	echo "== the real-GPU tests with that engine"
	GPULAB_REAL_GPU=1 GPULAB_REAL_DOCKER_HOST=unix://$SOCK GPULAB_REAL_GPU_IMAGE=gpulab-realgpu:1 \
		GPULAB_REAL_GPU_NETWORK=$net "$dir/gpu.test" -test.run Real -test.v -test.count=1
}

# dockerAPI METHOD PATH [BODY-FILE]: one call to the engine's API over its socket (python3, as
# curl is not on every such machine); prints the status line and the end of the answer.
dockerAPI() {
	python3 - "$SOCK" "$@" <<-'PY'
		import socket, sys
		sock, method, path = sys.argv[1:4]
		body = open(sys.argv[4], "rb").read() if len(sys.argv) > 4 else b""
		s = socket.socket(socket.AF_UNIX)
		s.connect(sock)
		head = "%s %s HTTP/1.0\r\nContent-Type: application/x-tar\r\nContent-Length: %d\r\n\r\n" % (method, path, len(body))
		s.sendall(head.encode() + body)
		out = b"".join(iter(lambda: s.recv(65536), b""))
		status = out.split(b"\r\n", 1)[0].decode()
		print(status, out.split(b"\r\n\r\n", 1)[-1][-300:].decode(errors="replace"))
		sys.exit(0 if " 200 " in status else 1)
	PY
}

case $cmd in
bundle) bundle ;;
check) check ;;
*)
	echo "usage: $0 bundle|check [DIR]" >&2
	exit 2
	;;
esac
