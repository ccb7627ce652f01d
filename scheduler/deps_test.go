package scheduler_test

import (
	"os/exec"
	"strings"
	"testing"
)

// databaseCode are the packages the planner and the simulator must never link, directly or
// through another package: the decision stays a pure function of its snapshot (the loop that
// reads and writes the store is package leader), and a simulator that links a database driver
// is one import away from using it.
var databaseCode = []string{
	"github.com/opengpulab/gpulab/store",
	"github.com/opengpulab/gpulab/leader",
	"database/sql",
	"database/sql/driver",
	"github.com/lib/pq",
	"github.com/jmoiron/sqlx",
}

// TestNoDatabaseCode: neither the scheduler nor its simulator depends on database code, asked
// of the go tool itself (the whole import graph, not only this package's imports, which
// depguard checks in `make lint`).
func TestNoDatabaseCode(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to list the import graph: %v", err)
	}
	for _, pkg := range []string{".", "./sim"} {
		out, err := exec.Command(goTool, "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 10 {
			t.Fatalf("go list -deps %s gave %d packages: %q", pkg, len(deps), deps)
		}
		for _, d := range deps {
			for _, bad := range databaseCode {
				if d == bad || strings.HasPrefix(d, bad+"/") {
					t.Errorf("scheduler package %s depends on %s: the planner and the simulator must import no database code (run `go list -deps %s` and look for who brings it in)", pkg, d, pkg)
				}
			}
		}
	}
}
