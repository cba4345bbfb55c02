package xds

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/xds/ads"
	"github.com/meshfed/meshfed/xds/translate"
)

func TestGRPCClassConfigDumpAndClose(t *testing.T) {
	t.Parallel()
	srv := NewServer(Options{})
	first, _, _ := fixtureSnapshots()
	srv.Update(first)
	addr := startServer(t, srv)

	const id = "proxyless-1 <a&b>" // the dump keeps < > & verbatim
	c := dialADS(t, addr, grpcNode(id), false)
	// As grpc-go does: the listener by dial target, then what it names.
	const lds, cds = "orders.vm.internal:8080", "outbound|8080||orders.vm.internal"
	c.subscribe(translate.ListenerType, lds)
	c.until(holds(translate.ListenerType, lds), nil)
	c.subscribe(translate.RouteType, lds)
	c.subscribe(translate.ClusterType, cds)
	c.subscribe(translate.EndpointType, cds)
	c.until(all(holds(translate.RouteType, lds), holds(translate.ClusterType, cds), holds(translate.EndpointType, cds)), nil)
	srv.mu.RLock()
	for _, url := range translate.TypeURLs {
		for n, r := range c.state[url] {
			if want := srv.Resources(translate.KindOf(translate.ClassGRPC, url))[n]; !proto.Equal(r, want) {
				t.Errorf("%s %s is not the gRPC-class resource", url, n)
			}
		}
	}
	srv.mu.RUnlock()
	eventually(t, "the proxyless client ACKed", func() bool { return synced(srv, id) })

	p := proxy(srv, id)
	if p.Class != "grpc" || p.Stream != "sotw" || p.NodeType != "" {
		t.Errorf("proxy = %+v, want class grpc over sotw", p)
	}
	for _, ts := range p.Types {
		if ts.Resources != 1 {
			t.Errorf("%s: Resources = %d, want 1", ts.TypeURL, ts.Resources)
		}
	}

	b, ok := srv.ConfigDump(id)
	if !ok {
		t.Fatal("ConfigDump: unknown proxy")
	}
	var dump struct {
		ID        string                      `json:"id"`
		Class     string                      `json:"class"`
		Resources map[string][]map[string]any `json:"resources"`
	}
	if err := json.Unmarshal(b, &dump); err != nil {
		t.Fatalf("ConfigDump is not JSON: %v\n%s", err, b)
	}
	if !strings.Contains(string(b), `"id": "proxyless-1 <a&b>"`) {
		t.Errorf("dump escapes HTML in the id:\n%s", b)
	}
	if dump.ID != id || dump.Class != "grpc" || len(dump.Resources) != 4 {
		t.Errorf("dump = %s", b)
	}
	if l := dump.Resources[translate.ListenerType]; len(l) != 1 || l[0]["name"] != lds {
		t.Errorf("dumped listeners = %v, want %s", l, lds)
	}
	if _, ok := srv.ConfigDump("nobody"); ok {
		t.Error("ConfigDump(nobody) = ok, want false")
	}

	// Close ends the stream; the proxy leaves the status.
	srv.Close()
	deadline := time.After(waitFor)
	for open := true; open; {
		select {
		case _, open = <-c.msgs:
		case <-deadline:
			t.Fatal("stream still open after Close")
		}
	}
	eventually(t, "the proxy gone from Proxies()", func() bool {
		return !slices.ContainsFunc(srv.Proxies(), func(p ads.ProxyStatus) bool { return p.ID == id })
	})
}
