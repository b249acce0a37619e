package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cairnmq/cairn/transport/certs"
)

var tlsOn = flag.Bool("tls", false, "run the Cairn nodes with TLS and users on (their certificates made for the run), and the standard set through them as user admin")

// adminPassword is user admin's in a --tls run.
const adminPassword = "bench-admin-password"

// securedCluster is what --tls adds to a cluster: each node's server
// flags, the flags of cairn commands, and the client TLS for /readyz.
type securedCluster struct {
	nodeFlags  func(id string) []string
	cliFlags   []string
	httpClient *http.Client
}

// secure makes a CA, the nodes' certificates, a gossip key and the admin's
// password in dir.
func secure(dir string, ids []string) (*securedCluster, error) {
	now := time.Now()
	ca, err := certs.NewCA(certs.CAValidity, now)
	if err != nil {
		return nil, err
	}
	if _, _, err := ca.Write(dir, "ca", false); err != nil {
		return nil, err
	}
	for _, id := range ids {
		p, err := certs.NewNode(ca, id, []string{"127.0.0.1", "localhost"}, certs.CertValidity, now)
		if err != nil {
			return nil, err
		}
		if _, _, err := p.Write(dir, id, false); err != nil {
			return nil, err
		}
	}
	pw := filepath.Join(dir, "admin-password")
	if err := os.WriteFile(pw, []byte(adminPassword+"\n"), 0o600); err != nil {
		return nil, err
	}
	caFile := filepath.Join(dir, "ca.pem")
	tc, err := certs.ClientTLS(caFile, "", "")
	if err != nil {
		return nil, err
	}
	return &securedCluster{
		nodeFlags: func(id string) []string {
			return []string{"--tls-cert", filepath.Join(dir, id+".pem"), "--tls-key", filepath.Join(dir, id+"-key.pem"), "--tls-ca", caFile,
				"--gossip-key", "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=", "--admin-password-file", pw}
		},
		cliFlags:   []string{"--tls-ca", caFile, "--user", "admin", "--password-file", pw},
		httpClient: &http.Client{Transport: &http.Transport{TLSClientConfig: tc.Clone()}},
	}, nil
}

// readyURL is a node's /readyz at its HTTP address.
func (s *securedCluster) readyURL(addr string) string {
	if s == nil {
		return "http://" + addr + "/readyz"
	}
	return "https://" + addr + "/readyz"
}

func (s *securedCluster) get(url string) (*http.Response, error) {
	if s == nil {
		return http.Get(url)
	}
	return s.httpClient.Get(url)
}

// waitAdmin waits until user admin answers: it is made once the meta
// group has a leader.
func (s *securedCluster) waitAdmin(clients []string) error {
	if s == nil {
		return nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		args := append(append([]string{"--server", strings.Join(clients, ",")}, s.cliFlags...), "queue", "list")
		out, err := exec.Command(*cairnBin, args...).CombinedOutput()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("user admin did not answer within 30 s: %v: %s", err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
