package gpu

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/protocol"
)

// DefaultFakeCudaVersion is the CUDA version fake GPUs claim when none is configured: recent
// enough that examples with a minCudaVersion run on a demo slave.
const DefaultFakeCudaVersion = "12.4"

// defaultFakeMemoryGB is the memory of a fake GPU whose spec names none ("4xH100").
const defaultFakeMemoryGB = 16

// maxFakeGPUs bounds a spec, so a typo ("100xV100") is an error rather than a slave that
// claims a hundred GPUs.
const maxFakeGPUs = 64

// fakeNamespace seeds the fake GPUs' UUIDs (UUID v5), so they depend only on index and model:
// two demo slaves with the same spec report the same UUIDs, and a restarted slave keeps them,
// which keeps re-attached jobs and recorded assignments consistent.
var fakeNamespace = uuid.MustParse("6f1c7b0e-3a52-4a8e-9a0d-1d6f5e0c2b47")

// FakeModelPrefix starts the model name of every fake GPU, so no listing (which shows the model)
// can pass a simulated GPU off as real hardware.
const FakeModelPrefix = "Fake "

// Fake is the inventory of a slave started with --fake-gpus SPEC: the GPUs of ParseFake, Status
// StatusFake, driver "fake" and cudaVersion (DefaultFakeCudaVersion when empty), so jobs with a
// minCudaVersion can be scheduled in demos and tests.
func Fake(spec, cudaVersion string) (Inventory, error) {
	gpus, err := ParseFake(spec)
	if err != nil {
		return Inventory{}, err
	}
	if cudaVersion == "" {
		cudaVersion = DefaultFakeCudaVersion
	}
	return Inventory{GPUs: gpus, DriverVersion: "fake", CudaVersion: cudaVersion, Status: StatusFake}, nil
}

// ParseFake reads a --fake-gpus spec: comma-separated COUNTxMODEL[-NNGB] groups ("2xV100-32GB",
// "1xA100-40GB,2xRTX2080-8GB", "4xH100"; memory defaults to 16 GB). The GPUs are numbered in
// order across groups, marked Fake, named "Fake " plus the model as written ("Fake V100-32GB",
// so a job's gpuModel "V100" or "V100-32GB" matches), and get UUIDs "GPU-fake-<uuid>" that depend
// only on (index, model), never on the slave.
func ParseFake(spec string) ([]protocol.GPU, error) {
	var gpus []protocol.GPU
	for _, group := range strings.Split(spec, ",") {
		group = strings.TrimSpace(group)
		if group == "" { // "" or "2xV100,": name the whole spec
			return nil, fmt.Errorf("fake GPU spec %q: want COUNTxMODEL[-NNGB], e.g. 2xV100-32GB", spec)
		}
		count, model, memGB, err := parseFakeGroup(group)
		if err != nil {
			return nil, err
		}
		if len(gpus)+count > maxFakeGPUs {
			return nil, fmt.Errorf("fake GPU spec %q: at most %d fake GPUs per slave", spec, maxFakeGPUs)
		}
		for range count {
			i := len(gpus)
			gpus = append(gpus, protocol.GPU{
				Index:     i,
				UUID:      fakeUUID(i, model),
				Model:     FakeModelPrefix + model,
				MemoryMiB: int64(memGB) * 1024,
				Fake:      true,
			})
		}
	}
	return gpus, nil
}

// parseFakeGroup reads one COUNTxMODEL[-NNGB] group; model is returned as written, memory
// suffix included.
func parseFakeGroup(group string) (count int, model string, memGB int, err error) {
	bad := fmt.Errorf("fake GPU spec %q: want COUNTxMODEL[-NNGB], e.g. 2xV100-32GB", group)
	x := strings.IndexAny(group, "xX")
	if x <= 0 {
		return 0, "", 0, bad
	}
	count, convErr := strconv.Atoi(group[:x])
	if convErr != nil || !isDigits(group[:x]) {
		return 0, "", 0, bad
	}
	if count < 1 {
		return 0, "", 0, fmt.Errorf("fake GPU spec %q: the count must be at least 1", group)
	}
	model, memGB = group[x+1:], defaultFakeMemoryGB
	base := model
	if dash := strings.LastIndexByte(model, '-'); dash >= 0 {
		if gb, ok := strings.CutSuffix(strings.ToUpper(model[dash+1:]), "GB"); ok {
			n, convErr := strconv.Atoi(gb)
			if convErr != nil || !isDigits(gb) {
				return 0, "", 0, bad
			}
			if n < 1 || n > 1024 {
				return 0, "", 0, fmt.Errorf("fake GPU spec %q: memory must be 1 to 1024 GB", group)
			}
			base, memGB = model[:dash], n
		}
	}
	if base == "" || strings.Trim(base, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != "" ||
		strings.HasPrefix(base, "-") || strings.HasSuffix(base, "-") {
		return 0, "", 0, bad
	}
	return count, model, memGB, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func fakeUUID(index int, model string) string {
	return "GPU-fake-" + uuid.NewSHA1(fakeNamespace, fmt.Appendf(nil, "%d/%s", index, model)).String()
}

// ParseFakeUtil reads a --fake-gpu-util spec for n fake GPUs: comma-separated percentages, one
// per GPU in index order ("0,85": GPU 0 idle, GPU 1 busy); fewer values than GPUs repeat the
// last ("50": all at 50 %). An empty spec scripts nothing (every fake GPU reads 0 %).
func ParseFakeUtil(spec string, n int) ([]float64, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, nil
	}
	parts := strings.Split(spec, ",")
	if len(parts) > n {
		return nil, fmt.Errorf("fake GPU utilisation %q: %d values for %d fake GPUs", spec, len(parts), n)
	}
	out := make([]float64, n)
	for i := range n {
		p := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(parts[min(i, len(parts)-1)]), "%"))
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || v < 0 || v > 100 {
			return nil, fmt.Errorf("fake GPU utilisation %q: want percentages 0 to 100 separated by commas, e.g. 0,85", spec)
		}
		out[i] = v
	}
	return out, nil
}
