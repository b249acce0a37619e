package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/test/wait"
)

// syncBuffer is a log sink tests read while the node writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// With TLS on, a caller without credentials, with a wrong password or
// with the certificate of a user the cluster does not know is not
// authenticated; a user may do what its grants say and nothing else, a
// refused request changing nothing; a grant taken away or a user deleted
// applies to open connections at once; every administrative call and
// every refusal is in the audit log.
func TestAuth_UsersDoWhatTheirGrantsSay(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	var logs syncBuffer
	n := startNode(t, TestConfig(t, t.TempDir(), p.node, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	}))
	waitAdmin(t, n)
	ctx := testCtx(t)
	root := admin(t, n)
	for _, q := range []string{"orders.eu", "billing"} {
		if _, err := root.CreateQueue(ctx, q, client.QueueOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// as is o over TLS to n, with the CA alone unless o has a TLS
	// configuration of its own.
	as := func(o client.Options) client.Options {
		if o.TLS == nil {
			o.TLS = clientOptions(t, n).TLS
		}
		return o
	}
	adminAs := func(o client.Options) *client.Admin {
		a, err := client.NewAdmin([]string{n.Addrs().Client}, as(o))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		return a
	}
	dialAs := func(o client.Options) (*client.Connection, error) {
		c, err := client.Dial(stepCtx(t, 10*time.Second), []string{n.Addrs().Client}, as(o))
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
		return c, err
	}

	for what, o := range map[string]client.Options{
		"no credentials":                {},
		"a wrong password":              {User: AdminUser, Password: "not-the-password"},
		"an unknown user":               {User: "nobody", Password: testAdminPassword},
		"an unknown user's certificate": {TLS: p.user("mallory")},
	} {
		if _, err := adminAs(o).ListQueues(ctx); !errors.Is(err, client.ErrNotAuthenticated) {
			t.Errorf("an admin call with %s: %v; want ErrNotAuthenticated", what, err)
		}
		if _, err := dialAs(o); !errors.Is(err, client.ErrNotAuthenticated) {
			t.Errorf("a connection with %s: %v; want ErrNotAuthenticated", what, err)
		}
	}
	if _, err := client.Dial(ctx, []string{n.Addrs().Client}, client.Options{User: "app", Password: "app-password"}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("a password without TLS: %v; want ErrInvalidArgument", err)
	}

	if _, err := root.CreateUser(ctx, "app", "app-password", []client.Grant{
		{Pattern: "orders.*", Actions: []string{"send"}},
		{Pattern: "billing", Actions: []string{"receive", "browse"}},
	}); err != nil {
		t.Fatal(err)
	}
	appOpts := client.Options{User: "app", Password: "app-password"}
	app := adminAs(appOpts)
	conn, err := dialAs(appOpts)
	if err != nil {
		t.Fatal(err)
	}
	s := mustSession(t, conn, client.AutoAck)
	send(t, ctx, mustProducer(t, s, "orders.eu"), "allowed")
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, client.ErrNotAuthorised) {
			t.Errorf("%s: %v; want ErrNotAuthorised", what, err)
		}
	}
	_, err = mustProducer(t, s, "billing").Send(ctx, &client.Message{Body: []byte("refused")})
	refused("a send to billing", err)
	_, err = s.Consumer(ctx, "orders.eu")
	refused("a consumer of orders.eu", err)
	_, err = app.PurgeQueue(ctx, "orders.eu")
	refused("a purge of orders.eu", err)
	_, err = app.ListUsers(ctx)
	refused("a list of users", err)
	_, err = app.CreateQueue(ctx, "orders.us", client.QueueOptions{})
	refused("a create of orders.us", err)
	_, err = mustProducer(t, s, "orders.new").Send(ctx, &client.Message{Body: []byte("would make it")})
	refused("a send making orders.new on first use", err)
	if _, err := root.ShowQueue(ctx, "orders.new"); !errors.Is(err, client.ErrUnknownDestination) {
		t.Errorf("orders.new after the refused send: %v; want ErrUnknownDestination", err)
	}
	if qs, err := app.ListQueues(ctx); err != nil || len(qs) != 1 || qs[0].Name != "billing" {
		t.Errorf("app lists %v, %v; want billing alone", qs, err)
	}
	mustConsumer(t, ctx, s, "billing")
	for q, want := range map[string]uint64{"orders.eu": 1, "billing": 0} {
		if info, err := root.ShowQueue(ctx, q); err != nil || info.Pending != want {
			t.Errorf("%s after the refusals: %+v, %v; want %d pending", q, info, err, want)
		}
	}

	// A user known by its certificate.
	if _, err := root.CreateUser(ctx, "alice", "", []client.Grant{{Pattern: "*", Actions: []string{"browse"}}}); err != nil {
		t.Fatal(err)
	}
	alice := adminAs(client.Options{TLS: p.user("alice")})
	if qs, err := alice.ListQueues(ctx); err != nil || len(qs) != 2 {
		t.Errorf("alice lists %d queues, %v; want 2", len(qs), err)
	}
	_, err = alice.CreateQueue(ctx, "alice", client.QueueOptions{})
	refused("alice's create", err)

	// Grants taken away apply to the open connection; a deleted user is
	// not authenticated any more.
	if _, err := root.SetGrants(ctx, "app", nil); err != nil {
		t.Fatal(err)
	}
	_, err = mustProducer(t, s, "orders.eu").Send(ctx, &client.Message{Body: []byte("after the revoke")})
	refused("a send after the grants were taken away", err)
	if err := root.DeleteUser(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if _, err := dialAs(appOpts); !errors.Is(err, client.ErrNotAuthenticated) {
		t.Errorf("a deleted user's connection: %v; want ErrNotAuthenticated", err)
	}

	audit := logs.String()
	for _, want := range []string{
		`log=audit who="user admin" call=CreateDestination target=orders.eu`,
		`log=audit who="user app" call=PurgeDestination target=orders.eu`,
		`log=audit who=unauthenticated call=ListDestinations`,
		`log=audit who="user admin" call=DeleteUser target=app`,
	} {
		if !strings.Contains(audit, want) {
			t.Errorf("no audit record %q in the log", want)
		}
	}
}

