// Package testfixture is the model the tests of xds and its packages
// translate and serve.
package testfixture

import (
	"testing"

	"google.golang.org/protobuf/proto"
	mcp "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/model"
)

// Orders is orders.vm.internal: one gRPC port served on another
// endpoint port by one of its endpoints, three endpoints (healthy,
// unhealthy, draining) in two zones.
func Orders() *model.Service {
	return &model.Service{
		Hostname: "orders.vm.internal",
		Ports:    []model.Port{{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC}},
		Sources:  []string{"vms"},
		Endpoints: []model.Endpoint{
			{Address: "10.0.0.5", Ports: map[string]uint32{"grpc": 18080}, Labels: map[string]string{"version": "v1"},
				Locality: model.Locality{Region: "us-east", Zone: "us-east-1a"}, Weight: 2,
				Source: model.Source{Registry: "vms", Cluster: "vms"}},
			{Address: "10.0.0.6", Locality: model.Locality{Region: "us-east", Zone: "us-east-1b"}, Health: model.Unhealthy,
				Source: model.Source{Registry: "vms", Cluster: "vms", Network: "net1"}},
			{Address: "10.0.0.7", Locality: model.Locality{Region: "us-east", Zone: "us-east-1a"}, Health: model.Draining,
				Source: model.Source{Registry: "vms", Cluster: "vms"}},
		},
	}
}

// Services is the fixture model: Orders, an HTTP service on two ports
// with a duplicate endpoint, two TCP services on one port, a DNS service.
func Services() []*model.Service {
	return []*model.Service{
		Orders(),
		{
			Hostname: "web.vm.internal",
			Ports: []model.Port{
				{Name: "http", Number: 80, Protocol: model.ProtocolHTTP},
				{Name: "alt", Number: 8080, Protocol: model.ProtocolHTTP2},
			},
			Endpoints: []model.Endpoint{
				{Address: "10.0.1.1", Health: model.Degraded, Weight: 3},
				{Address: "10.0.1.1", Health: model.Healthy}, // duplicate: served once
			},
		},
		{
			Hostname:  "db.vm.internal",
			Ports:     []model.Port{{Name: "pg", Number: 5432, Protocol: model.ProtocolTCP}},
			Endpoints: []model.Endpoint{{Address: "10.0.2.1", Locality: model.Locality{Region: "eu"}}},
		},
		{
			Hostname:  "cache.vm.internal", // same TCP port as db: wins by name, db is skipped
			Ports:     []model.Port{{Name: "tcp", Number: 5432, Protocol: model.ProtocolTCP}},
			Endpoints: []model.Endpoint{{Address: "10.0.3.1"}},
		},
		{
			Hostname:   "api.ext.example",
			Resolution: model.ResolutionDNS,
			Ports:      []model.Port{{Name: "https", Number: 9090, Protocol: model.ProtocolHTTP2}},
			Endpoints: []model.Endpoint{
				{Address: "api2.example.com"},
				{Address: "api.example.com", Weight: 5},
			},
		},
	}
}

// Replace swaps (or with nil, drops) the service named host.
func Replace(svcs []*model.Service, host string, with *model.Service) []*model.Service {
	var out []*model.Service
	for _, s := range svcs {
		switch {
		case s.Hostname != host:
			out = append(out, s)
		case with != nil:
			out = append(out, with)
		}
	}
	return out
}

// ServiceEntryOf decodes an MCP Resource holding a ServiceEntry.
func ServiceEntryOf(t *testing.T, r proto.Message) (*mcp.Metadata, *networking.ServiceEntry) {
	t.Helper()
	res, ok := r.(*mcp.Resource)
	if !ok {
		t.Fatalf("resource is %T, want an MCP Resource", r)
	}
	se := &networking.ServiceEntry{}
	if err := res.GetBody().UnmarshalTo(se); err != nil {
		t.Fatalf("body of %s: %v", res.GetMetadata().GetName(), err)
	}
	return res.GetMetadata(), se
}

