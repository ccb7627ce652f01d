package testenv

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePorts: the block FreePorts names lies below the ephemeral range and can be listened
// on, every port of it; once they are taken, portsFree calls the block taken.
func TestFreePorts(t *testing.T) {
	const n = 50
	first := FreePorts(t, n)
	if first < 10000 || first+n > ephemeralLow() {
		t.Fatalf("ports %d–%d, want from 10000 to below %d", first, first+n-1, ephemeralLow())
	}
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for p := first; p < first+n; p++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d of the block: %v", p, err)
		}
		held = append(held, l)
	}
	if portsFree(first, n) {
		t.Error("a block whose ports are all taken was called free")
	}
}
