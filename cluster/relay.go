package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/destination"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/peerpb"
)

// Relaying: a member command carried to the member's host, this node's
// replica or another node's over the peer service's propose stream, and
// carried again to a new host while it certainly was not sent. Which
// member a command goes to is the router's (package destination); this
// file only gets it there.

// submitAsync runs a member command on the member's host, wherever it is.
// Commands submitted for one member from one goroutine reach the host in
// order. A command that did not reach the host's log (no host yet, not the
// leader any more) is sent again, to the new host, until destination.RouteWindow passes;
// one that may have reached it and got no answer is not: done gets an error
// wrapping destination.ErrOutcomeUnknown. done must not block.
func (n *Node) submitAsync(name string, body proto.Message, done func(fsm.Result, error)) {
	n.attempt(name, body, time.Now().Add(destination.RouteWindow), done)
}

// submitRepeatable is submitAsync for a command that its member applies
// once however often it comes (a Recover naming its attempt): one that got
// no answer, because its leader stepped down under it, is sent again too,
// until destination.RouteWindow passes, so a failover costs the client a slower answer
// rather than an error it cannot act on. If the window ends after such a
// try, the error still says the outcome is unknown.
func (n *Node) submitRepeatable(name string, body proto.Message, done func(fsm.Result, error)) {
	deadline := time.Now().Add(destination.RouteWindow)
	plan := destination.PlanRepeat() // tries run one after another: no lock needed
	var try func()
	try = func() {
		n.attempt(name, body, deadline, func(res fsm.Result, err error) {
			step, err := plan.After(err, !time.Now().Before(deadline))
			if step == destination.Done {
				done(res, err)
				return
			}
			// Off the caller's goroutine: it may be a proposer's or a stream's.
			go func() {
				select {
				case <-time.After(50 * time.Millisecond):
					try()
				case <-n.stopped:
					done(res, plan.Abandon(fmt.Errorf("%w: node %s is stopping", transport.ErrNodeStopping, n.cfg.NodeID)))
				}
			}()
		})
	}
	try()
}

func (n *Node) attempt(name string, body proto.Message, deadline time.Time, done func(fsm.Result, error)) {
	retry := func(err error) {
		if !time.Now().Before(deadline) {
			done(fsm.Result{}, destination.MarkNotSent(fmt.Errorf("%w: member %s has no reachable host (is a majority of its replicas up and connected to this node?): %v", transport.ErrUnavailable, name, err)))
			return
		}
		// Off the caller's goroutine: it may be a proposer's or a stream's.
		go func() {
			select {
			case <-time.After(50 * time.Millisecond):
			case <-n.stopped:
				done(fsm.Result{}, fmt.Errorf("%w: node %s is stopping", transport.ErrNodeStopping, n.cfg.NodeID))
				return
			}
			n.attempt(name, body, deadline, done)
		}()
	}
	r, node := n.host(name)
	switch {
	case r != nil:
		r.Submit(body, func(res fsm.Result, err error) {
			switch {
			case errors.Is(err, destination.ErrNotSent): // not the leader, or Raft too busy
				retry(err)
			default:
				done(res, err)
			}
		})
	case node != "" && node != n.cfg.NodeID:
		n.peers.propose(node, name, body, func(resp *peerpb.ProposeResponse, err error) {
			if err == nil && resp.Error != nil {
				err = fromPeerError(node, resp.Error)
			}
			var pe *peerError
			switch {
			case err == nil:
				done(toResult(resp.Result), nil)
			case errors.As(err, &pe) && errors.Is(err, destination.ErrNotSent):
				n.hostCache.set(name, pe.leader)
				retry(err)
			case errors.Is(err, destination.ErrOutcomeUnknown):
				n.hostCache.set(name, "")
				done(fsm.Result{}, fmt.Errorf("%w: %v", destination.ErrOutcomeUnknown, err))
			default:
				done(fsm.Result{}, err)
			}
		})
	default:
		retry(fmt.Errorf("no leader known for member %s", name))
	}
}

// submit runs a member command on its host and waits for the result; a
// rejection is returned as the error, as well as in the result.
func (n *Node) submit(ctx context.Context, name string, body proto.Message) (fsm.Result, error) {
	return n.submitBy(ctx, name, body, time.Now().Add(destination.RouteWindow))
}

// submitBy is submit that stops looking for the member's host at deadline.
func (n *Node) submitBy(ctx context.Context, name string, body proto.Message, deadline time.Time) (fsm.Result, error) {
	return await(ctx, func(done func(fsm.Result, error)) { n.attempt(name, body, deadline, done) })
}

// submitRepeatableWait is submitRepeatable that waits for the answer; a
// rejection is returned as the error, as well as in the result.
func (n *Node) submitRepeatableWait(ctx context.Context, name string, body proto.Message) (fsm.Result, error) {
	return await(ctx, func(done func(fsm.Result, error)) { n.submitRepeatable(name, body, done) })
}

// await runs an asynchronous submit and waits for its answer or ctx.
func await(ctx context.Context, submit func(done func(fsm.Result, error))) (fsm.Result, error) {
	type outcome struct {
		r   fsm.Result
		err error
	}
	ch := make(chan outcome, 1)
	submit(func(r fsm.Result, err error) { ch <- outcome{r, err} })
	select {
	case o := <-ch:
		if o.err == nil {
			o.err = o.r.Err
		}
		return o.r, o.err
	case <-ctx.Done():
		return fsm.Result{}, ctx.Err()
	}
}
