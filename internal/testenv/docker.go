package testenv

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

// Docker returns a client of the local Docker Engine (DOCKER_HOST or the default socket), or
// skips the test (fails it under GPULAB_REQUIRE_SERVICES=1) when no engine answers.
func Docker(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		Missing(t, "Docker Engine", err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ping, err := cli.Ping(ctx)
	if err != nil {
		_ = cli.Close()
		Missing(t, "Docker Engine", err.Error())
	}
	// Settle the API version now, before the client is shared: the client negotiates lazily,
	// and a filtered ContainerList reads the version unguarded (moby/moby#50448), which races
	// with a negotiation another goroutine's first call is making.
	cli.NegotiateAPIVersionPing(ping)
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

var busybox struct {
	once sync.Once
	ref  string
	err  error
}

// BusyboxImage returns a small local image (busybox with its applets, /etc/passwd and
// /etc/group; CMD /bin/sh) built from the host's busybox-static, so tests never need a
// registry. The tag depends on the busybox binary, so it is built once per machine.
func BusyboxImage(t testing.TB) string {
	t.Helper()
	cli := Docker(t)
	busybox.once.Do(func() { busybox.ref, busybox.err = importBusybox(cli) })
	if busybox.err != nil {
		t.Fatalf("busybox image: %v", busybox.err)
	}
	return busybox.ref
}

func importBusybox(cli *client.Client) (string, error) {
	bin, err := exec.LookPath("busybox")
	if err != nil {
		for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
			if _, statErr := os.Stat(p); statErr == nil {
				bin, err = p, nil
			}
		}
	}
	if err != nil {
		return "", fmt.Errorf("busybox not installed (apt-get install busybox-static): %w", err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", fmt.Errorf("read busybox: %w", err)
	}
	sum := sha256.Sum256(data)
	ref := "gpulab-test-busybox:" + hex.EncodeToString(sum[:6])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cli.ImageInspect(ctx, ref); err == nil {
		return ref, nil
	}
	applets, err := exec.Command(bin, "--list").Output()
	if err != nil {
		return "", fmt.Errorf("busybox --list: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(hdr *tar.Header, body []byte) error {
		hdr.ModTime = time.Unix(0, 0)
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	files := []struct {
		name string
		mode int64
		body string
	}{
		{"etc/passwd", 0o644, "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"},
		{"etc/group", 0o644, "root:x:0:\nusers:x:100:\nnogroup:x:65534:\n"},
	}
	for _, d := range []string{"bin/", "etc/", "tmp/", "root/", "proc/", "sys/", "dev/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		if err := add(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: mode}, nil); err != nil {
			return "", err
		}
	}
	if err := add(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(data))}, data); err != nil {
		return "", err
	}
	for _, f := range files {
		if err := add(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: f.mode, Size: int64(len(f.body))}, []byte(f.body)); err != nil {
			return "", err
		}
	}
	for _, a := range bytes.Fields(applets) {
		name := filepath.Join("bin", string(a))
		if string(a) == "busybox" {
			continue
		}
		if err := add(&tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}, nil); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	rc, err := cli.ImageImport(ctx, image.ImportSource{Source: &buf, SourceName: "-"}, ref,
		image.ImportOptions{Changes: []string{`CMD ["/bin/sh"]`, "ENV PATH=/bin"}})
	if err != nil {
		return "", fmt.Errorf("import busybox image: %w", err)
	}
	defer func() { _ = rc.Close() }()
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return "", fmt.Errorf("import busybox image: %w", err)
	}
	return ref, nil
}
