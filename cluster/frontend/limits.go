package frontend

import (
	"fmt"
	"net"

	"github.com/cairnmq/cairn/transport"
)

// Limits are what one client connection, and one client host, may hold at
// once, so that one client cannot take a node's memory: past them a
// request is refused with ErrLimitReached.
type Limits struct {
	SessionsPerConnection  int
	ConsumersPerConnection int
	// Connections bounds the client connections (Connect streams) the
	// node serves at once, ConnectionsPerHost those from one client host.
	Connections, ConnectionsPerHost int
}

// roomFor refuses a connection over the node's limits; cs.mu is held.
func (cs *Connections) roomFor(c *connection) error {
	l := cs.n.Limits()
	if len(cs.byID) >= l.Connections {
		return fmt.Errorf("%w: node %s serves %d client connections, the most it allows (--max-connections); connect to another node or close some", transport.ErrLimitReached, cs.n.ID(), l.Connections)
	}
	if cs.byHost[c.host()] >= l.ConnectionsPerHost {
		return fmt.Errorf("%w: node %s serves %d client connections from %s, the most it allows one host (--max-connections-per-host); close some", transport.ErrLimitReached, cs.n.ID(), l.ConnectionsPerHost, c.host())
	}
	return nil
}

// host is the client's address without its port.
func (c *connection) host() string {
	if h, _, err := net.SplitHostPort(c.remote); err == nil {
		return h
	}
	return c.remote
}
