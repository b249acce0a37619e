package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/cluster/frontend"
	"github.com/cairnmq/cairn/destination"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/member"
	"github.com/cairnmq/cairn/transport"
)

// Every failure a member's host can report has one outcome, whether the
// front-end submitted the command to a replica here or relayed it to the
// host's node over the peer API (peerErrorOf, then fromPeerError), and the
// application sees one error for it: a command that certainly was not
// appended is tried again (the plan's NotSent), one that may be in the log
// is resent only with a dedup id (Unknown), a refusal is final.
func TestOutcome_RelayedAsLocal(t *testing.T) {
	n := &Node{}
	n.groups = newGroups(n)
	for _, c := range []struct {
		name string
		err  error
		want destination.Outcome
		app  error // what the client API says of it
	}{
		{"not the leader", fmt.Errorf("%w: %v", member.ErrNotLeader, raft.ErrNotLeader), destination.NotSent, transport.ErrUnavailable},
		{"raft too busy", fmt.Errorf("%w: %v", member.ErrBusy, raft.ErrEnqueueTimeout), destination.NotSent, transport.ErrUnavailable},
		{"replica stopped (closed)", member.ErrStopped, destination.NotSent, transport.ErrUnavailable},
		{"member sealed by a renewal", fsm.ErrSealed, destination.NotSent, transport.ErrUnavailable},
		{"leadership lost while committing", fmt.Errorf("member: %w: %v", destination.ErrOutcomeUnknown, raft.ErrLeadershipLost), destination.Unknown, transport.ErrUnavailable},
		{"replica shut down under the entry", fmt.Errorf("member: %w: %v", destination.ErrOutcomeUnknown, raft.ErrRaftShutdown), destination.Unknown, transport.ErrUnavailable},
		{"replica stopped at a damaged entry", fmt.Errorf("%w: this replica stopped before the entry", destination.ErrOutcomeUnknown), destination.Unknown, transport.ErrUnavailable},
		{"a full member", fsm.ErrMemberFull, destination.Refused, transport.ErrDestinationFull},
		{"a bad message", fsm.ErrInvalidMessage, destination.Refused, transport.ErrInvalidArgument},
	} {
		local := destination.OutcomeOf(c.err)
		relayed := fromPeerError("n2", peerErrorOf(n, "q#0", c.err))
		if local != c.want {
			t.Errorf("%s: local outcome %v; want %v", c.name, local, c.want)
		}
		// A refusal travels as a result, not as a peer error: only the
		// failures of the try itself are relayed as one.
		if c.want != destination.Refused {
			if got := destination.OutcomeOf(relayed); got != c.want {
				t.Errorf("%s: relayed outcome %v (%v); want %v, as local", c.name, got, relayed, c.want)
			}
			if !errors.Is(frontend.WireError(relayed), c.app) {
				t.Errorf("%s, relayed: the application sees %v; want %v", c.name, frontend.WireError(relayed), c.app)
			}
		}
		if !errors.Is(frontend.WireError(c.err), c.app) {
			t.Errorf("%s: the application sees %v; want %v", c.name, frontend.WireError(c.err), c.app)
		}
	}
	if got := frontend.WireError(context.DeadlineExceeded); got != context.DeadlineExceeded {
		t.Errorf("the caller's deadline became %v; want it as it is", got)
	}
}
