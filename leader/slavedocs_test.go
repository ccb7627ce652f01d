package leader

import "testing"

// TestSlaveDocsDecodeOnlyChanges: the same bytes give back what was decoded before, other bytes
// (a slave registered again with another inventory) are decoded anew.
func TestSlaveDocsDecodeOnlyChanges(t *testing.T) {
	inv := []byte(`{"cpus": 8, "memoryMiB": 32768, "gpus": [{"index": 0, "uuid": "GPU-0", "model": "V100"}]}`)
	capacity := []byte(`[{"index": 0, "uuid": "GPU-0", "model": "V100"}]`)
	var none *slaveDocs
	d, err := none.decode("s1", inv, capacity)
	if err != nil || d.inventory.CPUs != 8 || len(d.inventory.GPUs) != 1 || len(d.capacity) != 1 {
		t.Fatalf("first decode: %+v, %v", d, err)
	}
	again, err := d.decode("s1", []byte(string(inv)), []byte(string(capacity)))
	if err != nil || again != d {
		t.Fatalf("the same bytes were decoded again (%p, was %p): %v", again, d, err)
	}
	other, err := d.decode("s1", []byte(`{"cpus": 16, "memoryMiB": 32768, "gpus": []}`), capacity)
	if err != nil || other == d || other.inventory.CPUs != 16 || len(other.inventory.GPUs) != 0 {
		t.Fatalf("a new inventory: %+v, %v", other, err)
	}
	if _, err := d.decode("s1", []byte(`{`), capacity); err == nil {
		t.Fatal("a broken inventory decoded without error")
	}
}
