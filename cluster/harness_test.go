// Every test of this package runs in parallel with the others (t.Parallel)
// but those that set a package variable (restartWait, staleGrace,
// replicasLagging through holdCatchingUp, replicaCaughtUp), which run
// first, alone: the tests start nodes and wait on them far more than they
// compute.
package cluster

import (
	"context"
	"flag"
	"os"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/transport/certs"
)

// TestMain runs this package's property tests (rapid) on a handful of
// sequences, each of which drives a cluster, unless -rapid.checks or
// RAPID_CHECKS asks for more. Set here, before any test runs: the tests
// run in parallel, and rapid reads the flag as each starts.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == f.DefValue && os.Getenv("RAPID_CHECKS") == "" {
		_ = flag.Set("rapid.checks", "6")
	}
	os.Exit(m.Run())
}

// startNode starts a node and waits until it is ready.
func startNode(t *testing.T, cfg Config) *Node {
	t.Helper()
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := n.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return n
}

// testCtx bounds a test's client calls as a whole: long enough for every
// step of a test that runs beside others on a busy machine (a test whose
// steps took more than its 20 s, with the machine shared, failed its last
// call); a step that must end sooner has its own (stepCtx).
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Dial connects a client to node id, closed when the test ends.
func (tc *TestCluster) Dial(id string, opts ...func(*client.Options)) *client.Connection {
	return dial(tc.t, tc.Node(id), opts...)
}

// Admin is an admin client of node id, closed when the test ends.
func (tc *TestCluster) Admin(id string) *client.Admin {
	return admin(tc.t, tc.Node(id))
}

// Status asks node id for the cluster status.
func (tc *TestCluster) Status(id string) client.ClusterStatus {
	tc.t.Helper()
	st, err := tc.StatusErr(id)
	if err != nil {
		tc.t.Fatalf("cluster status from %s: %v", id, err)
	}
	return st
}

// StatusErr asks node id for the cluster status, through an admin client
// of its own (status is polled: no cleanup piles up).
func (tc *TestCluster) StatusErr(id string) (client.ClusterStatus, error) {
	a, err := client.NewAdmin([]string{tc.Node(id).Addrs().Client}, clientOptions(tc.t, tc.Node(id)))
	if err != nil {
		return client.ClusterStatus{}, err
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return a.ClusterStatus(ctx)
}

// CreateSpread creates each queue with its number of members and waits
// until each member leads on its preferred host; it returns the hosts by
// queue and member index.
func (tc *TestCluster) CreateSpread(ctx context.Context, members map[string]int) map[string][]string {
	tc.t.Helper()
	hosts := make(map[string][]string, len(members))
	for name, n := range members {
		if _, err := tc.Admin("n1").CreateQueue(ctx, name, client.QueueOptions{Members: n}); err != nil {
			tc.t.Fatal(err)
		}
	}
	for name, n := range members {
		hosts[name] = tc.WaitSpread(name, n)
	}
	return hosts
}

func dial(t *testing.T, n *Node, opts ...func(*client.Options)) *client.Connection {
	t.Helper()
	o := clientOptions(t, n)
	for _, f := range opts {
		f(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, []string{n.Addrs().Client}, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func admin(t *testing.T, n *Node) *client.Admin {
	t.Helper()
	a, err := client.NewAdmin([]string{n.Addrs().Client}, clientOptions(t, n))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// clientOptions reach n: over TLS, verifying it with its cluster's CA, as
// user admin, when it serves TLS.
// A node of a busy test machine may take more than the client's default 5 s
// to open a connection: a password's first check runs bcrypt under the race
// detector beside other clusters.
func clientOptions(t *testing.T, n *Node) client.Options {
	t.Helper()
	if n.cfg.TLSCA == "" {
		return client.Options{DialTimeout: 10 * time.Second}
	}
	tc, err := certs.ClientTLS(n.cfg.TLSCA, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return client.Options{TLS: tc, User: AdminUser, Password: testAdminPassword, DialTimeout: 10 * time.Second}
}

// untested makes a wait's timeout say that the test did not test what it
// is named for: the fault, or the state it needs, never came.
type untested struct{ testing.TB }

func (u untested) Fatalf(format string, args ...any) {
	u.TB.Helper()
	u.TB.Fatalf("the test did not test that: "+format, args...)
}
