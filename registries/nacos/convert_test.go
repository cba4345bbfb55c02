package nacos

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

var testCommon = registries.Common{Name: "nc", Kind: "nacos", Domain: "nacos.local", Locality: model.Locality{Region: "r1"}}

func testConfig() *Config {
	c := &Config{}
	c.ApplyDefaults()
	return c
}

var yes, no = ptr(true), ptr(false)

func ptr[T any](v T) *T { return &v }

func src() model.Source { return model.Source{Registry: "nc", Cluster: "nc"} }

func TestHostname(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		group, service, want, err string
	}{
		{group: "DEFAULT_GROUP", service: "orders", want: "orders.nacos.local"},
		{group: "DEFAULT_GROUP", service: "Order-Service", want: "order-service.nacos.local"},
		{group: "payments", service: "orders", want: "orders.payments.nacos.local"},
		{group: "PAY", service: "orders", want: "orders.pay.nacos.local"},
		{group: "DEFAULT_GROUP", service: "providers:com.acme.Orders:1.0.0:", err: "not a DNS label"},
		{group: "DEFAULT_GROUP", service: "order_service", err: "not a DNS label"},
		{group: "DEFAULT_GROUP", service: "com.acme.orders", err: "not a DNS label"},
		{group: "my_group", service: "orders", err: `group name "my_group"`},
	} {
		got, err := hostname("nacos.local", tc.group, tc.service)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s/%s: error %v, want %q", tc.group, tc.service, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s/%s = %q, %v; want %q", tc.group, tc.service, got, err, tc.want)
		}
	}
}

func TestInstanceID(t *testing.T) {
	t.Parallel()
	if got := (&instance{IP: "10.0.0.1", Port: 80, InstanceID: "x#1"}).id(); got != "10.0.0.1:80 (x#1)" {
		t.Errorf("id = %q", got)
	}
	if got := (&instance{IP: "fd00::1", Port: 80}).id(); got != "[fd00::1]:80" {
		t.Errorf("id = %q", got)
	}
}