// The gRPC health service answers probes without credentials.
func TestAuth_HealthNeedsNoCredentials(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	n := startNode(t, TestConfig(t, t.TempDir(), p.node))
	cc, err := grpc.NewClient(n.Addrs().Client, grpc.WithTransportCredentials(credentials.NewTLS(clientOptions(t, n).TLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	wait.Until(t, 10*time.Second, "the health service serving a caller without credentials", func() string {
		resp, err := healthpb.NewHealthClient(cc).Check(testCtx(t), &healthpb.HealthCheckRequest{})
		if err != nil {
			return err.Error()
		}
		return map[bool]string{true: "", false: resp.Status.String()}[resp.Status == healthpb.HealthCheckResponse_SERVING]
	})
}

// Every admin call refuses a caller without credentials, with a wrong
// password, and a user not permitted it (one permitted to send to another
// queue), and changes nothing: the queue, the topic and the users stay.
func TestAuth_EveryAdminCallNeedsItsPermission(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	n := startNode(t, TestConfig(t, t.TempDir(), p.node))
	waitAdmin(t, n)
	ctx := testCtx(t)
	root := admin(t, n)
	if _, err := root.CreateQueue(ctx, "q", client.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.CreateTopic(ctx, "news", client.TopicOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.CreateUser(ctx, "app", "app-password", []client.Grant{{Pattern: "other", Actions: []string{"send"}}}); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func(ctx context.Context, a *client.Admin) error{
		"CreateQueue": func(ctx context.Context, a *client.Admin) error {
			_, err := a.CreateQueue(ctx, "q2", client.QueueOptions{})
			return err
		},
		"ShowQueue":   func(ctx context.Context, a *client.Admin) error { _, err := a.ShowQueue(ctx, "q"); return err },
		"UpdateQueue": func(ctx context.Context, a *client.Admin) error { _, err := a.UpdateQueue(ctx, "q", 2); return err },
		"PurgeQueue":  func(ctx context.Context, a *client.Admin) error { _, err := a.PurgeQueue(ctx, "q"); return err },
		"BrowseQueue": func(ctx context.Context, a *client.Admin) error {
			_, err := a.BrowseQueue(ctx, "q", client.BrowseOptions{})
			return err
		},
		"DeleteQueue": func(ctx context.Context, a *client.Admin) error { return a.DeleteQueue(ctx, "q") },
		"CreateTopic": func(ctx context.Context, a *client.Admin) error {
			_, err := a.CreateTopic(ctx, "t2", client.TopicOptions{})
			return err
		},
		"ShowTopic":   func(ctx context.Context, a *client.Admin) error { _, err := a.ShowTopic(ctx, "news"); return err },
		"DeleteTopic": func(ctx context.Context, a *client.Admin) error { return a.DeleteTopic(ctx, "news") },
		"DeleteSubscription": func(ctx context.Context, a *client.Admin) error {
			return a.DeleteSubscription(ctx, "news", "s", "")
		},
		"ClusterStatus":     func(ctx context.Context, a *client.Admin) error { _, err := a.ClusterStatus(ctx); return err },
		"RemoveNode":        func(ctx context.Context, a *client.Admin) error { return a.RemoveNode(ctx, "n9") },
		"LeaveNode":         func(ctx context.Context, a *client.Admin) error { _, err := a.LeaveNode(ctx); return err },
		"Rebalance":         func(ctx context.Context, a *client.Admin) error { _, err := a.Rebalance(ctx, true); return err },
		"Connections":       func(ctx context.Context, a *client.Admin) error { _, _, err := a.Connections(ctx); return err },
		"DestroyConnection": func(ctx context.Context, a *client.Admin) error { return a.DestroyConnection(ctx, "c") },
		"CreateUser": func(ctx context.Context, a *client.Admin) error {
			_, err := a.CreateUser(ctx, "eve", "eve-password", nil)
			return err
		},
		"SetPassword": func(ctx context.Context, a *client.Admin) error { return a.SetPassword(ctx, "admin", "taken-over") },
		"SetGrants": func(ctx context.Context, a *client.Admin) error {
			_, err := a.SetGrants(ctx, "app", []client.Grant{{Pattern: "*", Actions: []string{"all"}}})
			return err
		},
		"DeleteUser": func(ctx context.Context, a *client.Admin) error { return a.DeleteUser(ctx, "admin") },
		"ListUsers":  func(ctx context.Context, a *client.Admin) error { _, err := a.ListUsers(ctx); return err },
	}
	tlsOnly := clientOptions(t, n)
	tlsOnly.User, tlsOnly.Password = "", ""
	wrong := clientOptions(t, n)
	// From a source of its own: its failures slow it (past the fifth,
	// each is refused unchecked), not the calls that follow.
	wrong.Password, wrong.Source = "not-the-password", "192.0.2.66"
	app := clientOptions(t, n)
	app.User, app.Password = "app", "app-password"
	for who, c := range map[string]struct {
		o    client.Options
		want error
	}{
		"no credentials":   {tlsOnly, client.ErrNotAuthenticated},
		"a wrong password": {wrong, client.ErrNotAuthenticated},
		"user app":         {app, client.ErrNotAuthorised},
	} {
		a, err := client.NewAdmin([]string{n.Addrs().Client}, c.o)
		if err != nil {
			t.Fatal(err)
		}
		for name, call := range calls {
			// Each call its own deadline: a refusal is quick, and one
			// slow check must not time the others out.
			if err := call(stepCtx(t, 10*time.Second), a); !errors.Is(err, c.want) {
				t.Errorf("%s with %s: %v; want %v", name, who, err, c.want)
			}
		}
		a.Close()
	}
	if _, err := root.ShowQueue(ctx, "q"); err != nil {
		t.Errorf("queue q after the refusals: %v", err)
	}
	if _, err := root.ShowTopic(ctx, "news"); err != nil {
		t.Errorf("topic news after the refusals: %v", err)
	}
	if users, err := root.ListUsers(ctx); err != nil || len(users) != 2 || len(users[1].Grants) != 1 || users[1].Grants[0].Pattern != "other" {
		t.Errorf("users after the refusals: %+v, %v", users, err)
	}
}

// Failed logins are slowed per source, through the client API: past five
// wrong passwords from one source, its tries are refused unchecked (the
// right password too), each refusal audited and counted at /metrics,
// while a user from another source is served at once.
func TestAuth_FailedLoginsAreSlowedPerSource(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	var logs syncBuffer
	n := startNode(t, TestConfig(t, t.TempDir(), p.node, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	}))
	waitAdmin(t, n)
	ctx := testCtx(t)
	as := func(password, source string) *client.Admin {
		o := clientOptions(t, n)
		// The test's calls all come from 127.0.0.1, which may name the
		// source it calls for, as the console does.
		o.Password, o.Source = password, source
		a, err := client.NewAdmin([]string{n.Addrs().Client}, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		return a
	}
	guesser := "192.0.2.7"
	for i := range 8 {
		_, err := as(fmt.Sprintf("guess-%d", i), guesser).ListQueues(stepCtx(t, 10*time.Second))
		wantErr(t, fmt.Sprintf("guess %d", i), err, client.ErrNotAuthenticated)
		throttled := strings.Contains(fmt.Sprint(err), "too many failed logins from "+guesser)
		if throttled != (i > 5) {
			t.Errorf("guess %d: %v; want it refused unchecked from the seventh on", i, err)
		}
	}
	_, err := as(testAdminPassword, guesser).ListQueues(ctx)
	if !strings.Contains(fmt.Sprint(err), "too many failed logins") {
		t.Errorf("the right password from the slowed source: %v; want it refused unchecked", err)
	}
	if _, err := as(testAdminPassword, "198.51.100.3").ListQueues(ctx); err != nil {
		t.Errorf("admin from another source: %v", err)
	}
	if !strings.Contains(logs.String(), "source="+guesser) || !strings.Contains(logs.String(), "too many failed logins") {
		t.Error("no audit record of the slowed source's refusals")
	}
	m := scrape(t, n)
	for name, least := range map[string]float64{"cairn_login_failures_total": 6, "cairn_login_throttled_total": 3} {
		f := m[name]
		if f == nil || len(f.Metric) != 1 || f.Metric[0].GetCounter().GetValue() < least {
			t.Errorf("%s: %v; want at least %v", name, f, least)
		}
	}
}
