// Package translate turns meshfed's model snapshots into xDS resources:
// Envoy clusters, endpoints, listeners and routes; the same for proxyless
// gRPC clients; ServiceEntries and Istio config for istiod over MCP.
//
// Translation is pure (no I/O, no clock) and incremental: a Translator
// keeps what it built per service, rebuilds only services whose pointer or
// traffic config changed, reuses every resource equal to the previous one,
// builds ClusterLoadAssignments per endpoint (eds.go, served through the
// protoreflect shim in claresource.go), and returns what changed per
// collection as ads.Changes for the ADS server (xds/ads) to install. Every
// resource passes its protobuf ValidateAll; a service whose resources do
// not is left out whole and listed by Invalid.
//
// Names follow docs/architecture.md §4 (names.go).
package translate
