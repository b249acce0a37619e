package cluster

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/test/wait"
)

// Users exist only with TLS on: an open node, which asks nobody who they
// are, refuses to make, change or delete one, and nothing is stored.
func TestUsers_AnOpenNodeMakesNone(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)
	_, err := a.CreateUser(ctx, "mallory", "mallory-password", []client.Grant{{Pattern: "*", Actions: []string{"all"}}})
	for what, err := range map[string]error{
		"user create": err,
		"user passwd": a.SetPassword(ctx, "mallory", "other-password"),
		"user delete": a.DeleteUser(ctx, "mallory"),
	} {
		wantErr(t, what+" on an open node", err, client.ErrInvalidArgument)
		if err != nil && !strings.Contains(err.Error(), "users exist only with TLS on") {
			t.Errorf("%s on an open node: %q; want it to say users need TLS", what, err)
		}
	}
	if users, err := a.ListUsers(ctx); err != nil || len(users) != 0 {
		t.Fatalf("users of an open node: %v, %v", users, err)
	}
}

// errorLog keeps the messages logged at ERROR.
type errorLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *errorLog) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelError }
func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler            { return l }
func (l *errorLog) WithGroup(string) slog.Handler                 { return l }
func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool { msg += " " + a.String(); return true })
	l.msgs = append(l.msgs, msg)
	return nil
}

func (l *errorLog) find(s string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.msgs {
		if strings.Contains(m, s) {
			return m
		}
	}
	return ""
}

// A node started with --admin-password-file over a cluster that has users
// but no admin does not make admin, and says so at ERROR, naming the users
// and what to do; the users it found go on working.
func TestUsers_AdminPasswordFileOverUsersSaysItMadeNoAdmin(t *testing.T) {
	t.Parallel()
	_, tc := newTLSCluster(t, 1)
	ctx := testCtx(t)
	if _, err := tc.Admin("n1").CreateUser(ctx, "ops", "ops-password", []client.Grant{{Pattern: "*", Actions: []string{"all"}}}); err != nil {
		t.Fatal(err)
	}
	asOps := func() *client.Admin {
		o := clientOptions(t, tc.Node("n1"))
		o.User, o.Password = "ops", "ops-password"
		a, err := client.NewAdmin([]string{tc.Node("n1").Addrs().Client}, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		return a
	}
	if err := asOps().DeleteUser(ctx, AdminUser); err != nil {
		t.Fatal(err)
	}
	tc.Stop("n1")
	logs := &errorLog{}
	tc.cfgs[0].Logger = slog.New(logs)
	tc.Start("n1")
	wait.For(t, 20*time.Second, "an ERROR saying admin was not made", func() bool {
		return logs.find("did not make user admin from --admin-password-file") != ""
	})
	if m := logs.find("did not make user admin"); !strings.Contains(m, "users=ops") || !strings.Contains(m, "cairn user create admin") {
		t.Errorf("the ERROR: %q; want it to name the users and what to do", m)
	}
	users, err := asOps().ListUsers(ctx)
	if err != nil || len(users) != 1 || users[0].Name != "ops" {
		t.Fatalf("users after the restart: %v, %v; want ops alone", users, err)
	}
}
