package translate

import (
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Proxy is what scoping knows of an Envoy proxy (docs/architecture.md
// §3.7): its namespace and its workload's labels, read from its node as
// Istio reads them (pilot/pkg/model/context.go).
type Proxy struct {
	// Namespace: node metadata NAMESPACE, else the first label of the
	// node id's domain (sidecar~10.0.0.1~pod.shop~shop.svc.cluster.local:
	// shop). "" when neither names one: the proxy is not scoped.
	Namespace string
	// Labels: node metadata LABELS (a struct of strings).
	Labels map[string]string
}

// ProxyOf reads a node's namespace and labels.
func ProxyOf(n *core.Node) Proxy {
	var p Proxy
	md := n.GetMetadata().GetFields()
	p.Namespace = md["NAMESPACE"].GetStringValue()
	if p.Namespace == "" {
		if parts := strings.Split(n.GetId(), "~"); len(parts) == 4 {
			if ns, _, ok := strings.Cut(parts[3], "."); ok {
				p.Namespace = ns
			}
		}
	}
	if ls, ok := md["LABELS"].GetKind().(*structpb.Value_StructValue); ok {
		for k, v := range ls.StructValue.GetFields() {
			if s, ok := v.GetKind().(*structpb.Value_StringValue); ok {
				if p.Labels == nil {
					p.Labels = map[string]string{}
				}
				p.Labels[k] = s.StringValue
			}
		}
	}
	return p
}
