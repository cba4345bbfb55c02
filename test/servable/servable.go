// Package servable holds the invariant fuzz targets of registry
// conversions assert, CheckServable, and those fuzz targets: a registry's
// state passed through the aggregator's normalization gate and xDS
// translation. It is on the test side of the data flow (registries →
// aggregate → xds): it imports all three, so registry packages (and their
// tests), which import nothing downstream, do not import it; the fuzz
// targets live here, over the registries' exported conversions
// (consul.Convert, eureka.Convert, nacos.Convert, zookeeper.Convert).
package servable

import (
	"math"
	"net"
	"strconv"
	"strings"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/xds/translate"
)

// CheckServable is the invariant fuzz targets of registry conversions
// assert (docs/architecture.md §3.4, normalization gate): a registry's
// full state, passed through the normalization gate and xDS translation,
//   - gives resources that all pass ValidateAll, with no service left out
//     by translation;
//   - gives ClusterLoadAssignments grpc-go accepts (its checks beyond
//     ValidateAll: endpoint weights per locality and locality weights sum
//     to at most 2^32-1, no address twice);
//   - drops nothing silently: every input endpoint is served, or a
//     conflict names it or its service; every rejection is listed.
func CheckServable(t testing.TB, c registries.Common, services []model.Service, rejected []model.Rejection) {
	t.Helper()
	served, conflicts := aggregate.Gate(aggregate.RegistryOptions{Common: c}, services, rejected)
	origins := map[string]bool{}
	for _, s := range served {
		for _, e := range s.Endpoints {
			origins[e.Origin] = true
		}
	}
	listed := func(host, origin string) bool {
		for _, cf := range conflicts {
			if (origin != "" && strings.Contains(cf.Subject, origin)) || (cf.Subject == cf.Host && strings.EqualFold(cf.Host, strings.TrimSuffix(host, "."))) {
				return true
			}
		}
		return false
	}
	for _, s := range services {
		for _, e := range s.Endpoints {
			if !(e.Origin != "" && origins[e.Origin]) && !listed(s.Hostname, e.Origin) {
				t.Errorf("endpoint %q (%s) of %q is neither served nor listed as a conflict", e.Address, e.Origin, s.Hostname)
			}
		}
	}
	for _, r := range rejected {
		if !listed("", r.Subject) && r.Subject != "" {
			t.Errorf("rejection of %q (%s) is not listed as a conflict", r.Subject, r.Reason)
		}
	}

	tr := translate.NewTranslator()
	tr.Translate(model.NewSnapshot(1, served))
	if inv := tr.Invalid(); len(inv) > 0 {
		t.Errorf("translation left out services the gate let through: %v", inv)
	}
	for _, k := range translate.Kinds {
		for name, r := range tr.Resources(k) {
			if v, ok := r.(interface{ ValidateAll() error }); ok {
				if err := v.ValidateAll(); err != nil {
					t.Errorf("%s %s: %v", k.TypeURL, name, err)
				}
			}
			if cla, ok := r.(interface {
				GetEndpoints() []*endpoint.LocalityLbEndpoints
			}); ok {
				if err := grpcAcceptsCLA(cla.GetEndpoints()); err != "" {
					t.Errorf("grpc-go would reject %s: %s", name, err)
				}
			}
		}
	}
}

// grpcAcceptsCLA applies grpc-go's ClusterLoadAssignment checks beyond
// ValidateAll (xdsresource.parseEDSRespProto, v1.85); "" when it accepts.
func grpcAcceptsCLA(locs []*endpoint.LocalityLbEndpoints) string {
	var locSum uint64
	seen := map[string]bool{}
	for _, l := range locs {
		if l.GetLocality() == nil {
			return "a locality without ID"
		}
		locSum += uint64(l.GetLoadBalancingWeight().GetValue())
		if locSum > math.MaxUint32 {
			return "sum of locality weights exceeds 4294967295"
		}
		var sum uint64
		for _, e := range l.GetLbEndpoints() {
			w := uint64(1)
			if lw := e.GetLoadBalancingWeight(); lw != nil {
				if lw.GetValue() == 0 {
					return "an endpoint with zero weight"
				}
				w = uint64(lw.GetValue())
			}
			sum += w
			if sum > math.MaxUint32 {
				return "sum of weights of endpoints in the same locality exceeds 4294967295"
			}
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			a := net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue())))
			if seen[a] {
				return "duplicate endpoint " + a
			}
			seen[a] = true
		}
	}
	return ""
}
