package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// Connecting to a destination's host (Options.PreferHostOf). A consumer
// whose connection's node is not its member's host is served through that
// node: the host pushes each delivery to it over a stream of its own, and
// it pushes them on to the client; acknowledgements come back the same way.
// Measured on the project's 2-core machines, three consumers of four served
// so consumed a backlog 10–22 % slower than with every client on the host,
// the nodes spent 13–17 % more CPU, and the end-to-end p99 at half load was
// 36–94 ms instead of 21–25.
//
// So a connection may ask, before it opens its link, which node hosts the
// destination it will consume, and connect there instead: as RabbitMQ
// advises a quorum queue's consumers to connect to its leader's node, and as
// a Kafka consumer fetches from the partition's leader. It changes where
// the connection lives, nothing of what it does: the connection's sessions
// and consumers live on that node as on any other, and losing it is losing
// the connection's node (the ReconnectPolicy says what follows), where
// before it was losing the host, which the connection's node hid. Under a
// node failure, a consumer's fate is tied to one node either way.
//
// The preference is looked up at each connect and reconnect, never while
// connected: a host that moves later (a leadership transfer, a restart)
// leaves the connection where it is, served through its node as before,
// until it next reconnects.

// locateTimeout bounds asking a node for a destination's host. The node
// asks the host for the member's figures, up to 2 s per try; a reconnect
// must not wait long for a preference, it falls back to the node it asked.
const locateTimeout = 2 * time.Second

// openPreferred opens the connection's link through addr: to the host of
// Options.PreferHostOf when addr's node names one other than itself and
// other than avoid (the node just lost, which may still be named before an
// election), else to addr itself.
func (c *Connection) openPreferred(ctx context.Context, addr string, gen uint64, avoid string) (*link, error) {
	if c.opts.PreferHostOf == "" {
		return c.openLink(ctx, addr, gen, c.opts.ClientID)
	}
	pc, err := nodeConns.acquire(addr, &c.opts)
	if err != nil {
		return nil, err
	}
	// Held until the link is opened: a link to addr then shares it.
	defer nodeConns.release(pc)
	node, hostAddr, err := c.locate(ctx, pc, addr)
	if err != nil {
		return nil, err
	}
	if hostAddr != "" && hostAddr != addr && node != avoid {
		l, err := c.openLink(ctx, hostAddr, gen, c.opts.ClientID)
		if err == nil {
			return l, nil
		}
		c.opts.Logger.Info("cairn: cannot connect to the host of the preferred destination; connecting to the node that named it", "dest", c.opts.PreferHostOf, "host", node, "host_addr", hostAddr, "via", addr, "err", err)
	}
	return c.openLink(ctx, addr, gen, c.opts.ClientID)
}

// locate asks addr's node (over pc) which node hosts Options.PreferHostOf: a
// destination with one member, or a member's address (NAME#I). It returns
// nothing for a destination of several members, whose consumers the
// cluster serves from every member's host, or when the node knows no host.
// Its only error is a name the node refuses as malformed (ErrInvalidName),
// which no reconnect would mend.
func (c *Connection) locate(ctx context.Context, pc *pooledConn, addr string) (node, hostAddr string, err error) {
	lctx, cancel := context.WithTimeout(ctx, min(locateTimeout, c.opts.DialTimeout))
	defer cancel()
	want := c.opts.PreferHostOf
	name, _, _ := strings.Cut(want, "#")
	info, err := clientpb.NewClientServiceClient(pc.cc).ShowDestination(lctx, &clientpb.ShowDestinationRequest{Name: name})
	if err != nil {
		err = transport.FromStatus(err)
		if errors.Is(err, ErrInvalidName) {
			return "", "", fmt.Errorf("the destination to prefer the host of (Options.PreferHostOf): %w", err)
		}
		// Not an error: a destination created later is found at the next
		// reconnect. A misspelt one is found here, in the log.
		c.opts.Logger.Info("cairn: cannot find the host of Options.PreferHostOf; connecting to the node dialled", "dest", want, "via", addr, "err", err)
		return "", "", nil
	}
	for _, m := range info.Members {
		if m.Name == want || (name == want && len(info.Members) == 1) {
			return m.Host, m.HostAddr, nil
		}
	}
	if name == want {
		c.opts.Logger.Info("cairn: Options.PreferHostOf names a destination of several members, hosted on several nodes; name one member (NAME#I) to connect to its host", "dest", want, "members", len(info.Members))
	} else {
		c.opts.Logger.Info("cairn: Options.PreferHostOf names no member of its destination", "dest", want, "members", len(info.Members))
	}
	return "", "", nil
}
