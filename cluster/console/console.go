package console

import (
	"context"
	"crypto/tls"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/cairnmq/cairn/client"
)

//go:embed static
var static embed.FS

// Config says how the console reaches its node's client API.
type Config struct {
	// Node is the node's id, shown on every page.
	Node string
	// ClientAddr is the node's client API address.
	ClientAddr string
	// TLS reaches it over TLS when set (the node's CA as RootCAs), and
	// makes the console ask the browser for a user and password.
	TLS *tls.Config
	// OpenToNetwork says an open node listens beyond its own host
	// (--insecure-allow-remote); every page says so.
	OpenToNetwork bool
	// Hosts are the names the console answers to, beside IP addresses and
	// localhost: the node's own names (package doc).
	Hosts []string
}

// callTimeout bounds one call of the console to its node.
const callTimeout = 10 * time.Second

// ActionHeader must be on the console's POSTs (package doc).
const ActionHeader = "X-Cairn-Console"

// New is the console's handler, to serve at /.
func New(cfg Config) http.Handler {
	files, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	c := &console{cfg: cfg}
	mux := http.NewServeMux()
	mux.Handle("GET /", c.authenticated(http.FileServerFS(files)))
	mux.HandleFunc("GET /api/console", c.api(func(context.Context, *client.Admin, *http.Request) (any, error) {
		return map[string]any{"node": cfg.Node, "secured": cfg.TLS != nil, "open_to_network": cfg.TLS == nil && cfg.OpenToNetwork}, nil
	}))
	mux.HandleFunc("GET /api/cluster", c.api(func(ctx context.Context, a *client.Admin, _ *http.Request) (any, error) {
		return a.ClusterStatus(ctx)
	}))
	mux.HandleFunc("GET /api/queues", c.api(func(ctx context.Context, a *client.Admin, _ *http.Request) (any, error) {
		return a.ListQueues(ctx)
	}))
	mux.HandleFunc("GET /api/queues/{name}", c.api(func(ctx context.Context, a *client.Admin, r *http.Request) (any, error) {
		return a.ShowQueue(ctx, r.PathValue("name"))
	}))
	mux.HandleFunc("GET /api/queues/{name}/messages", c.api(func(ctx context.Context, a *client.Admin, r *http.Request) (any, error) {
		return browse(ctx, a, r.PathValue("name"))
	}))
	mux.HandleFunc("GET /api/topics", c.api(func(ctx context.Context, a *client.Admin, _ *http.Request) (any, error) {
		return a.ListTopics(ctx)
	}))
	mux.HandleFunc("GET /api/topics/{name}", c.api(func(ctx context.Context, a *client.Admin, r *http.Request) (any, error) {
		return a.ShowTopic(ctx, r.PathValue("name"))
	}))
	mux.HandleFunc("GET /api/connections", c.api(func(ctx context.Context, a *client.Admin, _ *http.Request) (any, error) {
		conns, unreachable, err := a.Connections(ctx)
		if unreachable == nil {
			unreachable = []string{}
		}
		return map[string]any{"connections": conns, "unreachable": unreachable}, err
	}))
	mux.HandleFunc("POST /api/queues/{name}/purge", c.action(func(ctx context.Context, a *client.Admin, r *http.Request) (any, error) {
		n, err := a.PurgeQueue(ctx, r.PathValue("name"))
		return map[string]any{"queue": r.PathValue("name"), "purged": n}, err
	}))
	mux.HandleFunc("POST /api/queues/{name}/messages/{id}/move", c.action(func(ctx context.Context, a *client.Admin, r *http.Request) (any, error) {
		from, id, to := r.PathValue("name"), r.PathValue("id"), r.URL.Query().Get("to")
		return map[string]any{"moved": id, "from": from, "to": to}, move(ctx, a, c.cfg.ClientAddr, c.options(r), from, id, to)
	}))
	mux.HandleFunc("POST /api/connections/{id}/destroy", c.action(func(ctx context.Context, a *client.Admin, r *http.Request) (any, error) {
		return map[string]any{"destroyed": r.PathValue("id")}, a.DestroyConnection(ctx, r.PathValue("id"))
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Nothing from another site, and no frame of another site around
		// the console's buttons.
		w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if host, ok := c.knownHost(r.Host); !ok {
			writeJSON(w, http.StatusMisdirectedRequest, map[string]string{"error": fmt.Sprintf(
				"the console answers to node %s's own names and addresses, and %q is none of them (a page of another site whose name now points here?); a name of yours in front of it: cairn server --console-host %s", c.cfg.Node, host, host)})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// knownHost says whether the request's Host names this node: an IP
// address, localhost, or one of cfg.Hosts. A page of another site whose
// name its DNS points at the node (DNS rebinding) sends its own name.
func (c *console) knownHost(hostport string) (string, bool) {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil || host == "localhost" {
		return host, true
	}
	for _, h := range c.cfg.Hosts {
		if strings.EqualFold(strings.TrimSuffix(h, "."), host) {
			return host, true
		}
	}
	return host, false
}

type console struct{ cfg Config }

// secured says whether the node asks clients who they are.
func (c *console) secured() bool { return c.cfg.TLS != nil }

// authenticated asks the browser for credentials before it serves h, on
// a secured node; the node checks them on the first API call.
func (c *console) authenticated(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := r.BasicAuth(); c.secured() && !ok {
			challenge(w, "sign in with a user of the cluster")
			return
		}
		h.ServeHTTP(w, r)
	})
}

func challenge(w http.ResponseWriter, why string) {
	w.Header().Set("WWW-Authenticate", `Basic realm="Cairn", charset="UTF-8"`)
	writeJSON(w, http.StatusUnauthorized, map[string]string{"error": why})
}

type call func(ctx context.Context, a *client.Admin, r *http.Request) (any, error)

// action is api for a POST that changes something: it must carry
// ActionHeader, and come from this origin when the browser says one.
func (c *console) action(fn call) http.HandlerFunc {
	apiFn := c.api(fn)
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(ActionHeader) == "" {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "an action needs the " + ActionHeader + " header, which the console's pages send"})
			return
		}
		if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host && o != "https://"+r.Host {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "an action from another site (" + o + ") is refused"})
			return
		}
		apiFn(w, r)
	}
}

// api answers fn's result as JSON, calling the node as the browser's user.
func (c *console) api(fn call) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := r.BasicAuth(); c.secured() && !ok {
			challenge(w, "sign in with a user of the cluster")
			return
		}
		a, err := client.NewAdmin([]string{c.cfg.ClientAddr}, c.options(r))
		if err != nil {
			writeError(w, err)
			return
		}
		defer a.Close()
		ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
		defer cancel()
		v, err := fn(ctx, a, r)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

// options are the client options of a call as the browser's user.
func (c *console) options(r *http.Request) client.Options {
	o := client.Options{TLS: c.cfg.TLS}
	if c.secured() {
		o.User, o.Password, _ = r.BasicAuth()
		if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
			o.Source = ap.Addr().String()
		}
	}
	return o
}

// writeError answers a client error with the status that says it.
func writeError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, client.ErrNotAuthenticated):
		challenge(w, err.Error())
		return
	case errors.Is(err, client.ErrNotAuthorised):
		writeJSON(w, http.StatusForbidden, map[string]string{"error": err.Error()})
	case errors.Is(err, client.ErrUnknownDestination):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
	case errors.Is(err, client.ErrInvalidArgument), errors.Is(err, client.ErrInvalidName):
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
	default:
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
