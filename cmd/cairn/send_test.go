package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cairnmq/cairn/client"
)

// `cairn send --json` reports each message's outcome: ok, unknown (it may
// or may not have been stored) or error (certainly not stored).
func TestSendOutcome_MapsErrorsToTheJSONContract(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{fmt.Errorf("%w: message ID:1 on member orders#0 may or may not have been enqueued", client.ErrDeliveryUnknown), "unknown"},
		{fmt.Errorf("%w: member orders#0 has no reachable host", client.ErrUnavailable), "error"},
		{client.ErrInvalidArgument, "error"},
	}
	for _, c := range cases {
		if got := outcome(c.err); got != c.want {
			t.Errorf("outcome(%v) = %q; want %q", c.err, got, c.want)
		}
	}
}

// --reconnect takes the policy names of the client library, and nothing else.
func TestDialOptions_ReconnectPolicies(t *testing.T) {
	cmd := newRoot()
	for _, c := range []struct {
		flag string
		want client.ReconnectPolicy
	}{{"none", client.ReconnectNone}, {"producer", client.ReconnectProducer}, {"all", client.ReconnectAll}} {
		o, err := dialOptions(cmd, c.flag)
		if err != nil || o.ReconnectPolicy != c.want {
			t.Errorf("--reconnect %s: %v, %v; want %v", c.flag, o.ReconnectPolicy, err, c.want)
		}
	}
	if _, err := dialOptions(cmd, "sometimes"); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("--reconnect sometimes: %v; want ErrInvalidArgument", err)
	}
}
