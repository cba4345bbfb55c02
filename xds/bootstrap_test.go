package xds

import (
	"encoding/json"
	"strings"
	"testing"

	bootstrap "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/ads"
	"github.com/meshfed/meshfed/xds/translate"
)

func TestGRPCBootstrap(t *testing.T) {
	t.Parallel()
	b, err := GRPCBootstrap("127.0.0.1:15010", "node-1", model.Locality{Region: "us-east", Zone: "us-east-1a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"xds_servers": []any{map[string]any{
			"server_uri":      "127.0.0.1:15010",
			"channel_creds":   []any{map[string]any{"type": "insecure"}},
			"server_features": []any{"xds_v3"},
		}},
		"node": map[string]any{
			"id":       "node-1",
			"locality": map[string]any{"region": "us-east", "zone": "us-east-1a", "sub_zone": ""},
			"metadata": map[string]any{"GENERATOR": "grpc"},
		},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("bootstrap (-want +got):\n%s", d)
	}
}

func TestEnvoyBootstrap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, addr string
		wantType   cluster.Cluster_DiscoveryType
		wantErr    string
	}{
		{name: "ip", addr: "127.0.0.1:15010", wantType: cluster.Cluster_STATIC},
		{name: "hostname", addr: "meshfed.mesh.svc:15010", wantType: cluster.Cluster_STRICT_DNS},
		{name: "no port", addr: "127.0.0.1", wantErr: "missing port"},
		{name: "bad port", addr: "127.0.0.1:0", wantErr: "want host:port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := EnvoyBootstrap(tc.addr, "sidecar~10.0.0.1~app~ns.svc.cluster.local", "app", nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var bs bootstrap.Bootstrap
			if err := protojson.Unmarshal(b, &bs); err != nil {
				t.Fatalf("not an Envoy bootstrap: %v\n%s", err, b)
			}
			if err := bs.ValidateAll(); err != nil {
				t.Errorf("ValidateAll: %v", err)
			}
			if bs.GetNode().GetId() != "sidecar~10.0.0.1~app~ns.svc.cluster.local" || bs.GetNode().GetCluster() != "app" {
				t.Errorf("node = %v", bs.GetNode())
			}
			ads := bs.GetDynamicResources()
			if ads.GetAdsConfig().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != XDSClusterName ||
				ads.GetCdsConfig().GetAds() == nil || ads.GetLdsConfig().GetAds() == nil {
				t.Errorf("dynamic_resources = %v, want CDS and LDS over ADS from %s", ads, XDSClusterName)
			}
			// Regexes the config validation accepts are within Envoy's
			// RE2 program size limit (its default, 100, is raised).
			var level float64
			for _, l := range bs.GetLayeredRuntime().GetLayers() {
				if v, ok := l.GetStaticLayer().GetFields()["re2.max_program_size.error_level"]; ok {
					level = v.GetNumberValue()
				}
			}
			if level != istioconfig.RegexProgramLimit {
				t.Errorf("re2.max_program_size.error_level = %v, want %d in a static runtime layer", level, istioconfig.RegexProgramLimit)
			}
			c := bs.GetStaticResources().GetClusters()[0]
			if c.GetType() != tc.wantType || c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"] == nil {
				t.Errorf("xds cluster = %v, want type %v with HTTP/2", c, tc.wantType)
			}
		})
	}
}

func TestNodeClassification(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		class    translate.Class
		id       string
		wantType string
		grpcNode bool
	}{
		{name: "sidecar", id: "sidecar~10.0.0.1~a~ns.svc.cluster.local", class: translate.ClassEnvoy, wantType: "sidecar"},
		{name: "router", id: "router~10.0.0.1~gw~ns.svc.cluster.local", class: translate.ClassEnvoy, wantType: "router"},
		{name: "plain envoy id", id: "envoy-1", class: translate.ClassEnvoy},
		{name: "proxyless", id: "grpc-1", class: translate.ClassGRPC, grpcNode: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := envoyNode(tc.id)
			if tc.grpcNode {
				n = grpcNode(tc.id)
			}
			if got := translate.ClassifyNode(n); got != tc.class {
				t.Errorf("ClassifyNode = %q, want %q", got, tc.class)
			}
			if got := ads.NodeType(tc.id); got != tc.wantType {
				t.Errorf("NodeType = %q, want %q", got, tc.wantType)
			}
		})
	}
}

func TestBootstrapsCarryTLS(t *testing.T) {
	t.Parallel()
	mtls := &ClientTLS{CAFile: "/pki/ca.crt", CertFile: "/pki/client.crt", KeyFile: "/pki/client.key"}

	b, err := GRPCBootstrap("127.0.0.1:15010", "n", model.Locality{}, mtls)
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		XDSServers []struct {
			ChannelCreds []map[string]any `json:"channel_creds"`
		} `json:"xds_servers"`
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	wantCreds := []map[string]any{{"type": "tls", "config": map[string]any{
		"ca_certificate_file": "/pki/ca.crt", "certificate_file": "/pki/client.crt", "private_key_file": "/pki/client.key",
	}}}
	if d := cmp.Diff(wantCreds, g.XDSServers[0].ChannelCreds); d != "" {
		t.Errorf("channel_creds (-want +got):\n%s", d)
	}

	for _, tc := range []struct {
		addr, wantSNI string
	}{{addr: "127.0.0.1:15010"}, {addr: "meshfed.mesh.svc:15010", wantSNI: "meshfed.mesh.svc"}} {
		b, err = EnvoyBootstrap(tc.addr, "sidecar~10.0.0.1~app~ns.svc.cluster.local", "app", mtls)
		if err != nil {
			t.Fatal(err)
		}
		var bs bootstrap.Bootstrap
		if err := protojson.Unmarshal(b, &bs); err != nil {
			t.Fatal(err)
		}
		if err := bs.ValidateAll(); err != nil {
			t.Errorf("ValidateAll: %v", err)
		}
		ts := bs.GetStaticResources().GetClusters()[0].GetTransportSocket()
		var up tlsv3.UpstreamTlsContext
		if ts.GetName() != "envoy.transport_sockets.tls" || ts.GetTypedConfig().UnmarshalTo(&up) != nil {
			t.Fatalf("transport socket = %v, want an UpstreamTlsContext", ts)
		}
		ctx := up.GetCommonTlsContext()
		if ctx.GetValidationContext().GetTrustedCa().GetFilename() != "/pki/ca.crt" ||
			ctx.GetTlsCertificates()[0].GetCertificateChain().GetFilename() != "/pki/client.crt" ||
			ctx.GetTlsCertificates()[0].GetPrivateKey().GetFilename() != "/pki/client.key" || up.GetSni() != tc.wantSNI {
			t.Errorf("%s: UpstreamTlsContext = %v", tc.addr, &up)
		}
	}
	if _, err := GRPCBootstrap("127.0.0.1:15010", "n", model.Locality{}, &ClientTLS{CertFile: "c"}); err == nil {
		t.Error("a certificate without a key was accepted")
	}
	if b, err := EnvoyBootstrap("127.0.0.1:15010", "n", "app", nil); err != nil || strings.Contains(string(b), "transport_socket") || strings.Contains(string(b), "transportSocket") {
		t.Errorf("plaintext Envoy bootstrap has a transport socket (err %v)", err)
	}
}
