package portplan

import (
	"reflect"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/model"
)

func inst(origin, addr string, ip bool, ports map[string]Port) Instance {
	return Instance{Endpoint: model.Endpoint{Address: addr, Origin: origin, Ports: map[string]uint32{"stale": 1}}, IP: ip, Ports: ports}
}

type rejects struct{ got []string }

func (r *rejects) hooks() Rejects {
	return Rejects{
		HostnameAmongIPs: func(in Instance) { r.got = append(r.got, "hostname "+in.Endpoint.Origin) },
		PortDropped:      func(name string) { r.got = append(r.got, "dropped "+name) },
		ServesNoPort:     func(in Instance) { r.got = append(r.got, "noport "+in.Endpoint.Origin) },
	}
}

func TestVotesTakenNumbersAndNotServed(t *testing.T) {
	t.Parallel()
	http := func(n uint32) Port { return Port{Number: n, Protocol: model.ProtocolHTTP} }
	tls := func(n uint32) Port { return Port{Number: n, Protocol: model.ProtocolTCP} }
	insts := []Instance{
		inst("c", "10.0.0.3", true, map[string]Port{"http": http(8080), "https": tls(8443)}),
		inst("a", "10.0.0.1", true, map[string]Port{"http": http(8080)}),
		inst("b", "10.0.0.2", true, map[string]Port{"http": http(9090)}),
		inst("d", "db.internal", false, map[string]Port{"http": http(8080)}),
		// https on its own number: served there, not rejected.
		inst("e", "10.0.0.5", true, map[string]Port{"https": tls(8444)}),
	}
	var r rejects
	res, ok := Plan(insts, Options{}, r.hooks())
	if !ok {
		t.Fatal("no service")
	}
	wantPorts := []model.Port{{Name: "http", Number: 8080, Protocol: model.ProtocolHTTP}, {Name: "https", Number: 8443, Protocol: model.ProtocolTCP}}
	if !reflect.DeepEqual(res.Ports, wantPorts) {
		t.Errorf("ports = %+v, want %+v", res.Ports, wantPorts)
	}
	var got []string
	for _, ep := range res.Endpoints {
		got = append(got, ep.Origin+":"+portsString(ep.Ports))
	}
	// a and c serve http on the service port (not written), b on its own;
	// a and b do not serve https.
	if want := "a:https=0 b:http=9090,https=0 c: e:http=0,https=8444"; strings.Join(got, " ") != want {
		t.Errorf("endpoints = %q, want %q", strings.Join(got, " "), want)
	}
	if want := "hostname d"; strings.Join(r.got, ",") != want {
		t.Errorf("rejects = %q, want %q", strings.Join(r.got, ","), want)
	}
	if res.Resolution != model.ResolutionEDS {
		t.Errorf("resolution %v", res.Resolution)
	}
	if insts[0].Endpoint.Ports["stale"] != 1 {
		t.Error("Plan modified an instance's endpoint")
	}
}

func portsString(p map[string]uint32) string {
	var out []string
	for _, n := range []string{"http", "https", "grpc", "dubbo"} {
		if v, ok := p[n]; ok {
			out = append(out, n+"="+itoa(v))
		}
	}
	return strings.Join(out, ",")
}

func itoa(v uint32) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for ; v > 0; v /= 10 {
		b = append([]byte{byte('0' + v%10)}, b...)
	}
	return string(b)
}

func TestByUseSortByNumberExplicitAndDropped(t *testing.T) {
	t.Parallel()
	grpc := Port{Number: 9000, Protocol: model.ProtocolGRPC}
	insts := []Instance{
		inst("a", "10.0.0.1", true, map[string]Port{"grpc": {Number: 9000}}), // no protocol vote
		inst("b", "10.0.0.2", true, map[string]Port{"grpc": grpc}),
		inst("c", "10.0.0.3", true, map[string]Port{"dubbo": {Number: 9000, Protocol: model.ProtocolTCP}}),
		inst("d", "10.0.0.4", true, map[string]Port{"dubbo": {Number: 20880, Protocol: model.ProtocolTCP}}),
		inst("e", "10.0.0.5", true, map[string]Port{"grpc": grpc}),
	}
	// ByUse: grpc (3 instances) picks first and takes 9000; dubbo's most
	// given number (9000, the smaller of a tie) is taken, so it takes
	// 20880.
	var r rejects
	res, ok := Plan(insts, Options{ByUse: true, SortByNumber: true, Explicit: true}, r.hooks())
	if !ok {
		t.Fatal("no service")
	}
	want := []model.Port{{Name: "grpc", Number: 9000, Protocol: model.ProtocolGRPC}, {Name: "dubbo", Number: 20880, Protocol: model.ProtocolTCP}}
	if !reflect.DeepEqual(res.Ports, want) {
		t.Errorf("ports = %+v, want %+v", res.Ports, want)
	}
	if got := portsString(res.Endpoints[0].Ports); got != "grpc=9000,dubbo=0" {
		t.Errorf("explicit ports of a = %q", got)
	}
	if got := portsString(res.Endpoints[2].Ports); got != "grpc=0,dubbo=9000" {
		t.Errorf("explicit ports of c = %q", got)
	}
	if len(r.got) != 0 {
		t.Errorf("rejects = %v", r.got)
	}

	// By name, dubbo picks first and takes 9000; grpc has no number left
	// and is dropped, and the instances that serve only grpc are rejected.
	r = rejects{}
	res, _ = Plan(insts, Options{}, r.hooks())
	if len(res.Ports) != 1 || res.Ports[0].Name != "dubbo" || res.Ports[0].Number != 9000 {
		t.Errorf("ports by name = %+v", res.Ports)
	}
	if want := "dropped grpc,noport a,noport b,noport e"; strings.Join(r.got, ",") != want {
		t.Errorf("rejects = %q, want %q", strings.Join(r.got, ","), want)
	}
}

func TestHostnamesOnlyAndNothingLeft(t *testing.T) {
	t.Parallel()
	res, ok := Plan([]Instance{inst("a", "db.internal", false, map[string]Port{"tcp": {Number: 5432}})}, Options{}, Rejects{})
	if !ok || res.Resolution != model.ResolutionDNS || res.Ports[0].Protocol != model.ProtocolTCP {
		t.Errorf("hostnames only: %+v, %v; want DNS with a TCP port", res, ok)
	}
	if _, ok := Plan(nil, Options{}, Rejects{}); ok {
		t.Error("no instances planned a service")
	}
}