func TestConvertService(t *testing.T) {
	t.Parallel()
	up := func(id, ip string, port int64, meta map[string]string) instance {
		return instance{InstanceID: id, IP: ip, Port: port, Weight: 1, Healthy: yes, Enabled: yes, Ephemeral: true, ClusterName: "DEFAULT", Metadata: meta}
	}
	labels := func(kv ...string) map[string]string {
		m := map[string]string{labelCluster: "DEFAULT", labelEphemeral: "true"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name     string
		key      serviceKey
		insts    []instance
		want     *model.Service // nil: no service
		rejected []string       // "subject: reason substring"
	}{{
		name: "health, weight, labels, locality",
		key:  serviceKey{group: "DEFAULT_GROUP", name: "orders"},
		insts: []instance{
			{InstanceID: "a", IP: "10.0.0.1", Port: 8080, Weight: 2.5, Healthy: yes, Enabled: yes, Ephemeral: true, ClusterName: "SH",
				Metadata: map[string]string{"version": "v1", "zone": "z1", "internal-nacos-cluster": "SH"}},
			{InstanceID: "b", IP: "10.0.0.2", Port: 8080, Weight: 1, Healthy: no, Enabled: yes, Ephemeral: false},
			{InstanceID: "c", IP: "10.0.0.3", Port: 8080, Weight: 1, Healthy: yes, Enabled: no, Ephemeral: true},
			{InstanceID: "d", IP: "10.0.0.4", Port: 8080, Weight: 0, Healthy: yes, Enabled: yes, Ephemeral: true},
		},
		want: &model.Service{Hostname: "orders.nacos.local", Ports: []model.Port{{Name: "http", Number: 8080, Protocol: model.ProtocolHTTP}},
			Endpoints: []model.Endpoint{
				{Address: "10.0.0.1", Weight: 250, Health: model.Healthy, Source: src(),
					Labels:   map[string]string{"version": "v1", "zone": "z1", labelCluster: "SH", labelEphemeral: "true"},
					Locality: model.Locality{Region: "r1", Zone: "z1"}},
				{Address: "10.0.0.2", Weight: 100, Health: model.Unhealthy, Source: src(), Locality: model.Locality{Region: "r1"},
					Labels: map[string]string{labelEphemeral: "false"}},
				{Address: "10.0.0.3", Weight: 100, Health: model.Draining, Source: src(), Locality: model.Locality{Region: "r1"},
					Labels: map[string]string{labelEphemeral: "true"}},
				{Address: "10.0.0.4", Weight: 1, Health: model.Draining, Source: src(), Locality: model.Locality{Region: "r1"},
					Labels: map[string]string{labelEphemeral: "true"}},
			}},
	}, {
		name: "bad instances quarantined alone",
		key:  serviceKey{group: "pay", name: "billing"},
		insts: []instance{
			up("ok", "10.0.1.1", 9090, nil),
			up("noport", "10.0.1.2", 0, nil),
			up("badip", "10.0.1.3:80", 9090, nil),
			{InstanceID: "negw", IP: "10.0.1.4", Port: 9090, Weight: -1, Healthy: yes, Enabled: yes},
			up("badgrpc", "10.0.1.5", 9090, map[string]string{"gRPC_port": "http"}),
			up("badproto", "10.0.1.6", 9090, map[string]string{"meshfed.protocol": "smtp"}),
			up("host", "billing-7.internal", 9090, nil),
		},
		want: &model.Service{Hostname: "billing.pay.nacos.local", Ports: []model.Port{{Name: "http", Number: 9090, Protocol: model.ProtocolHTTP}},
			Endpoints: []model.Endpoint{{Address: "10.0.1.1", Weight: 100, Source: src(), Labels: labels(), Locality: model.Locality{Region: "r1"}}}},
		rejected: []string{
			"(noport): port 0 is out of range", `(badip): ip "10.0.1.3:80" is neither an IP address nor a DNS name`, "(negw): weight -1 is negative",
			"(badgrpc): metadata gRPC_port", "(badproto): metadata meshfed.protocol: unknown protocol", `(host): ip "billing-7.internal" is a hostname while other instances use IP addresses`,
		},
	}, {
		name: "dubbo, grpc-spring-boot and dubbo 3 ports",
		key:  serviceKey{group: "DEFAULT_GROUP", name: "shop"},
		insts: []instance{
			up("d1", "10.0.2.1", 20880, map[string]string{"protocol": "dubbo", "dubbo.endpoints": `[{"port":20880,"protocol":"dubbo"},{"port":50051,"protocol":"tri"}]`}),
			up("d2", "10.0.2.2", 20880, map[string]string{"protocol": "dubbo"}),
			up("s1", "10.0.2.3", 8080, map[string]string{"gRPC_port": "9090", "preserved.register.source": "SPRING_CLOUD"}),
		},
		want: &model.Service{Hostname: "shop.nacos.local", Ports: []model.Port{
			{Name: "http", Number: 8080, Protocol: model.ProtocolHTTP},
			{Name: "grpc", Number: 9090, Protocol: model.ProtocolGRPC},
			{Name: "dubbo", Number: 20880, Protocol: model.ProtocolTCP},
			{Name: "tri", Number: 50051, Protocol: model.ProtocolGRPC},
		}, Endpoints: []model.Endpoint{
			{Address: "10.0.2.1", Weight: 100, Source: src(), Labels: labels("protocol", "dubbo"), Locality: model.Locality{Region: "r1"},
				Ports: map[string]uint32{"http": 0, "grpc": 0}},
			{Address: "10.0.2.2", Weight: 100, Source: src(), Labels: labels("protocol", "dubbo"), Locality: model.Locality{Region: "r1"},
				Ports: map[string]uint32{"http": 0, "grpc": 0, "tri": 0}},
			{Address: "10.0.2.3", Weight: 100, Source: src(), Labels: labels("preserved.register.source", "SPRING_CLOUD"), Locality: model.Locality{Region: "r1"},
				Ports: map[string]uint32{"dubbo": 0, "tri": 0}},
		}},
	}, {
		name: "meshfed.protocol and secure",
		key:  serviceKey{group: "DEFAULT_GROUP", name: "api"},
		insts: []instance{
			up("g1", "10.0.3.1", 7070, map[string]string{"meshfed.protocol": "GRPC", "protocol": "http"}),
			up("g2", "10.0.3.2", 7071, map[string]string{"meshfed.protocol": "grpc"}),
			up("g3", "10.0.3.3", 7070, map[string]string{"meshfed.protocol": "grpc"}),
			up("tls", "10.0.3.4", 8443, map[string]string{"secure": "true"}),
		},
		want: &model.Service{Hostname: "api.nacos.local", Ports: []model.Port{
			{Name: "grpc", Number: 7070, Protocol: model.ProtocolGRPC},
			{Name: "https", Number: 8443, Protocol: model.ProtocolTCP},
		}, Endpoints: []model.Endpoint{
			{Address: "10.0.3.1", Weight: 100, Source: src(), Labels: labels("protocol", "http"), Locality: model.Locality{Region: "r1"},
				Ports: map[string]uint32{"https": 0}},
			{Address: "10.0.3.2", Weight: 100, Source: src(), Labels: labels(), Locality: model.Locality{Region: "r1"},
				Ports: map[string]uint32{"grpc": 7071, "https": 0}},
			{Address: "10.0.3.3", Weight: 100, Source: src(), Labels: labels(), Locality: model.Locality{Region: "r1"},
				Ports: map[string]uint32{"https": 0}},
			{Address: "10.0.3.4", Weight: 100, Source: src(), Labels: labels("secure", "true"), Locality: model.Locality{Region: "r1"},
				Ports: map[string]uint32{"grpc": 0}},
		}},
	}, {
		name:  "hostnames only: DNS resolution",
		key:   serviceKey{group: "DEFAULT_GROUP", name: "legacy"},
		insts: []instance{up("h1", "legacy-1.dc1.internal", 80, nil)},
		want: &model.Service{Hostname: "legacy.nacos.local", Resolution: model.ResolutionDNS,
			Ports:     []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}},
			Endpoints: []model.Endpoint{{Address: "legacy-1.dc1.internal", Weight: 100, Source: src(), Labels: labels(), Locality: model.Locality{Region: "r1"}}}},
	}, {
		name:     "service name that is no hostname",
		key:      serviceKey{group: "DEFAULT_GROUP", name: "providers:com.acme.Orders::"},
		insts:    []instance{up("x", "10.0.4.1", 20880, nil)},
		rejected: []string{"service DEFAULT_GROUP@@providers:com.acme.Orders::: service name"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := convertService(testCommon, testConfig(), tc.key, tc.insts)
			if tc.want == nil {
				if got.OK() {
					t.Errorf("published %+v, want nothing", got.Service())
				}
			} else if !got.OK() {
				t.Errorf("no service; rejected %v", got.Rejected)
			} else if d := cmp.Diff(*tc.want, got.Service(), cmpopts.IgnoreFields(model.Endpoint{}, "Origin")); d != "" {
				t.Errorf("service (-want +got):\n%s", d)
			}
			var rej []string
			for _, r := range got.Rejected {
				rej = append(rej, r.Subject+": "+r.Reason)
			}
			if len(rej) != len(tc.rejected) {
				t.Fatalf("rejected %q, want %d matching %q", rej, len(tc.rejected), tc.rejected)
			}
			for i, w := range tc.rejected {
				if !strings.Contains(rej[i], w) {
					t.Errorf("rejection %d = %q, want it to contain %q", i, rej[i], w)
				}
			}
		})
	}
}

