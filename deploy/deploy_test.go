// Package deploy holds Cairn's image, compose file and Kubernetes manifests;
// its tests check them with the Kubernetes API types.
package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// manifests decodes every object of cairn.yaml, strictly: an unknown field
// is an error.
func manifests(t *testing.T) (sts *appsv1.StatefulSet, svcs map[string]*corev1.Service, pdb *policyv1.PodDisruptionBudget, np *networkingv1.NetworkPolicy) {
	t.Helper()
	b, err := os.ReadFile("kubernetes/cairn.yaml")
	if err != nil {
		t.Fatal(err)
	}
	svcs = map[string]*corev1.Service{}
	for i, doc := range bytes.Split(b, []byte("\n---\n")) {
		var head struct{ Kind string }
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var obj any
		switch head.Kind {
		case "StatefulSet":
			sts = &appsv1.StatefulSet{}
			obj = sts
		case "Service":
			s := &corev1.Service{}
			obj = s
			defer func() { svcs[s.Name] = s }()
		case "PodDisruptionBudget":
			pdb = &policyv1.PodDisruptionBudget{}
			obj = pdb
		case "NetworkPolicy":
			np = &networkingv1.NetworkPolicy{}
			obj = np
		default:
			t.Fatalf("document %d: unexpected kind %q", i, head.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Fatalf("document %d (%s): %v", i, head.Kind, err)
		}
	}
	if sts == nil || pdb == nil || np == nil {
		t.Fatal("cairn.yaml lacks the StatefulSet, the PodDisruptionBudget or the NetworkPolicy")
	}
	return sts, svcs, pdb, np
}

func env(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		out[e.Name] = e.Value
	}
	return out
}

// The StatefulSet keeps the properties operators rely on.
func TestKubernetes_StatefulSet(t *testing.T) {
	sts, svcs, pdb, _ := manifests(t)
	spec := sts.Spec
	if spec.Replicas == nil || *spec.Replicas != 3 {
		t.Errorf("replicas %v; want 3", spec.Replicas)
	}
	if spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("pod management %q; want Parallel", spec.PodManagementPolicy)
	}
	peers := svcs[spec.ServiceName]
	if peers == nil || peers.Spec.ClusterIP != corev1.ClusterIPNone || !peers.Spec.PublishNotReadyAddresses {
		t.Errorf("service %q: %+v; want a headless service that publishes not-ready pods", spec.ServiceName, peers)
	}
	if c := svcs["cairn"]; c == nil || !slices.ContainsFunc(c.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == 7650 }) {
		t.Errorf("client service cairn: %+v; want port 7650", c)
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget maxUnavailable %v; want 1", pdb.Spec.MaxUnavailable)
	}
	if len(spec.VolumeClaimTemplates) != 1 {
		t.Fatalf("%d volume claim templates; want one per pod", len(spec.VolumeClaimTemplates))
	}
	if len(spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%d containers; want 1", len(spec.Template.Spec.Containers))
	}
	c := spec.Template.Spec.Containers[0]
	e := env(c)
	if e["CAIRN_NODE_ID"] != "$(POD_NAME)" {
		t.Errorf("CAIRN_NODE_ID %q; want the pod's name, so the id follows the ordinal", e["CAIRN_NODE_ID"])
	}
	if e["CAIRN_BOOTSTRAP_EXPECT"] != "3" {
		t.Errorf("CAIRN_BOOTSTRAP_EXPECT %q; want 3", e["CAIRN_BOOTSTRAP_EXPECT"])
	}
	for i := range 3 {
		if want := fmt.Sprintf("cairn-%d.%s.", i, spec.ServiceName); !strings.Contains(e["CAIRN_JOIN"], want) {
			t.Errorf("CAIRN_JOIN %q does not name %s", e["CAIRN_JOIN"], want)
		}
	}
	if !strings.HasPrefix(e["CAIRN_ADVERTISE"], "$(POD_NAME)."+spec.ServiceName+".") {
		t.Errorf("CAIRN_ADVERTISE %q; want the pod's stable name under %s", e["CAIRN_ADVERTISE"], spec.ServiceName)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %+v; want /readyz (ready once joined)", p)
	}
	if l := c.Lifecycle; l == nil || l.PreStop == nil || l.PreStop.Exec == nil || !slices.Equal(l.PreStop.Exec.Command[:3], []string{"/cairn", "node", "leave"}) {
		t.Errorf("preStop %+v; want cairn node leave", l)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("resource requests %+v; want cpu and memory", c.Resources.Requests)
	}
	sc := spec.Template.Spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("security context %+v; want a non-root user", sc)
	}
}

