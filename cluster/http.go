package cluster

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"
)

// httpHandler serves the operator endpoints: /livez and /healthz answer as
// long as the process serves (they never depend on a leader), /readyz only
// once the node has joined and its groups have leaders.
func (n *Node) httpHandler() http.Handler {
	mux := http.NewServeMux()
	alive := func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "node": n.cfg.NodeID})
	}
	mux.HandleFunc("GET /livez", alive)
	mux.HandleFunc("GET /healthz", alive)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := n.Ready(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not ready", "node": n.cfg.NodeID, "reason": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "node": n.cfg.NodeID})
	})
	if n.cfg.Profiling {
		// Off by default: a profile shows message bodies in flight and
		// costs CPU while it is taken.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
