package cluster

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Go's profiles are served only when the operator asked for them: they show
// message bodies in flight.
func TestHTTP_ProfilesOnlyWithProfiling(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{false, true} {
		n := &Node{cfg: Config{NodeID: "n1", Profiling: on}}
		rec := httptest.NewRecorder()
		n.httpHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/goroutine?debug=1", nil))
		if want := map[bool]int{false: http.StatusNotFound, true: http.StatusOK}[on]; rec.Code != want {
			t.Errorf("Profiling %v: /debug/pprof/goroutine answered %d, want %d", on, rec.Code, want)
		}
	}
}

// /readyz says not ready, and why, when the data directory's disk has less
// free space than --min-free-disk-mib: before writes fail. With room it
// says ready.
func TestHTTP_ReadyzWatchesFreeDisk(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		minFree int64
		code    int
		says    string
	}{
		{minFree: -1, code: http.StatusOK, says: `"ready"`},
		{minFree: 1 << 40, code: http.StatusServiceUnavailable, says: "min-free-disk-mib"},
	} {
		n := startNode(t, TestConfig(t, t.TempDir(), func(cfg *Config) { cfg.MinFreeDiskMiB = c.minFree }))
		resp, err := http.Get("http://" + n.Addrs().HTTP + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || !strings.Contains(string(body), c.says) {
			t.Errorf("--min-free-disk-mib %d: /readyz %d %s; want %d saying %s", c.minFree, resp.StatusCode, body, c.code, c.says)
		}
	}
}
