package fsm_test

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// Users are made once, changed only if they exist, deleted once; a bad
// name, grant or pattern is refused and changes nothing; the users survive
// a snapshot.
func TestMeta_Users(t *testing.T) {
	f := newMeta(t)
	alice := &fsmpb.User{Name: "alice", PasswordHash: []byte("h1"), Grants: []*fsmpb.Grant{{Pattern: "orders.*", Actions: uint32(fsm.ActionSend)}}}
	f.ok(&fsmpb.PutUser{User: alice, Create: true})
	for _, c := range []struct {
		what string
		cmd  proto.Message
		want error
	}{
		{"alice again", &fsmpb.PutUser{User: alice, Create: true}, fsm.ErrUserExists},
		{"a change of nobody", &fsmpb.PutUser{User: &fsmpb.User{Name: "bob"}}, fsm.ErrUnknownUser},
		{"a delete of nobody", &fsmpb.DeleteUser{Name: "bob"}, fsm.ErrUnknownUser},
		{"a bad name", &fsmpb.PutUser{User: &fsmpb.User{Name: "a b"}, Create: true}, fsm.ErrInvalidSettings},
		{"a bad pattern", &fsmpb.PutUser{User: &fsmpb.User{Name: "bob", Grants: []*fsmpb.Grant{{Pattern: "orders*", Actions: 1}}}, Create: true}, fsm.ErrInvalidSettings},
		{"no action", &fsmpb.PutUser{User: &fsmpb.User{Name: "bob", Grants: []*fsmpb.Grant{{Pattern: "*"}}}, Create: true}, fsm.ErrInvalidSettings},
		{"an unknown action", &fsmpb.PutUser{User: &fsmpb.User{Name: "bob", Grants: []*fsmpb.Grant{{Pattern: "*", Actions: 1 << 20}}}, Create: true}, fsm.ErrInvalidSettings},
		{"no user", &fsmpb.PutUser{Create: true}, fsm.ErrMalformed},
	} {
		before := metaState(t, f.m)
		if r := f.do(c.cmd); !errors.Is(r.Err, c.want) {
			t.Errorf("%s: %v, want %v", c.what, r.Err, c.want)
		}
		if got := metaState(t, f.m); !bytes.Equal(withoutApplied(t, got), withoutApplied(t, before)) {
			t.Errorf("%s: a refused command changed the state", c.what)
		}
	}
	f.ok(&fsmpb.PutUser{User: &fsmpb.User{Name: "alice", PasswordHash: []byte("h2")}})
	if u, ok := f.m.User("alice"); !ok || string(u.PasswordHash) != "h2" || len(u.Grants) != 0 {
		t.Fatalf("alice after the change: %v", u)
	}
	f.ok(&fsmpb.PutUser{User: &fsmpb.User{Name: "bob"}, Create: true})
	var buf bytes.Buffer
	if err := f.m.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	restored, err := fsm.RestoreMeta(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := restored.Users(); len(got) != 2 || got[0].Name != "alice" || got[1].Name != "bob" {
		t.Fatalf("users after a snapshot: %v", got)
	}
	f.ok(&fsmpb.DeleteUser{Name: "alice"})
	if _, ok := f.m.User("alice"); ok {
		t.Fatal("alice is still there after her delete")
	}
}

// A grant allows its actions on the names its pattern names: one name, a
// prefix, or all; a member's address and a subscription count as their
// destination; admin needs no destination.
func TestAllows(t *testing.T) {
	grants := []*fsmpb.Grant{
		{Pattern: "orders.*", Actions: uint32(fsm.ActionSend | fsm.ActionReceive)},
		{Pattern: "audit", Actions: uint32(fsm.ActionBrowse)},
		{Pattern: "prices", Actions: uint32(fsm.ActionReceive)},
	}
	for _, c := range []struct {
		a    fsm.Action
		dest string
		want bool
	}{
		{fsm.ActionSend, "orders.eu", true},
		{fsm.ActionSend, "orders.eu#2", true},
		{fsm.ActionReceive, "orders.eu", true},
		{fsm.ActionSend | fsm.ActionReceive, "orders.eu", true},
		{fsm.ActionManage, "orders.eu", false},
		{fsm.ActionSend, "orders", false},
		{fsm.ActionSend, "ordersx", false},
		{fsm.ActionBrowse, "audit", true},
		{fsm.ActionBrowse, "audit.x", false},
		{fsm.ActionReceive, "prices::sub-1", true},
		{fsm.ActionAdmin, "", false},
	} {
		if got := fsm.Allows(grants, c.a, c.dest); got != c.want {
			t.Errorf("%v on %q: %v, want %v", c.a.Names(), c.dest, got, c.want)
		}
	}
	all := []*fsmpb.Grant{{Pattern: "*", Actions: uint32(fsm.ActionAll)}}
	if !fsm.Allows(all, fsm.ActionAdmin, "") || !fsm.Allows(all, fsm.ActionManage, "anything") {
		t.Error("a grant of everything on * does not allow everything")
	}
	if _, err := fsm.ParseAction("delete"); !errors.Is(err, fsm.ErrInvalidSettings) {
		t.Errorf("ParseAction(delete): %v", err)
	}
}
