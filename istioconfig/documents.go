package istioconfig

import (
	"go.yaml.in/yaml/v4"
	"google.golang.org/protobuf/proto"
)

// Document is one decoded document of a multi-document, kubectl-style
// YAML file of Istio objects.
type Document struct {
	Kind, Namespace, Name string
	// Source is "<file>:<line>" of the document.
	Source string
	// Spec is the decoded spec (the kind's istio.io/api message); nil when
	// Err is set.
	Spec proto.Message
	// Hash identifies the object's identity and content.
	Hash string
	// Err says why the document is not a valid object of its kind (its
	// apiVersion, metadata or spec): every problem found, joined; Kind,
	// Namespace and Name may still be known.
	Err error
	// Problems are Err's problems, each at the line and column of the
	// field it is about in the file (as the config source reports those
	// of VirtualServices and DestinationRules); nil when Err is nil.
	Problems []Problem
	// Node is the document's YAML body: yamlpath.Lookup(Node,
	// "spec.endpoints[2]") points at a part of it.
	Node *yaml.Node
}

// DecodeDocuments decodes every document of file (content data) whose
// kind is in kinds, in file order, with the same rules as the config
// source: apiVersion networking.istio.io v1, v1beta1 or v1alpha3;
// metadata.name a DNS-1123 subdomain; namespace "default" when unset;
// Go-style durations accepted. Each spec is checked against its message
// (every unknown field, with the nearest known name, and every value of
// the wrong type) and by its kind's Validate, and every problem is placed
// at its field. Documents of other kinds and empty documents are skipped.
// A YAML syntax error fails the whole file (err): which objects it held
// is unknown. Registries of Istio objects (registries/serviceentry) read
// their files through it.
func DecodeDocuments(file string, data []byte, kinds map[string]Kind) ([]Document, error) {
	ps, err := decodeFileKinds(file, data, kinds)
	if err != nil {
		return nil, err
	}
	out := make([]Document, len(ps))
	for i, p := range ps {
		if p.err == nil {
			if v := kinds[p.kind].Validate; v != nil {
				if err := v(p.spec); err != nil {
					p.err, p.spec = err, nil
				}
			}
		}
		out[i] = Document{Kind: p.kind, Namespace: p.namespace, Name: p.name, Source: p.source, Spec: p.spec, Hash: p.hash, Err: p.err, Node: p.node}
		if p.err != nil {
			out[i].Problems = problemsOf(p.node, p.err)
		}
	}
	return out, nil
}
