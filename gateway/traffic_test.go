package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/admin"
	"github.com/meshfed/meshfed/config"
)

// TestConfigz: objects of a config source reach the model snapshot and
// /debug/configz; an invalid edit is listed with its file:line and reason
// while the last good version stays in force.
func TestConfigz(t *testing.T) {
	dir := t.TempDir()
	traffic := filepath.Join(dir, "traffic")
	if err := os.Mkdir(traffic, 0o755); err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, filepath.Join(dir, "s.yaml"), svcFile("10.0.0.1"))
	dr := "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: a, namespace: ns}\nspec:\n  host: a.vm.internal\n  trafficPolicy: {tls: {mode: SIMPLE, caCertificates: /etc/meshfed/ca.pem}}\n  subsets: [{name: v1, labels: {version: v1}}]\n"
	writeAtomic(t, filepath.Join(traffic, "a.yaml"), dr)
	cfg, err := config.Parse(filepath.Join(dir, "clusters.yaml"), []byte(`xds: {address: "`+freeAddr(t)+`"}
admin: {address: "`+freeAddr(t)+`"}
debounce: {quiet: 1ms, max: 10ms}
registries:
  - {name: vms, kind: file, domain: vm.internal, file: {path: s.yaml}}
configSources:
  - {name: local, dir: traffic}
`))
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGateway(cfg, GatewayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- g.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	configz := func() admin.Configz {
		rec := httptest.NewRecorder()
		g.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/configz", nil))
		var st admin.Configz
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || rec.Code != 200 {
			t.Fatalf("configz: %d %v %s", rec.Code, err, rec.Body)
		}
		return st
	}
	waitUntil(t, func() error {
		if objs := g.agg.Snapshot().Config.Objects(); len(objs) != 1 || objs[0].Name != "a" {
			return fmt.Errorf("snapshot config %v, want DestinationRule ns/a", objs)
		}
		return nil
	})
	if st := configz(); len(st.InForce) != 1 || st.InForce[0].Hosts[0] != "a.vm.internal" || len(st.Rejected) != 0 {
		t.Fatalf("configz = %+v", st)
	}
	// The spec of each object in force is served too (meshfed describe).
	if st := configz(); len(st.Specs) != 1 || st.Specs[0].Name != "a" {
		t.Errorf("configz specs = %+v", st.Specs)
	} else if spec := new(bytes.Buffer); json.Compact(spec, st.Specs[0].Spec) != nil || !strings.Contains(spec.String(), `"labels":{"version":"v1"}`) {
		t.Errorf("configz spec = %s", st.Specs[0].Spec)
	}
	// TLS origination from files reaches Envoy; gRPC clients cannot take
	// it, which configz says.
	waitUntil(t, func() error {
		st := configz()
		for _, n := range st.NotForClients {
			if n.Host == "a.vm.internal" && n.Client == "grpc" && strings.HasPrefix(n.Note, "outbound|80||a.vm.internal: tls SIMPLE") {
				return nil
			}
		}
		return fmt.Errorf("notForClients = %+v, want the TLS of a.vm.internal for grpc", st.NotForClients)
	})
	first := g.agg.Snapshot().Config

	writeAtomic(t, filepath.Join(traffic, "a.yaml"), strings.Replace(dr, "name: v1,", "name: V1,", 1))
	waitUntil(t, func() error {
		st := configz()
		if len(st.Rejected) != 1 {
			return fmt.Errorf("rejected %v, want the edited DestinationRule", st.Rejected)
		}
		return nil
	})
	st := configz()
	r := st.Rejected[0]
	if r.Source != filepath.Join(traffic, "a.yaml")+":1" || !r.KeptLastGood || !strings.Contains(r.Reason, `spec.subsets[0].name "V1"`) ||
		!slices.Equal(r.Hosts, []string{"a.vm.internal"}) {
		t.Errorf("rejection = %+v", r)
	}
	if len(st.InForce) != 1 || g.agg.Snapshot().Config != first {
		t.Errorf("the last good DestinationRule is no longer in force: %+v", st.InForce)
	}
	m := metrics(t, g)
	for _, want := range []string{`meshfed_config_objects{kind="DestinationRule",state="in_force"} 1`, `meshfed_config_objects{kind="DestinationRule",state="rejected"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "meshfed_config"))
		}
	}
}
