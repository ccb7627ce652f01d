package handlers

import (
	"errors"
	"testing"

	"github.com/opengpulab/gpulab/store"
)

func TestPickShortID(t *testing.T) {
	ids := []string{"aea3a7cd-8962-434b-894b-20f7cf3a79ae", "0123abcd-0000-4000-8000-000000000001", "0123abcd-0000-4000-8000-000000000002"}
	if i, err := pickShortID(ids, "aea3a7cd"); err != nil || i != 0 {
		t.Fatalf("unique short id: %d %v", i, err)
	}
	if _, err := pickShortID(ids, "0123abcd"); !errors.Is(err, store.ErrAmbiguous) {
		t.Fatalf("two jobs with the same short id: %v, want ErrAmbiguous", err)
	}
	if _, err := pickShortID(ids, "ffffffff"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("no such job: %v, want ErrNotFound", err)
	}
}