// TrafficServices: orders (gRPC 8080, HTTP 8081), web (HTTP 80), db (TCP 5432),
// billing (gRPC 9000, another domain), each with v1 and v2 endpoints.
func TrafficServices() []*model.Service {
	eps := func(base string, ports map[string]uint32) []model.Endpoint {
		return []model.Endpoint{
			{Address: base + "1", Ports: ports, Labels: map[string]string{"version": "v1"}, Locality: model.Locality{Region: "us-east", Zone: "a"}, Source: model.Source{Registry: "vms", Cluster: "vms"}},
			{Address: base + "2", Ports: ports, Labels: map[string]string{"version": "v2"}, Locality: model.Locality{Region: "us-east", Zone: "b"}, Source: model.Source{Registry: "vms", Cluster: "vms"}},
		}
	}
	return []*model.Service{
		{Hostname: "orders.vm.internal", Sources: []string{"vms"},
			Ports:     []model.Port{{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC}, {Name: "http", Number: 8081, Protocol: model.ProtocolHTTP}},
			Endpoints: eps("10.0.0.", nil)},
		{Hostname: "web.vm.internal", Sources: []string{"vms"},
			Ports: []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}}, Endpoints: eps("10.0.1.", nil)},
		{Hostname: "db.vm.internal", Sources: []string{"vms"},
			Ports: []model.Port{{Name: "tcp", Number: 5432, Protocol: model.ProtocolTCP}}, Endpoints: eps("10.0.2.", nil)},
		{Hostname: "billing.pay.internal", Sources: []string{"vms"},
			Ports: []model.Port{{Name: "grpc", Number: 9000, Protocol: model.ProtocolGRPC}}, Endpoints: eps("10.0.3.", nil)},
	}
}

// TrafficConfig uses every VirtualService and DestinationRule feature meshfed
// translates.
const TrafficConfig = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web, namespace: shop}
spec:
  hosts: [web.vm.internal]
  gateways: [mesh]
  http:
  - name: moved
    match: [{uri: {exact: /old}}]
    redirect: {uri: /new, authority: new.vm.internal, redirectCode: 302}
  - name: secure
    match: [{uri: {prefix: /login}}]
    redirect: {scheme: https, port: 443}
  - name: api
    match:
    - name: post
      uri: {prefix: /api}
      method: {exact: POST}
      headers: {x-env: {regex: "stag(e|ing)"}}
      queryParams: {q: {}, lang: {prefix: en}}
    rewrite: {uri: /v2/api, authority: api.vm.internal}
    headers:
      request: {set: {x-via: meshfed}, add: {x-trace: "1"}, remove: [x-debug]}
      response: {set: {cache-control: no-store}, remove: [server]}
    route:
    - destination: {host: web.vm.internal, subset: v2}
      headers: {request: {set: {x-subset: v2}}}
    mirror: {host: orders.vm.internal, port: {number: 8081}}
    mirrorPercentage: {value: 5}
    corsPolicy:
      allowOrigins: [{exact: "https://shop.example"}, {regex: "https://.*\\.shop\\.example"}]
      allowMethods: [GET, POST]
      allowHeaders: [x-user]
      exposeHeaders: [x-request-id]
      maxAge: 24h
      allowCredentials: true
    timeout: 3s
    retries: {attempts: 2, perTryTimeout: 1s, retryOn: "5xx,503,gateway-error"}
  - name: gone
    match: [{uri: {prefix: /direct}}]
    directResponse: {status: 503, body: {string: "down for maintenance"}}
  - name: regex-rewrite
    match: [{uri: {regex: "^/users/([0-9]+)$"}, ignoreUriCase: true}]
    rewrite: {uriRegexRewrite: {match: "^/users/([0-9]+)$", rewrite: "/u/\\1"}}
    route: [{destination: {host: web.vm.internal}}]
  - name: internal
    match: [{withoutHeaders: {x-internal: {}}, authority: {prefix: web}, scheme: {exact: http}}]
    route: [{destination: {host: web.vm.internal, subset: v1}}]
  - name: not-here
    match: [{port: 81}, {sourceLabels: {app: frontend}}, {gateways: [edge-gateway]}]
    route: [{destination: {host: web.vm.internal, subset: v2}}]
  - name: split
    fault: {delay: {fixedDelay: 100ms, percentage: {value: 1}}}
    mirrors: [{destination: {host: orders.vm.internal, port: {number: 8081}}, percentage: {value: 0}}]
    route:
    - {destination: {host: web.vm.internal, subset: v1}, weight: 75, headers: {response: {add: {x-canary: "no"}}}}
    - {destination: {host: web.vm.internal, subset: v2}, weight: 25, headers: {request: {set: {host: canary.vm.internal}}}}
    - {destination: {host: web.vm.internal, subset: v3}, weight: 0}
  - name: after-catch-all
    route: [{destination: {host: web.vm.internal}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db, namespace: shop}
spec:
  hosts: [db.vm.internal]
  tcp:
  - match: [{port: 5433}]
    route: [{destination: {host: db.vm.internal, subset: v2}}]
  - match: [{port: 5432}]
    route:
    - {destination: {host: db.vm.internal, subset: v1}, weight: 80}
    - {destination: {host: db.vm.internal, subset: v2}, weight: 20}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: pay, namespace: shop}
