package cluster

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// Go's profiles are served only when the operator asked for them: they show
// message bodies in flight.
func TestHTTP_ProfilesOnlyWithProfiling(t *testing.T) {
	for _, on := range []bool{false, true} {
		n := &Node{cfg: Config{NodeID: "n1", Profiling: on}}
		rec := httptest.NewRecorder()
		n.httpHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/goroutine?debug=1", nil))
		if want := map[bool]int{false: http.StatusNotFound, true: http.StatusOK}[on]; rec.Code != want {
			t.Errorf("Profiling %v: /debug/pprof/goroutine answered %d, want %d", on, rec.Code, want)
		}
	}
}
