package servable

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/zookeeper"
)

var zkCommon = registries.Common{Name: "zk", Kind: "zookeeper", Domain: "zk", Locality: model.Locality{Region: "r1"}}

// zkResolve resolves no hostname but one (no DNS in fuzzing).
func zkResolve(host string) (string, error) {
	if host == "provider.example.test" {
		return "127.0.0.9", nil
	}
	return "", fmt.Errorf("no such host")
}

func zkConfig(layout zookeeper.Layout) zookeeper.Config {
	cfg := zookeeper.Config{Layout: layout}
	cfg.ApplyDefaults()
	return cfg
}

// checkZookeeper converts one service, the fuzzed instance next to a good
// sibling (zookeeper.Convert), and checks that the result is servable,
// that a quarantined fuzzed instance (fuzzedPath) is counted and that the
// service is published or rejected.
func checkZookeeper(t *testing.T, layout zookeeper.Layout, svc zookeeper.ServiceZnodes, fuzzedPath string) {
	services, rejected, quarantined := zookeeper.Convert(zkCommon, zkConfig(layout), []zookeeper.ServiceZnodes{svc}, zkResolve)
	for _, r := range rejected {
		if r.Subject == fuzzedPath && quarantined == 0 {
			t.Errorf("instance quarantined for %q is not counted", r.Reason)
		}
	}
	CheckServable(t, zkCommon, services, rejected)
	if len(services) == 0 && len(rejected) == 0 {
		t.Errorf("service %q neither published nor rejected", svc.Child)
	}
}

// checkSibling fails f unless the sibling alone is served, unquarantined.
func checkSibling(f *testing.F, layout zookeeper.Layout, svc zookeeper.ServiceZnodes) {
	services, rejected, quarantined := zookeeper.Convert(zkCommon, zkConfig(layout), []zookeeper.ServiceZnodes{svc}, zkResolve)
	if len(services) != 1 || len(services[0].Endpoints) != 1 || len(rejected) != 0 || quarantined != 0 {
		f.Fatalf("sibling not served alone: %v, rejected %v", services, rejected)
	}
}

func readZookeeperTestdata(f *testing.F, name string) []byte {
	b, err := os.ReadFile(filepath.Join("..", "..", "registries", "zookeeper", "testdata", name))
	if err != nil {
		f.Fatal(err)
	}
	return b
}

const curatorSibling = `{"name":"x","address":"127.0.0.2","port":8080,"sslPort":8443,"enabled":true}`

// FuzzCuratorJSON feeds Curator ServiceInstance znode data (and a service
// name) through conversion, the gate and translation.
func FuzzCuratorJSON(f *testing.F) {
	checkSibling(f, zookeeper.LayoutCurator, zookeeper.ServiceZnodes{Child: "orders", Instances: map[string][]byte{"sibling": []byte(curatorSibling)}})
	for _, name := range []string{"curator-spring-instance.json", "curator-both-ports.json", "curator-disabled.json", "curator-ssl-only.json", "bad-malformed.json"} {
		f.Add(readZookeeperTestdata(f, name), "orders")
	}
	f.Add([]byte(`{"name":"orders","address":"224.0.0.1","port":80,"payload":{"metadata":{"v":"\udfff"}}}`), "orders")
	f.Add([]byte(`{"name":"orders","address":"127.0.0.1","port":80,"payload":{"metadata":{"weight":"4294967295"}}}`), "Orders_Svc")
	f.Fuzz(func(t *testing.T, data []byte, service string) {
		svc := zookeeper.ServiceZnodes{Child: service, Instances: map[string][]byte{"fuzzed": data, "sibling": []byte(curatorSibling)}}
		checkZookeeper(t, zookeeper.LayoutCurator, svc, zookeeper.DefaultCuratorRoot+"/"+service+"/fuzzed")
	})
}

// FuzzDubboURL feeds Dubbo provider znode names (URL-encoded provider
// URLs) and interface names through conversion, the gate and translation.
func FuzzDubboURL(f *testing.F) {
	sibling := javaURLEncode("dubbo://127.0.0.2:20880/x?side=provider")
	checkSibling(f, zookeeper.LayoutDubbo, zookeeper.ServiceZnodes{Child: "com.foo.DemoService", Instances: map[string][]byte{sibling: nil}})
	f.Add("com.foo.DemoService", javaURLEncode("dubbo://127.0.0.1:20880/com.foo.DemoService?side=provider&weight=100&version=1.0"))
	f.Add("com.foo.DemoService", javaURLEncode("tri://127.0.0.1:50051/x?weight=4294967295&label=%FF"))
	f.Add("com.foo.DemoService", "dubbo%3A%2F%2F127.0.0.1%3A20880%2Fx%3Fa%3D%25FF")
	f.Add("com.foo.Multi", javaURLEncode("grpc://[ff02::1]:50051/x"))
	f.Add("com.foo.Multi", javaURLEncode("rest://255.255.255.255:8080/x?enabled=false"))
	f.Add("x", "dubbo%3A%2F%2F192.0.2.8%3A2088%ZZ")
	f.Fuzz(func(t *testing.T, iface, node string) {
		child := javaURLEncode(iface) // as Dubbo names the interface's znode
		svc := zookeeper.ServiceZnodes{Child: child, Instances: map[string][]byte{node: nil, sibling: nil}}
		checkZookeeper(t, zookeeper.LayoutDubbo, svc, zookeeper.DefaultDubboRoot+"/"+child+"/providers/"+node)
	})
}

// javaURLEncode encodes like java.net.URLEncoder.encode(s, "UTF-8"), which
// Dubbo's URL.encode uses for znode names.
func javaURLEncode(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '-', c == '*', c == '_':
			b.WriteByte(c)
		case c == ' ':
			b.WriteByte('+')
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
