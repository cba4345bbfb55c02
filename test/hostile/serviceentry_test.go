package hostile

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/serviceentry"
)

// seAddr is a hostile endpoint address that never makes a client look a
// name up off the machine: loopback, localhost or an address no proxy can
// use.
func (g gen) seAddr() string {
	a := g.addr(true)
	if a == "not-an-ip" {
		return "localhost"
	}
	return a
}

// workloadEntry is a hostile inline endpoint or WorkloadEntry spec.
func (g gen) workloadEntry(ports []string) map[string]any {
	we := map[string]any{"address": g.seAddr()}
	if g.r.IntN(2) == 0 {
		we["weight"] = g.weight()
	}
	if g.r.IntN(3) == 0 {
		we["locality"] = g.pick("r1", "r1/z1", "r1/z1/s1", "a//b", "a/b/c/d", g.str())
	}
	if g.r.IntN(3) == 0 {
		we["network"] = g.str()
	}
	if g.r.IntN(3) == 0 {
		labels := map[string]any{"app": g.pick("a", "b")}
		for range g.r.IntN(20) {
			labels[g.str()] = g.str()
		}
		we["labels"] = labels
	}
	if g.r.IntN(4) == 0 && len(ports) > 0 {
		we["ports"] = map[string]any{g.pick(append(ports, "nope")...): g.r.IntN(70000)}
	}
	return we
}

// serviceEntryYAML is a multi-document file of hostile ServiceEntries and
// WorkloadEntries (JSON documents, which are YAML).
func (g gen) serviceEntryYAML(domain string, n int) string {
	var docs []string
	add := func(kind, name string, spec map[string]any) {
		b, err := json.Marshal(map[string]any{"apiVersion": g.pick("networking.istio.io/v1", "networking.istio.io/v1beta1", "networking.istio.io/v1alpha3"),
			"kind": kind, "metadata": map[string]any{"name": name, "namespace": g.pick("a", "b")}, "spec": spec})
		if err != nil {
			panic(err)
		}
		docs = append(docs, string(b))
	}
	for i := range n {
		var hosts []any
		for j := range 1 + g.r.IntN(3) {
			hosts = append(hosts, g.pick(fmt.Sprintf("s%d-%d.%s", i, j, domain), fmt.Sprintf("S%d-%d.%s.", i, j, strings.ToUpper(domain)),
				"*."+domain, fmt.Sprintf("s%d.elsewhere", i), "bad host."+domain, strings.Repeat("a", 64)+"."+domain, fmt.Sprintf("s%d-0.%s", i, domain)))
		}
		var ports []any
		var names []string
		for k := range 1 + g.r.IntN(3) {
			name := g.pick("grpc", "http", "tcp", fmt.Sprintf("p%d", k))
			names = append(names, name)
			p := map[string]any{"number": 1 + g.r.IntN(65535), "name": name, "protocol": g.pick("GRPC", "http", "HTTP2", "TCP", "TLS", "HTTPS", "", "SCTP")}
			if g.r.IntN(8) == 0 {
				p["number"] = g.r.IntN(3) * 40000
			}
			if g.r.IntN(3) == 0 {
				p["targetPort"] = g.r.IntN(70000)
			}
			ports = append(ports, p)
		}
		spec := map[string]any{"hosts": hosts, "ports": ports}
		res := g.pick("STATIC", "DNS", "DNS_ROUND_ROBIN", "NONE", "", "BOGUS")
		switch g.r.IntN(3) {
		case 0:
			spec["workloadSelector"] = map[string]any{"labels": map[string]any{"app": g.pick("a", "b")}}
		default:
			var eps []any
			for range g.r.IntN(8) {
				eps = append(eps, g.workloadEntry(names))
			}
			if len(eps) > 0 {
				spec["endpoints"] = eps
			}
		}
		if (res == "DNS" || res == "DNS_ROUND_ROBIN") && spec["endpoints"] == nil {
			res = "STATIC" // a DNS entry without endpoints would resolve its host off the machine
		}
		if res != "" {
			spec["resolution"] = res
		}
		add("ServiceEntry", fmt.Sprintf("se-%d", i), spec)
	}
	for i := range n {
		add("WorkloadEntry", fmt.Sprintf("we-%d", i), g.workloadEntry([]string{"grpc", "http"}))
	}
	return strings.Join(docs, "\n---\n") + "\n"
}

// TestHostileServiceEntries: hostile Istio YAML through the serviceentry
// registry's conversion, the gate and translation: whatever is served is
// valid and accepted by grpc-go, every endpoint the conversion yields is
// served or listed, and every object is served or rejected with a reason.
func TestHostileServiceEntries(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a grpc-go xDS client")
	}
	t.Parallel()
	i := slices.IndexFunc(hostileRegs, func(o aggregate.RegistryOptions) bool { return o.Kind == "serviceentry" })
	if i < 0 {
		t.Fatal("no serviceentry registry in hostileRegs")
	}
	reg := hostileRegs[i]
	for round := range 2 {
		seed := uint64(time.Now().UnixNano())
		t.Run(fmt.Sprintf("round%d", round), func(t *testing.T) {
			t.Logf("seed %d", seed)
			g := gen{rand.New(rand.NewPCG(seed, uint64(round)))}
			objs, err := serviceentry.Parse("hostile.yaml", []byte(g.serviceEntryYAML(reg.Domain, 20)))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			for _, o := range objs {
				if o.Err != nil && len(o.Problems) == 0 {
					t.Errorf("object error %q of %s is not placed in the file", o.Err, o.Source)
				}
			}
			svcs, rejected := serviceentry.Convert(objs, registries.Common{Name: reg.Name, Kind: reg.Kind, Domain: reg.Domain})
			for _, r := range rejected {
				if r.Reason == "" || r.Subject == "" {
					t.Errorf("rejection without subject or reason: %+v", r)
				}
			}
			snap, _ := serveAndCheck(t, map[string][]model.Service{reg.Name: svcs})
			t.Logf("%d objects: %d services converted, %d items rejected by the conversion, %d served", len(objs), len(svcs), len(rejected), len(snap.Services()))
		})
	}
}
