package test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// layers is the dependency table of docs/ARCHITECTURE.md: what each
// package may import of Cairn's (generated protobuf packages aside). A
// package missing here imports nothing of Cairn's the table does not let
// it; cmd, client's subpackages and test are left out.
var layers = map[string][]string{
	// test/wait: the in-process harness (testing.go) waits as tests do.
	"cluster": {"cluster/auth", "cluster/console", "cluster/frontend", "cluster/metagroup", "cluster/metrics", "cluster/placement", "raftgroup",
		"member", "destination", "fsm", "fsm/selector", "transport", "transport/raftmux", "transport/certs", "test/wait"},
	"cluster/console":   {"client"},
	"cluster/metrics":   {"fsm"},
	"cluster/frontend":  {"cluster/auth", "member", "destination", "fsm", "fsm/selector", "transport"},
	"cluster/auth":      {"fsm", "transport", "transport/certs"},
	"cluster/metagroup": {"raftgroup", "destination", "fsm", "transport"},
	"cluster/placement": {"fsm"},
	"raftgroup":         {},
	"member":            {"raftgroup", "destination", "fsm", "fsm/selector"},
	"destination":       {"fsm"},
	"fsm":               {"fsm/selector"},
	"fsm/selector":      {},
	"transport":         {},
	"transport/raftmux": {},
	"transport/certs":   {},
	"client":            {"transport"},
}

// The packages import one another only as docs/ARCHITECTURE.md says, so
// that the map a new engineer reads is the code's.
func TestLayers_ImportsFollowTheArchitecture(t *testing.T) {
	const module = "github.com/cairnmq/cairn/"
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		allowed, ok := layers[pkg]
		if !ok {
			continue
		}
		seen[pkg] = true
		for _, imp := range fields[1:] {
			dep, ours := strings.CutPrefix(imp, module)
			if !ours || strings.HasSuffix(dep, "pb") {
				continue
			}
			if !slices.Contains(allowed, dep) {
				t.Errorf("%s imports %s, which docs/ARCHITECTURE.md does not let it", pkg, dep)
			}
		}
	}
	for pkg := range layers {
		if !seen[pkg] {
			t.Errorf("package %s of the table is gone: update the table and docs/ARCHITECTURE.md", pkg)
		}
	}
}
