package zookeeper

import (
	"testing"

	"github.com/meshfed/meshfed/aggregate/aggregatetest"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

var fuzzCommon = registries.Common{Name: "zk", Kind: "zookeeper", Domain: "zk", Locality: model.Locality{Region: "r1"}}

// fuzzAddress resolves no hostname (no DNS in fuzzing): IP literals only.
var fuzzAddress = fakeAddress(map[string]string{"provider.example.test": "127.0.0.9"})

// checkTree builds a service of the fuzzed instance next to a good sibling
// and checks that the result is servable and that the sibling is served
// whatever the fuzzed instance holds (unless the service itself is
// rejected, which a conflict then names).
func checkTree(t *testing.T, layout Layout, key, path string, in, sibling instance) {
	tree := map[string]*serviceNode{key: {key: key, path: path, instances: map[string]*instance{"fuzzed": &in, "sibling": &sibling}}}
	services, rejected, quarantined := build(fuzzCommon, layout, tree)
	if in.bad != "" && quarantined == 0 {
		t.Errorf("instance quarantined for %q is not counted", in.bad)
	}
	aggregatetest.CheckServable(t, fuzzCommon, services, rejected)
	if len(services) == 0 && len(rejected) == 0 {
		t.Errorf("service %q neither published nor rejected", key)
	}
}

// FuzzCuratorJSON feeds Curator ServiceInstance znode data (and a service
// name) through conversion, the gate and translation.
func FuzzCuratorJSON(f *testing.F) {
	for _, name := range []string{"curator-spring-instance.json", "curator-both-ports.json", "curator-disabled.json", "curator-ssl-only.json", "bad-malformed.json"} {
		f.Add(readTestdata(f, name), "orders")
	}
	f.Add([]byte(`{"name":"orders","address":"224.0.0.1","port":80,"payload":{"metadata":{"v":"\udfff"}}}`), "orders")
	f.Add([]byte(`{"name":"orders","address":"127.0.0.1","port":80,"payload":{"metadata":{"weight":"4294967295"}}}`), "Orders_Svc")
	f.Fuzz(func(t *testing.T, data []byte, service string) {
		path := "/services/" + service + "/fuzzed"
		in := parseCurator(path, data, fuzzAddress)
		sibling := parseCurator("/services/"+service+"/sibling",
			[]byte(`{"name":"x","address":"127.0.0.2","port":8080,"sslPort":8443,"enabled":true}`), fuzzAddress)
		if sibling.bad != "" {
			t.Fatalf("sibling quarantined: %s", sibling.bad)
		}
		checkTree(t, LayoutCurator, service, "/services/"+service, in, sibling)
	})
}

// FuzzDubboURL feeds Dubbo provider znode names (URL-encoded provider
// URLs) and interface names through conversion, the gate and translation.
func FuzzDubboURL(f *testing.F) {
	f.Add("com.foo.DemoService", javaURLEncode("dubbo://127.0.0.1:20880/com.foo.DemoService?side=provider&weight=100&version=1.0"))
	f.Add("com.foo.DemoService", javaURLEncode("tri://127.0.0.1:50051/x?weight=4294967295&label=%FF"))
	f.Add("com.foo.DemoService", "dubbo%3A%2F%2F127.0.0.1%3A20880%2Fx%3Fa%3D%25FF")
	f.Add("com.foo.Multi", javaURLEncode("grpc://[ff02::1]:50051/x"))
	f.Add("com.foo.Multi", javaURLEncode("rest://255.255.255.255:8080/x?enabled=false"))
	f.Add("x", "dubbo%3A%2F%2F192.0.2.8%3A2088%ZZ")
	f.Fuzz(func(t *testing.T, iface, node string) {
		root := "/dubbo/" + iface
		in := parseDubbo(root+"/providers/"+node, node, fuzzAddress)
		sibling := parseDubbo(root+"/providers/sibling", javaURLEncode("dubbo://127.0.0.2:20880/x?side=provider"), fuzzAddress)
		if sibling.bad != "" {
			t.Fatalf("sibling quarantined: %s", sibling.bad)
		}
		checkTree(t, LayoutDubbo, iface, root, in, sibling)
	})
}