// compose.yaml starts its nodes with the same flags as the StatefulSet:
// the same environment variables, node ids cairn-0..2 that are also the
// hosts' names, advertised and joined by name, three to bootstrap.
func TestCompose_SameFlagsAsTheStatefulSet(t *testing.T) {
	sts, _, _, _ := manifests(t)
	k8s := env(sts.Spec.Template.Spec.Containers[0])
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Hostname    string            `json:"hostname"`
			Environment map[string]string `json:"environment"`
			Ports       []string          `json:"ports"`
			Volumes     []string          `json:"volumes"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatal(err)
	}
	if len(compose.Services) != 3 {
		t.Fatalf("%d services; want 3", len(compose.Services))
	}
	for i := range 3 {
		name := fmt.Sprintf("cairn-%d", i)
		s, ok := compose.Services[name]
		if !ok {
			t.Fatalf("no service %s", name)
		}
		for k := range k8s {
			if strings.HasPrefix(k, "CAIRN_") && k != "CAIRN_DATA_DIR" {
				if _, ok := s.Environment[k]; !ok {
					t.Errorf("%s: %s is set in the StatefulSet, not here", name, k)
				}
			}
		}
		for k := range s.Environment {
			if _, ok := k8s[k]; !ok {
				t.Errorf("%s: %s is not set in the StatefulSet", name, k)
			}
		}
		e := s.Environment
		if e["CAIRN_NODE_ID"] != name || e["CAIRN_ADVERTISE"] != name || s.Hostname != name {
			t.Errorf("%s: node id %q, advertise %q, hostname %q; want all %s", name, e["CAIRN_NODE_ID"], e["CAIRN_ADVERTISE"], s.Hostname, name)
		}
		if e["CAIRN_BOOTSTRAP_EXPECT"] != k8s["CAIRN_BOOTSTRAP_EXPECT"] || e["CAIRN_LOG_FORMAT"] != k8s["CAIRN_LOG_FORMAT"] {
			t.Errorf("%s: bootstrap %q log %q; the StatefulSet has %q %q", name, e["CAIRN_BOOTSTRAP_EXPECT"], e["CAIRN_LOG_FORMAT"], k8s["CAIRN_BOOTSTRAP_EXPECT"], k8s["CAIRN_LOG_FORMAT"])
		}
		if e["CAIRN_JOIN"] != "cairn-0:7653,cairn-1:7653,cairn-2:7653" {
			t.Errorf("%s: join %q", name, e["CAIRN_JOIN"])
		}
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s publishes %q beyond 127.0.0.1", name, p)
			}
		}
		if len(s.Volumes) != 2 || !strings.HasSuffix(s.Volumes[0], ":/var/lib/cairn") || s.Volumes[1] != "./certs:/etc/cairn:ro" {
			t.Errorf("%s: volumes %v; want /var/lib/cairn and make certs' files read-only on /etc/cairn", name, s.Volumes)
		}
		if e["CAIRN_TLS_CERT"] != "/etc/cairn/"+name+".pem" || e["CAIRN_TLS_KEY"] != "/etc/cairn/"+name+"-key.pem" {
			t.Errorf("%s: certificate %q, key %q; want its own", name, e["CAIRN_TLS_CERT"], e["CAIRN_TLS_KEY"])
		}
	}
}

// TLS and users are on in the StatefulSet: each pod serves its own
// certificate from the Secret, the probes speak HTTPS, user admin comes
// from the Secret, and only Cairn's pods reach the peer, Raft and gossip
// ports.
func TestKubernetes_SecuredByDefault(t *testing.T) {
	sts, _, _, np := manifests(t)
	pod := sts.Spec.Template.Spec
	c := pod.Containers[0]
	e := env(c)
	for k, want := range map[string]string{
		"CAIRN_TLS_CERT":            "/etc/cairn/$(POD_NAME).pem",
		"CAIRN_TLS_KEY":             "/etc/cairn/$(POD_NAME)-key.pem",
		"CAIRN_TLS_CA":              "/etc/cairn/ca.pem",
		"CAIRN_GOSSIP_KEY_FILE":     "/etc/cairn/gossip-key",
		"CAIRN_ADMIN_PASSWORD_FILE": "/etc/cairn/admin-password",
	} {
		if e[k] != want {
			t.Errorf("%s %q; want %q", k, e[k], want)
		}
	}
	if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool {
		return v.Secret != nil && v.Secret.SecretName == "cairn-tls" && v.Secret.DefaultMode != nil && *v.Secret.DefaultMode&0o007 == 0
	}) {
		t.Errorf("volumes %+v; want the Secret cairn-tls, unreadable by others", pod.Volumes)
	}
	for what, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s probe %+v; want HTTPS", what, p)
		}
	}
	peerPorts := map[int32]bool{7651: true, 7652: true, 7653: true}
	for _, rule := range np.Spec.Ingress {
		nodesOnly := len(rule.From) > 0 && rule.From[0].PodSelector != nil && rule.From[0].PodSelector.MatchLabels["app.kubernetes.io/name"] == "cairn"
		for _, p := range rule.Ports {
			if peerPorts[p.Port.IntVal] && !nodesOnly {
				t.Errorf("port %d is open beyond Cairn's pods", p.Port.IntVal)
			}
		}
	}
}

// Prometheus finds the nodes: deploy/prometheus.yml scrapes the compose
// cluster's published HTTP ports over TLS with make certs' CA and loads the
// alert rules; the StatefulSet's pods carry the scrape annotations for
// their HTTP port; every rule has an expression, and the dashboard is a
// Grafana dashboard with panels that query something.
func TestPrometheus_ScrapesEveryNode(t *testing.T) {
	var prom struct {
		ScrapeConfigs []struct {
			Scheme    string `json:"scheme"`
			TLSConfig struct {
				CAFile string `json:"ca_file"`
			} `json:"tls_config"`
			StaticConfigs []struct {
				Targets []string `json:"targets"`
			} `json:"static_configs"`
		} `json:"scrape_configs"`
		RuleFiles []string `json:"rule_files"`
	}
	readYAML(t, "prometheus.yml", &prom)
	if len(prom.ScrapeConfigs) != 1 || len(prom.ScrapeConfigs[0].StaticConfigs) != 1 {
		t.Fatalf("prometheus.yml: %+v; want one job with its targets", prom)
	}
	job := prom.ScrapeConfigs[0]
	if job.Scheme != "https" || job.TLSConfig.CAFile != "certs/ca.pem" {
		t.Errorf("prometheus.yml scrapes %s with CA %q; want https with certs/ca.pem", job.Scheme, job.TLSConfig.CAFile)
	}
	compose, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range job.StaticConfigs[0].Targets {
		if !strings.Contains(string(compose), `"`+target+`:7654"`) {
			t.Errorf("prometheus.yml scrapes %s, which compose.yaml does not publish as a node's HTTP port", target)
		}
	}
	if len(job.StaticConfigs[0].Targets) != 3 {
		t.Errorf("prometheus.yml scrapes %v; want the three nodes", job.StaticConfigs[0].Targets)
	}

	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if len(prom.RuleFiles) != 1 {
		t.Fatalf("prometheus.yml loads %v; want the alert rules", prom.RuleFiles)
	}
	readYAML(t, prom.RuleFiles[0], &rules)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || !strings.Contains(r.Expr, "cairn_") {
				t.Errorf("rule %q: expression %q", r.Alert, r.Expr)
			}
		}
	}

	sts, _, _, _ := manifests(t)
	a := sts.Spec.Template.Annotations
	port := sts.Spec.Template.Spec.Containers[0].Ports
	if a["prometheus.io/scrape"] != "true" || a["prometheus.io/scheme"] != "https" || a["prometheus.io/path"] != "/metrics" ||
		!slices.ContainsFunc(port, func(p corev1.ContainerPort) bool {
			return p.Name == "http" && fmt.Sprint(p.ContainerPort) == a["prometheus.io/port"]
		}) {
		t.Errorf("the pods' annotations %v do not point Prometheus at /metrics on the http port over https", a)
	}

	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	b, err := os.ReadFile("grafana/cairn.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("grafana/cairn.json: %v", err)
	}
	queries := 0
	for _, p := range dash.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("a %s panel queries nothing", p.Type)
		}
		queries += len(p.Targets)
	}
	if dash.UID != "cairn" || queries < 10 {
		t.Errorf("grafana/cairn.json: uid %q, %d queries", dash.UID, queries)
	}
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}