// TestAssembleCollisions: services whose names differ only in case would
// share a hostname; both are rejected, others are served.
func TestAssembleCollisions(t *testing.T) {
	t.Parallel()
	in := []instance{{IP: "10.0.5.1", Port: 80, Weight: 1, Healthy: yes, Enabled: yes}}
	st := newState(&Registry{cfg: *testConfig(), common: testCommon}, nil)
	for _, k := range []serviceKey{{"DEFAULT_GROUP", "Orders"}, {"DEFAULT_GROUP", "orders"}, {"DEFAULT_GROUP", "cart"}, {"blue", "orders"}} {
		st.set(k, in, 0)
	}
	services, rejected := st.pub.State()
	var hosts []string
	for _, s := range services {
		hosts = append(hosts, s.Hostname)
	}
	if d := cmp.Diff([]string{"cart.nacos.local", "orders.blue.nacos.local"}, hosts); d != "" {
		t.Errorf("hosts (-want +got):\n%s", d)
	}
	if len(rejected) != 2 || !strings.Contains(rejected[0].Reason, "collides with service DEFAULT_GROUP@@orders") ||
		!strings.Contains(rejected[1].Reason, "collides with service DEFAULT_GROUP@@Orders") {
		t.Errorf("rejected = %v", rejected)
	}
}
