package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/translate"
)

func TestWriteResources(t *testing.T) {
	t.Parallel()
	raw := func(s ...string) []json.RawMessage {
		out := make([]json.RawMessage, len(s))
		for i, x := range s {
			out[i] = json.RawMessage(x)
		}
		return out
	}
	tests := []struct {
		kind string
		res  []json.RawMessage
		want []string
	}{
		{"clusters", raw(`{"name":"outbound|8080||orders.vm.internal","type":"EDS","edsClusterConfig":{}}`),
			[]string{"SERVICE FQDN", "orders.vm.internal  8080  -       outbound   EDS"}},
		{"endpoints", raw(`{"clusterName":"outbound|8080||orders.vm.internal","endpoints":[{"locality":{"region":"us-east","zone":"us-east-1a"},
			"lbEndpoints":[{"endpoint":{"address":{"socketAddress":{"address":"10.0.0.5","portValue":18080}}},"healthStatus":"HEALTHY","loadBalancingWeight":1},
			{"endpoint":{"address":{"socketAddress":{"address":"10.0.0.6","portValue":18080}}},"healthStatus":"UNHEALTHY","loadBalancingWeight":2}]}]}`),
			[]string{"10.0.0.5:18080  HEALTHY    us-east/us-east-1a  1       outbound|8080||orders.vm.internal", "10.0.0.6:18080  UNHEALTHY"}},
		{"listeners", raw(`{"name":"0.0.0.0_8080","address":{"socketAddress":{"address":"0.0.0.0","portValue":8080}}}`,
			`{"name":"orders.vm.internal:8080","apiListener":{"apiListener":{}}}`),
			[]string{"0.0.0.0_8080             0.0.0.0  8080  TCP", "orders.vm.internal:8080  -        -     API (proxyless gRPC)"}},
		{"routes", raw(`{"name":"8080","virtualHosts":[{"name":"orders.vm.internal:8080","domains":["orders.vm.internal","orders.vm.internal:8080"],
			"routes":[{"match":{"prefix":""},"route":{"cluster":"outbound|8080||orders.vm.internal"}}]}]}`),
			[]string{"8080  orders.vm.internal:8080  orders.vm.internal,orders.vm.internal:8080  -      /*     outbound|8080||orders.vm.internal"}},
		{"clusters", nil, []string{"(none)"}},
	}
	for _, tt := range tests {
		var b bytes.Buffer
		if err := writeResources(&b, tt.kind, tt.res); err != nil {
			t.Fatalf("%s: %v", tt.kind, err)
		}
		for _, w := range tt.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s table lacks %q:\n%s", tt.kind, w, b.String())
			}
		}
	}
	if err := writeResources(&bytes.Buffer{}, "clusters", raw(`[1]`)); err == nil {
		t.Error("a resource that is not an object gave no error")
	}
}

