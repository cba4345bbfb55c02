package servable

import (
	"encoding/json"
	"testing"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/nacos"
)

// FuzzNacosServiceInfo fuzzes a service's instance list as Nacos sends it
// (subscription answers, pushes and /v1/ns/instance/list share the JSON):
// converted (nacos.Convert) with the same instances listed again for
// DEFAULT_GROUP@@other, so that hostnames may collide, the state must be
// servable: no panic, every resource valid, every quarantined instance
// listed.
func FuzzNacosServiceInfo(f *testing.F) {
	f.Add([]byte(`{"name":"orders","groupName":"DEFAULT_GROUP","lastRefTime":1,"hosts":[
		{"instanceId":"a","ip":"10.0.0.1","port":8080,"weight":1.0,"healthy":true,"enabled":true,"ephemeral":true,"clusterName":"DEFAULT",
		 "metadata":{"protocol":"dubbo","dubbo.endpoints":"[{\"port\":20880,\"protocol\":\"dubbo\"},{\"port\":50051,\"protocol\":\"tri\"}]"}},
		{"ip":"10.0.0.2","port":9090,"weight":10000,"healthy":false,"metadata":{"gRPC_port":"9091","zone":"\udfff"}}]}`))
	f.Add([]byte(`{"name":"Orders","groupName":"blue","hosts":[{"ip":"224.0.0.1","port":80},{"ip":"fe80::1","port":80,"weight":1e308},
		{"ip":"host.internal","port":80},{"ip":"10.0.0.3","port":80,"weight":-1},{"ip":"10.0.0.4","port":70000}]}`))
	f.Add([]byte(`{"name":"a@@b","hosts":[{"ip":"127.0.0.1","port":1,"metadata":{"meshfed.protocol":"grpc","secure":"true","gRPC.port":"1"}}]}`))
	common := registries.Common{Name: "nc", Kind: "nacos", Domain: "nacos.local", Locality: model.Locality{Region: "r1"}}
	var cfg nacos.Config
	cfg.ApplyDefaults()
	f.Fuzz(func(t *testing.T, body []byte) {
		// The same instances (the answer's hosts, decoded as Nacos'
		// client would decode them again) for another service.
		var hosts struct {
			Hosts json.RawMessage `json:"hosts"`
		}
		if json.Unmarshal(body, &hosts) != nil {
			return // the answer is refused as a whole
		}
		other := append([]byte(`{"name":"other","groupName":"DEFAULT_GROUP","hosts":`), hosts.Hosts...)
		if len(hosts.Hosts) == 0 {
			other = append(other, "null"...)
		}
		other = append(other, '}')
		services, rejected, err := nacos.Convert(common, cfg, body, other)
		if err != nil {
			return // the answer is refused as a whole
		}
		CheckServable(t, common, services, rejected)
	})
}
