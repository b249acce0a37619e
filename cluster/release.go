package cluster

import (
	"errors"
	"time"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// A session release that failed is tried again after a backoff that starts
// at releaseRetryMin and doubles up to releaseRetryMax. Each attempt itself
// looks for the member's host for up to destination.RouteWindow.
const (
	releaseRetryMin = 250 * time.Millisecond
	releaseRetryMax = 30 * time.Second
)

// releaseSession releases session id on member name: what was delivered to
// the session and not acknowledged becomes available again, marked
// redelivered. first, if not nil, gets the outcome of the first attempt
// and must not block.
//
// A release that fails (the host changed while it committed, or no host
// was reachable) is tried again, with backoff, until it is applied, the
// member no longer exists, or this node stops. No one else would release
// the session: the members' hosts sweep only the sessions of front-ends
// that gossip holds dead, and this one lives. Release is idempotent, so an
// attempt whose outcome was unknown is safe to repeat.
func (n *Node) releaseSession(name, id string, first func(error)) {
	backoff := releaseRetryMin
	var try func()
	try = func() {
		n.submitAsync(name, &fsmpb.Release{Session: id}, func(res fsm.Result, err error) {
			err = errors.Join(err, res.Err)
			if first != nil {
				first(err)
				first = nil
			}
			if err == nil {
				return
			}
			n.releasesRetrying.Add(1)
			n.log.Warn("releasing a session failed; its unacknowledged messages wait until a retry succeeds",
				"session", id, "member", name, "retry_in", backoff, "err", err)
			go func() {
				defer n.releasesRetrying.Add(-1)
				select {
				case <-time.After(backoff):
				case <-n.stopped:
					// The hosts sweep the session once this node is gone.
					return
				}
				if !n.memberExists(name) {
					return
				}
				backoff = min(2*backoff, releaseRetryMax)
				try()
			}()
		})
	}
	try()
}

// memberExists reports whether member name ("dest#i") of a destination is
// in the meta group's state, as this node has applied it.
func (n *Node) memberExists(name string) (ok bool) {
	dest, idx, err := fsm.ParseAddress(name)
	if err != nil || idx < 0 {
		return false
	}
	d, found := n.meta.Destination(dest)
	if !found {
		return false
	}
	for _, p := range d.Members {
		if int(p.Index) == idx {
			return true
		}
	}
	return false
}