spec:
  hosts: ["*.pay.internal"]
  http:
  - timeout: 1s
    route: [{destination: {host: billing.pay.internal}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders, namespace: shop}
spec:
  host: orders.vm.internal
  trafficPolicy:
    loadBalancer: {consistentHash: {httpCookie: {name: session, path: /, ttl: 60s}}}
    connectionPool:
      tcp: {maxConnections: 100, connectTimeout: 2s, tcpKeepalive: {time: 7200s, interval: 75s, probes: 9}}
      http: {http1MaxPendingRequests: 10, http2MaxRequests: 200, maxRequestsPerConnection: 5, maxRetries: 3, idleTimeout: 30s, maxConcurrentStreams: 50}
    outlierDetection: {consecutive5xxErrors: 3, interval: 5s, baseEjectionTime: 30s, maxEjectionPercent: 50, minHealthPercent: 20}
    tls: {mode: SIMPLE, caCertificates: /etc/meshfed/ca.pem, subjectAltNames: [orders.vm.internal, "spiffe://vm.internal/orders"]}
    portLevelSettings:
    - port: {number: 8081}
      loadBalancer: {simple: RANDOM}
      tls: {mode: MUTUAL, caCertificates: /etc/meshfed/ca.pem, clientCertificate: /etc/meshfed/client.pem, privateKey: /etc/meshfed/client-key.pem, sni: orders.internal}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy: {loadBalancer: {consistentHash: {useSourceIp: true, maglev: {tableSize: 65537}}}}
  - name: v2
    labels: {version: v2}
    trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}, tls: {mode: DISABLE}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: web, namespace: shop}
spec:
  host: web.vm.internal
  trafficPolicy:
    loadBalancer:
      consistentHash: {httpQueryParameterName: user, ringHash: {minimumRingSize: 1024}}
      localityLbSetting: {distribute: [{from: "*", to: {"us-east/a": 80, "us-east/b/*": 20}}]}
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: db, namespace: shop}
spec:
  host: db.vm.internal
  trafficPolicy:
    outlierDetection: {consecutiveGatewayErrors: 2, splitExternalLocalOriginErrors: true, consecutiveLocalOriginFailures: 4}
    tls: {mode: SIMPLE, insecureSkipVerify: true}
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: pay, namespace: shop}
spec:
  host: "*.pay.internal"
  trafficPolicy:
    loadBalancer: {consistentHash: {httpHeaderName: x-account}}
    outlierDetection: {consecutive5xxErrors: 7, interval: 10s, baseEjectionTime: 1m}
`
