package fsm_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cairnmq/cairn/fsm"
)

func TestValidateName_AcceptsAndRejects(t *testing.T) {
	good := []string{
		"orders", "a", "A", "0", "_x", "orders.eu-west_1", "x.", "x-",
		strings.Repeat("n", fsm.MaxNameLength),
	}
	for _, n := range good {
		if err := fsm.ValidateName(n); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", n, err)
		}
	}
	bad := []string{
		"", "#1", "orders#1", "a b", " a", "a\n", ".hidden", "-flag", "a/b", "a:b", "a*", "é", "ордер",
		"a\x00", "\xff", strings.Repeat("n", fsm.MaxNameLength+1),
	}
	for _, n := range bad {
		if err := fsm.ValidateName(n); !errors.Is(err, fsm.ErrInvalidName) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalidName", n, err)
		}
	}
}

func TestParseAddress_SplitsNameAndMember(t *testing.T) {
	cases := []struct {
		addr   string
		dest   string
		member int
	}{
		{"orders", "orders", -1},
		{"orders#0", "orders", 0},
		{"orders#1", "orders", 1},
		{"orders#63", "orders", 63},
		{"a.b-c_d#10", "a.b-c_d", 10},
		{strings.Repeat("n", fsm.MaxNameLength) + "#2", strings.Repeat("n", fsm.MaxNameLength), 2},
	}
	for _, c := range cases {
		d, m, err := fsm.ParseAddress(c.addr)
		if err != nil || d != c.dest || m != c.member {
			t.Errorf("ParseAddress(%q) = %q, %d, %v; want %q, %d", c.addr, d, m, err, c.dest, c.member)
		}
	}
}

func TestParseAddress_RejectsBadAddresses(t *testing.T) {
	bad := []string{
		"", "#1", "#", "a b", "a b#1", "orders#", "orders#x", "orders#01", "orders#00", "orders#-1", "orders#+1",
		"orders# 1", "orders#1#2", "orders#1.5", "orders#65536", "orders#99999999999999999999", ".orders#1",
		strings.Repeat("n", fsm.MaxNameLength+1), strings.Repeat("n", fsm.MaxNameLength+1) + "#1",
	}
	for _, a := range bad {
		d, m, err := fsm.ParseAddress(a)
		if !errors.Is(err, fsm.ErrInvalidName) {
			t.Errorf("ParseAddress(%q) = %q, %d, %v; want ErrInvalidName", a, d, m, err)
		}
		if d != "" || m != 0 {
			t.Errorf("ParseAddress(%q) returned %q, %d with an error", a, d, m)
		}
	}
}

func TestMemberName_RoundTripsThroughParseAddress(t *testing.T) {
	for _, i := range []uint32{0, 1, 9, 10, 63} {
		addr := fsm.MemberName("orders", i)
		d, m, err := fsm.ParseAddress(addr)
		if err != nil || d != "orders" || m != int(i) {
			t.Errorf("ParseAddress(MemberName(orders, %d) = %q) = %q, %d, %v", i, addr, d, m, err)
		}
	}
	if got := fsm.MemberName("q", 3); got != "q#3" {
		t.Fatalf("MemberName = %q", got)
	}
}
