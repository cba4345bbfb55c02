package nacos

import (
	"encoding/json"
	"testing"

	"github.com/meshfed/meshfed/aggregate/aggregatetest"
)

// FuzzNacosServiceInfo fuzzes a service's instance list as Nacos sends it
// (subscription answers, pushes and /v1/ns/instance/list share the JSON):
// decoded, converted and assembled, the state must be servable: no panic,
// every resource valid, every quarantined instance listed.
func FuzzNacosServiceInfo(f *testing.F) {
	f.Add([]byte(`{"name":"orders","groupName":"DEFAULT_GROUP","lastRefTime":1,"hosts":[
		{"instanceId":"a","ip":"10.0.0.1","port":8080,"weight":1.0,"healthy":true,"enabled":true,"ephemeral":true,"clusterName":"DEFAULT",
		 "metadata":{"protocol":"dubbo","dubbo.endpoints":"[{\"port\":20880,\"protocol\":\"dubbo\"},{\"port\":50051,\"protocol\":\"tri\"}]"}},
		{"ip":"10.0.0.2","port":9090,"weight":10000,"healthy":false,"metadata":{"gRPC_port":"9091","zone":"\udfff"}}]}`))
	f.Add([]byte(`{"name":"Orders","groupName":"blue","hosts":[{"ip":"224.0.0.1","port":80},{"ip":"fe80::1","port":80,"weight":1e308},
		{"ip":"host.internal","port":80},{"ip":"10.0.0.3","port":80,"weight":-1},{"ip":"10.0.0.4","port":70000}]}`))
	f.Add([]byte(`{"name":"a@@b","hosts":[{"ip":"127.0.0.1","port":1,"metadata":{"meshfed.protocol":"grpc","secure":"true","gRPC.port":"1"}}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var info serviceInfo
		if json.Unmarshal(body, &info) != nil {
			return // the answer is refused as a whole
		}
		group := info.GroupName
		if group == "" {
			group = DefaultGroup
		}
		st := newState(&Registry{cfg: *testConfig(), common: testCommon}, nil)
		st.set(serviceKey{group: group, name: info.Name}, info.Hosts, info.LastRefTime)
		st.set(serviceKey{group: DefaultGroup, name: "other"}, info.Hosts, 0)
		services, rejected := st.pub.State()
		aggregatetest.CheckServable(t, testCommon, services, rejected)
	})
}
