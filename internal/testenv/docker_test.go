package testenv

import (
	"context"
	"testing"
)

func TestBusyboxImage(t *testing.T) {
	ref := BusyboxImage(t)
	cli := Docker(t)
	if _, err := cli.ImageInspect(context.Background(), ref); err != nil {
		t.Fatalf("image %s not there: %v", ref, err)
	}
}
