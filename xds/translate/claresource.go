package translate

import (
	"fmt"
	"sync"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/runtime/protoiface"
)

// The protoreflect shim of incremental EDS (eds.go): a served
// ClusterLoadAssignment is a claResource, a proto.Message whose
// marshalling concatenates the cached encodings of its localities and
// endpoints, and whose reflection (protojson, proto.Equal, ValidateAll)
// reads the message decoded from them once.

// claResource is a ClusterLoadAssignment served as a resource: a
// proto.Message whose marshalling assembles the cached encodings of its
// localities and endpoints. Everything else (reflection, so protojson and
// proto.Equal; ValidateAll; GetEndpoints) reads the message decoded from
// that encoding once. Immutable: reflection that would modify it panics.
type claResource struct {
	name       string
	head, tail []byte // fields before and after endpoints
	locs       []*locState
	size       int

	once sync.Once
	msg  *endpoint.ClusterLoadAssignment
}

// message returns the ClusterLoadAssignment, decoded on first use. Do not
// modify it.
func (c *claResource) message() *endpoint.ClusterLoadAssignment {
	c.once.Do(func() {
		m := new(endpoint.ClusterLoadAssignment)
		if err := proto.Unmarshal(c.appendTo(make([]byte, 0, c.size)), m); err != nil {
			panic(fmt.Sprintf("xds: decode ClusterLoadAssignment %s: %v", c.name, err)) // encoded here: cannot fail
		}
		c.msg = m
	})
	return c.msg
}

// GetName is the resource name (go-control-plane's types.ResourceWithName).
func (c *claResource) GetName() string { return c.name }

// GetClusterName is the resource name.
func (c *claResource) GetClusterName() string { return c.name }

// GetEndpoints returns the localities of the message.
func (c *claResource) GetEndpoints() []*endpoint.LocalityLbEndpoints {
	return c.message().GetEndpoints()
}

// ValidateAll runs the message's protoc-gen-validate rules (the parts were
// validated when built; this checks the whole again).
func (c *claResource) ValidateAll() error { return c.message().ValidateAll() }

// ProtoReflect returns the message's reflection with the fast marshalling
// methods.
func (c *claResource) ProtoReflect() protoreflect.Message { return claReflect{c} }

// claReflect is the reflection of a claResource: the decoded message's,
// read-only, with marshalling from the cached encodings.
type claReflect struct{ c *claResource }

var claDescriptor = (*endpoint.ClusterLoadAssignment)(nil).ProtoReflect().Descriptor()

func (m claReflect) inner() protoreflect.Message { return m.c.message().ProtoReflect() }

func (m claReflect) Descriptor() protoreflect.MessageDescriptor { return claDescriptor }
func (m claReflect) Type() protoreflect.MessageType             { return m.inner().Type() }
func (m claReflect) New() protoreflect.Message                  { return m.inner().New() }
func (m claReflect) Interface() protoreflect.ProtoMessage       { return m.c }
func (m claReflect) Range(f func(protoreflect.FieldDescriptor, protoreflect.Value) bool) {
	m.inner().Range(f)
}
func (m claReflect) Has(fd protoreflect.FieldDescriptor) bool { return m.inner().Has(fd) }
func (m claReflect) Get(fd protoreflect.FieldDescriptor) protoreflect.Value {
	return m.inner().Get(fd)
}
func (m claReflect) NewField(fd protoreflect.FieldDescriptor) protoreflect.Value {
	return m.inner().NewField(fd)
}
func (m claReflect) WhichOneof(od protoreflect.OneofDescriptor) protoreflect.FieldDescriptor {
	return m.inner().WhichOneof(od)
}
func (m claReflect) GetUnknown() protoreflect.RawFields { return m.inner().GetUnknown() }
func (m claReflect) IsValid() bool                      { return m.c != nil }
func (m claReflect) Clear(protoreflect.FieldDescriptor) { immutable() }
func (m claReflect) Set(protoreflect.FieldDescriptor, protoreflect.Value) {
	immutable()
}
func (m claReflect) Mutable(protoreflect.FieldDescriptor) protoreflect.Value {
	immutable()
	return protoreflect.Value{}
}
func (m claReflect) SetUnknown(protoreflect.RawFields) { immutable() }
func (m claReflect) ProtoMethods() *protoiface.Methods { return claMethods }

func immutable() { panic("xds: a served ClusterLoadAssignment is immutable") }

var claMethods = &protoiface.Methods{
	Flags: protoiface.SupportMarshalDeterministic,
	Size: func(in protoiface.SizeInput) protoiface.SizeOutput {
		return protoiface.SizeOutput{Size: in.Message.(claReflect).c.size}
	},
	Marshal: func(in protoiface.MarshalInput) (protoiface.MarshalOutput, error) {
		return protoiface.MarshalOutput{Buf: in.Message.(claReflect).c.appendTo(in.Buf)}, nil
	},
	// proto3 with no required fields anywhere below: always initialized.
	CheckInitialized: func(protoiface.CheckInitializedInput) (protoiface.CheckInitializedOutput, error) {
		return protoiface.CheckInitializedOutput{}, nil
	},
}

// appendTo appends the deterministic encoding of the CLA to b.
func (c *claResource) appendTo(b []byte) []byte {
	b = append(b, c.head...)
	for _, l := range c.locs {
		b = protowire.AppendTag(b, claEndpointsNum, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(l.size))
		b = append(b, l.pre...)
		for i := range l.entries {
			b = append(b, l.entries[i].field...)
		}
		b = append(b, l.post...)
	}
	return append(b, c.tail...)
}
