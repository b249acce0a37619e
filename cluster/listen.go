package cluster

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/cairnmq/cairn/transport/raftmux"
)

// listen binds the node's listeners, works out the addresses it
// advertises, and starts the Raft port's multiplexer; it returns the host
// it advertises.
func (n *Node) listen() (host string, err error) {
	listen := func(flag, addr string) (net.Listener, error) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w (is another cairn server running? pick another port with %s)", flag, addr, err, flag)
		}
		return ln, nil
	}
	if n.lnClient, err = listen("--client-addr", n.cfg.ClientAddr); err != nil {
		return "", err
	}
	if n.lnPeer, err = listen("--peer-addr", n.cfg.PeerAddr); err != nil {
		return "", err
	}
	if n.lnRaft, err = listen("--raft-addr", n.cfg.RaftAddr); err != nil {
		return "", err
	}
	if n.lnHTTP, err = listen("--http-addr", n.cfg.HTTPAddr); err != nil {
		return "", err
	}
	if host, err = advertiseHost(n.cfg); err != nil {
		return "", err
	}
	n.addrs = Addresses{
		Client: joinHostPort(host, n.lnClient.Addr()),
		Peer:   joinHostPort(host, n.lnPeer.Addr()),
		Raft:   joinHostPort(host, n.lnRaft.Addr()),
		HTTP:   joinHostPort(host, n.lnHTTP.Addr()),
	}
	raftAdv, err := net.ResolveTCPAddr("tcp", n.addrs.Raft)
	if err != nil {
		return "", fmt.Errorf("advertised raft address %s: %w", n.addrs.Raft, err)
	}
	var dial raftmux.Dialer
	if d := n.cfg.Dial; d != nil {
		dial = func(address string, timeout time.Duration) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			return d(ctx, "tcp", address)
		}
	}
	ln, dial := n.raftPort(n.lnRaft, dial)
	n.mux = raftmux.New(ln, raftAdv, dial, n.log)
	return host, nil
}

func advertiseHost(cfg Config) (string, error) {
	if cfg.Advertise != "" {
		return cfg.Advertise, nil
	}
	host, _, _ := net.SplitHostPort(cfg.ClientAddr)
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return host, nil
	}
	return privateIP()
}

func joinHostPort(host string, a net.Addr) string {
	return net.JoinHostPort(host, fmt.Sprint(a.(*net.TCPAddr).Port))
}

func (n *Node) closeListeners() {
	for _, ln := range []net.Listener{n.lnClient, n.lnPeer, n.lnRaft, n.lnHTTP} {
		if ln != nil {
			ln.Close()
		}
	}
}
