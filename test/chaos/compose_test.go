package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/test/wait"
	"github.com/cairnmq/cairn/transport/certs"
)

const project = "cairn-chaos"

// composeCluster is deploy/compose.yaml's three containers, hurt through
// docker.
type composeCluster struct{}

func compose(t *testing.T, args ...string) string {
	t.Helper()
	return must(t, "docker-compose", append([]string{"-f", "deploy/compose.yaml", "-p", project}, args...)...)
}

func container(i int) string { return fmt.Sprintf("%s_cairn-%d_1", project, i) }

const network = project + "_cairn"

// clientAddrs are the compose cluster's client ports on this host.
func (composeCluster) clientAddrs() string {
	return "127.0.0.1:7650,127.0.0.1:7660,127.0.0.1:7670"
}

// credentials are make certs' files: the CA and user admin's password.
func (composeCluster) credentials(t *testing.T) ([]string, client.Options) {
	dir := filepath.Join(root, "deploy", "certs")
	ca, pwFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "admin-password")
	tc, err := certs.ClientTLS(ca, "", "")
	if err != nil {
		t.Fatalf("the compose cluster's CA (make certs): %v", err)
	}
	pw, err := os.ReadFile(pwFile)
	if err != nil {
		t.Fatal(err)
	}
	return []string{"--tls-ca", ca, "--user", "admin", "--password-file", pwFile},
		client.Options{TLS: tc, User: "admin", Password: strings.TrimSpace(string(pw))}
}

func (composeCluster) describe(i int) string { return "container " + container(i) }

func (composeCluster) kill(t *testing.T, i int)   { must(t, "docker", "kill", container(i)) }
func (composeCluster) start(t *testing.T, i int)  { must(t, "docker", "start", container(i)) }
func (composeCluster) pause(t *testing.T, i int)  { must(t, "docker", "pause", container(i)) }
func (composeCluster) resume(t *testing.T, i int) { must(t, "docker", "unpause", container(i)) }

func (composeCluster) isolate(t *testing.T, i int) {
	must(t, "docker", "network", "disconnect", network, container(i))
}

func (composeCluster) reconnect(t *testing.T, i int) {
	must(t, "docker", "network", "connect", "--alias", fmt.Sprintf("cairn-%d", i), network, container(i))
}

// startEmpty replaces the container and its volume, as a pod given a new
// volume.
func (composeCluster) startEmpty(t *testing.T, i int) {
	must(t, "docker", "rm", "-f", container(i))
	must(t, "docker", "volume", "rm", fmt.Sprintf("%s_cairn-%d", project, i))
	compose(t, "up", "-d", fmt.Sprintf("cairn-%d", i))
}

func (composeCluster) restart(t *testing.T, i int) {
	must(t, "docker", "restart", "-t", "30", container(i))
	waitHealthy(t, 90*time.Second)
}

func (composeCluster) restartAll(t *testing.T) {
	must(t, "docker", "restart", "-t", "10", container(0), container(1), container(2))
	waitHealthy(t, 90*time.Second)
}

// heal undoes every fault: unpaused, connected, started. Each step fails
// harmlessly where its fault is not in place.
func (composeCluster) heal(t *testing.T) {
	t.Helper()
	for i := range 3 {
		c := container(i)
		run(t, "docker", "unpause", c)
		run(t, "docker", "network", "connect", "--alias", fmt.Sprintf("cairn-%d", i), network, c)
		run(t, "docker", "start", c)
	}
	waitHealthy(t, 90*time.Second)
}

func (composeCluster) lastWords(t *testing.T) {
	for i := range 3 {
		out, _ := run(t, "docker", "logs", "--tail", "40", container(i))
		t.Logf("last lines of %s:\n%s", container(i), out)
	}
}

// waitHealthy waits until every container is running and healthy.
func waitHealthy(t *testing.T, d time.Duration) {
	t.Helper()
	var out string
	wait.For(t, d, "the compose cluster healthy", func() bool {
		out, _ = run(t, "docker", "inspect", "-f", "{{.State.Health.Status}}", container(0), container(1), container(2))
		return strings.Count(out, "healthy") == 3 && !strings.Contains(out, "unhealthy")
	})
}

// Every scenario against the compose cluster.
func TestChaos_Compose(t *testing.T) {
	t.Parallel() // beside TestChaos_Local: see runScenarios
	if !enabled() {
		t.Skip("the chaos suite runs with CAIRN_CHAOS=1 (make chaos)")
	}
	if out, err := run(t, "docker", "info"); err != nil {
		t.Skipf("no Docker engine answers: %v\n%s", err, out)
	}
	if out, err := run(t, "docker", "image", "inspect", "cairn:dev"); err != nil {
		t.Fatalf("no cairn:dev image (make image): %v\n%s", err, out)
	}
	down := func() { run(t, "docker-compose", "-f", "deploy/compose.yaml", "-p", project, "down", "-v") }
	down()
	compose(t, "up", "-d")
	t.Cleanup(down)
	waitHealthy(t, 90*time.Second)
	runScenarios(t, composeCluster{})
}
