package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
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
			[]string{"8080  orders.vm.internal:8080  orders.vm.internal,orders.vm.internal:8080  /*     outbound|8080||orders.vm.internal"}},
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
