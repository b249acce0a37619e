package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// cluster is three local server processes.
type cluster struct {
	procs   []*exec.Cmd
	clients []string
	ready   []string // /readyz URLs, when the servers have them
	// secured is what --tls adds (nil without it).
	secured *securedCluster
}

func (c *cluster) stop() {
	for _, p := range c.procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range c.procs {
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = p.Process.Kill()
		}
	}
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func addr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

// start starts one server with its output in log, and remembers it.
func (c *cluster) start(log string, name string, args ...string) error {
	f, err := os.Create(log)
	if err != nil {
		return err
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return err
	}
	c.procs = append(c.procs, cmd)
	return nil
}

func startCairn(dir string) (*cluster, error) {
	ports, err := freePorts(15)
	if err != nil {
		return nil, err
	}
	c := &cluster{}
	if *tlsOn {
		if c.secured, err = secure(filepath.Join(dir, "certs"), []string{"n1", "n2", "n3"}); err != nil {
			return nil, err
		}
	}
	var join []string
	for i := range 3 {
		join = append(join, addr(ports[i*5+3]))
	}
	for i := range 3 {
		p := ports[i*5 : i*5+5]
		id := fmt.Sprintf("n%d", i+1)
		c.clients = append(c.clients, addr(p[0]))
		c.ready = append(c.ready, c.secured.readyURL(addr(p[4])))
		args := append([]string{"server", "--node-id", id, "--data-dir", filepath.Join(dir, id),
			"--bootstrap-expect", "3", "--join", strings.Join(join, ","), "--client-addr", addr(p[0]), "--peer-addr", addr(p[1]),
			"--raft-addr", addr(p[2]), "--gossip-addr", addr(p[3]), "--http-addr", addr(p[4]), "--log-level", "warn", "--auto-create"}, strings.Fields(*serverFlags)...)
		if c.secured != nil {
			args = append(args, c.secured.nodeFlags(id)...)
		}
		if err := c.start(filepath.Join(dir, id+".log"), *cairnBin, args...); err != nil {
			c.stop()
			return nil, err
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, u := range c.ready {
		for {
			resp, err := c.secured.get(u)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				c.stop()
				return nil, fmt.Errorf("the Cairn cluster was not ready after a minute (logs in %s)", dir)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if err := c.secured.waitAdmin(c.clients); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

func lastLine(b []byte) string {
	var last string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) != "" {
			last = sc.Text()
		}
	}
	return last
}