// examplesRoutes translates examples/traffic (the orders canary) for
// orders.vm.internal:8080 and returns the route configurations of class,
// in the protojson form /debug/config_dump serves.
func examplesRoutes(t *testing.T, class translate.Class) []json.RawMessage {
	t.Helper()
	var objs []*model.ConfigObject
	for _, f := range []string{"orders-canary.yaml", "orders-subsets.yaml"} {
		path := filepath.Join("..", "..", "examples", "traffic", f)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		o, rej := istioconfig.ParseObjects(path, data)
		if len(rej) > 0 {
			t.Fatalf("%s rejected: %v", path, rej)
		}
		objs = append(objs, o...)
	}
	ep := func(addr, version string) model.Endpoint {
		return model.Endpoint{Address: addr, Labels: map[string]string{"version": version},
			Locality: model.Locality{Region: "us-east", Zone: "us-east-1a"}, Source: model.Source{Registry: "vms", Cluster: "vms"}}
	}
	snap := model.NewSnapshot(1, []*model.Service{{Hostname: "orders.vm.internal", Sources: []string{"vms"},
		Ports:     []model.Port{{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC}},
		Endpoints: []model.Endpoint{ep("127.0.0.1", "v1"), ep("127.0.0.11", "v2")}}})
	snap.Config = model.NewConfigSnapshot(1, objs)
	tr := translate.NewTranslator()
	tr.Translate(snap)
	if in := tr.Invalid(); len(in) != 0 {
		t.Fatalf("Invalid() = %v", in)
	}
	rs := tr.Resources(translate.KindOf(class, translate.RouteType))
	var out []json.RawMessage
	for _, n := range slices.Sorted(maps.Keys(rs)) {
		b, err := protojson.Marshal(rs[n])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// TestRoutesTable: the routes table shows each route's whole match
// (path, headers and query parameters with their match kind) and its
// destination, weighted clusters with their shares, for the examples'
// canary as Envoy and proxyless gRPC are served it and for a route
// configuration with every kind of match.
func TestRoutesTable(t *testing.T) {
	t.Parallel()
	str := func(kind, v string) *matcher.StringMatcher {
		switch kind {
		case "prefix":
			return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: v}}
		case "regex":
			return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: v}}}
		}
		return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: v}}
	}
	literal := &route.RouteConfiguration{Name: "80", VirtualHosts: []*route.VirtualHost{{
		Name: "web.vm.internal:80", Domains: []string{"web.vm.internal"},
		Routes: []*route.Route{
			{Name: "moved", Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Path{Path: "/old"}},
				Action: &route.Route_Redirect{Redirect: &route.RedirectAction{HostRedirect: "new.vm.internal",
					PathRewriteSpecifier: &route.RedirectAction_PathRedirect{PathRedirect: "/new"}, ResponseCode: route.RedirectAction_FOUND}}},
			{Name: "api", Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/api"},
				Headers: []*route.HeaderMatcher{
					{Name: ":method", HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{StringMatch: str("exact", "POST")}},
					{Name: "x-debug", HeaderMatchSpecifier: &route.HeaderMatcher_PresentMatch{PresentMatch: true}, InvertMatch: true},
					{Name: "x-env", HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{StringMatch: str("regex", "stag(e|ing)")}},
				},
				QueryParameters: []*route.QueryParameterMatcher{
					{Name: "v", QueryParameterMatchSpecifier: &route.QueryParameterMatcher_StringMatch{StringMatch: str("prefix", "2")}},
					{Name: "trace", QueryParameterMatchSpecifier: &route.QueryParameterMatcher_PresentMatch{PresentMatch: true}},
				}},
				Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: "outbound|80|v2|web.vm.internal"}}}},
			{Name: "versions", Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: "/v[12]/.*"}},
				CaseSensitive: wrapperspb.Bool(false)},
				Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_WeightedClusters{WeightedClusters: &route.WeightedCluster{
					Clusters: []*route.WeightedCluster_ClusterWeight{
						{Name: "a", Weight: wrapperspb.UInt32(1)}, {Name: "b", Weight: wrapperspb.UInt32(1)}, {Name: "c", Weight: wrapperspb.UInt32(1)}}}}}}},
			{Name: "gone", Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/gone"}},
				Action: &route.Route_DirectResponse{DirectResponse: &route.DirectResponseAction{Status: 410}}},
		},
	}}}
	lit, err := protojson.Marshal(literal)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		res  []json.RawMessage
		want string
	}{
		{"envoy", examplesRoutes(t, translate.ClassEnvoy), `
NAME  VIRTUAL HOST             DOMAINS                                     ROUTE          MATCH                            DESTINATION
8080  orders.vm.internal:8080  orders.vm.internal,orders.vm.internal:8080  canary-header  /*, header x-canary exact "yes"  outbound|8080|v2|orders.vm.internal
8080  orders.vm.internal:8080  orders.vm.internal,orders.vm.internal:8080  split          /*                               outbound|8080|v1|orders.vm.internal 90%, outbound|8080|v2|orders.vm.internal 10%
`},
		{"grpc", examplesRoutes(t, translate.ClassGRPC), `
NAME                     VIRTUAL HOST             DOMAINS                                     ROUTE          MATCH                            DESTINATION
orders.vm.internal:8080  orders.vm.internal:8080  orders.vm.internal,orders.vm.internal:8080  canary-header  /*, header x-canary exact "yes"  outbound|8080|v2|orders.vm.internal
orders.vm.internal:8080  orders.vm.internal:8080  orders.vm.internal,orders.vm.internal:8080  split          /*                               outbound|8080|v1|orders.vm.internal 90%, outbound|8080|v2|orders.vm.internal 10%
`},
		{"literal", []json.RawMessage{lit}, `
NAME  VIRTUAL HOST        DOMAINS          ROUTE     MATCH                                                                                                                                      DESTINATION
80    web.vm.internal:80  web.vm.internal  moved     /old                                                                                                                                       redirect new.vm.internal/new (302)
80    web.vm.internal:80  web.vm.internal  api       /api*, header :method exact "POST", not header x-debug present, header x-env regex "stag(e|ing)", query v prefix "2", query trace present  outbound|80|v2|web.vm.internal
80    web.vm.internal:80  web.vm.internal  versions  regex "/v[12]/.*" (ignore case)                                                                                                            a 33.3%, b 33.3%, c 33.3%
80    web.vm.internal:80  web.vm.internal  gone      /gone*                                                                                                                                     direct response 410
`},
	}
	for _, tt := range tests {
		var b bytes.Buffer
		if err := writeResources(&b, "routes", tt.res); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if d := cmp.Diff(strings.TrimPrefix(tt.want, "\n"), b.String()); d != "" {
			t.Errorf("%s routes table (-want +got):\n%s\ngot:\n%s", tt.name, d, b.String())
		}
	}
}

// TestWriteScope: proxy-config scope names the Sidecar and the hosts of a
// scoped proxy, and says when a proxy is not scoped.
func TestWriteScope(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := writeScope(&b, &proxyScope{View: "shop|shop/default|", Sidecar: "shop/default", Hosts: []string{"a.vm.internal", "b.vm.internal"}}); err != nil {
		t.Fatal(err)
	}
	if want := "Sidecar: shop/default\nView:    shop|shop/default|\nHosts:   2\n  a.vm.internal\n  b.vm.internal\n"; b.String() != want {
		t.Errorf("scoped:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	if err := writeScope(&b, nil); err != nil || !strings.Contains(b.String(), "not scoped") {
		t.Errorf("unscoped: %q %v", b.String(), err)
	}
}
