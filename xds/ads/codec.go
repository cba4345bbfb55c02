package ads

import (
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"
)

// ServerOptions returns the gRPC server options the xDS server is built
// for; pass them to the grpc.NewServer that Register is called on:
//
//   - a codec that frames ADS responses around the resources' shared
//     serialized bytes, so a response costs a few small buffers instead of
//     a copy of every resource (gRPC's proto codec copies each message into
//     a pooled buffer rounded up to 1 MiB, zeroed on reuse, and held until
//     a slow client has read it: ≈ 1 MiB of RSS per stream during a full
//     push);
//   - fixed HTTP/2 flow-control windows, which turn off gRPC's BDP
//     estimation: its ping on every small request (each ACK) costs each
//     stream a write and a read per update.
//
// gRPC's own defaults already pool each connection's read and write
// buffers (32 KiB, taken per read or flush, not held between them), so
// an idle stream keeps neither; the options that size or share them are
// left at their defaults.
//
// Other messages and services on the same server are encoded as by the
// standard proto codec.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(codec{std: encoding.GetCodecV2(protoenc.Name)}),
		grpc.InitialWindowSize(1 << 20),
		grpc.InitialConnWindowSize(1 << 20),
	}
}

// codec is gRPC's proto codec, except for the ADS responses ads.go builds.
// Their encoding is byte for byte what proto.Marshal produces (fields in
// number order), but each resource's Any value is referenced, not copied.
type codec struct{ std encoding.CodecV2 }

func (c codec) Name() string { return protoenc.Name }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.std.Unmarshal(data, v) }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *discovery.DeltaDiscoveryResponse:
		if out, ok := marshalDelta(m); ok {
			return out, nil
		}
	case *discovery.DiscoveryResponse:
		if out, ok := marshalSotw(m); ok {
			return out, nil
		}
	}
	return c.std.Marshal(v)
}

// Field numbers (envoy/service/discovery/v3/discovery.proto, any.proto).
const (
	fDeltaSystemVersion = 1
	fDeltaResources     = 2
	fDeltaTypeURL       = 4
	fDeltaNonce         = 5
	fDeltaRemoved       = 6
	fResVersion         = 1
	fResResource        = 2
	fResName            = 3
	fSotwVersion        = 1
	fSotwResources      = 2
	fSotwTypeURL        = 4
	fSotwNonce          = 5
	fAnyTypeURL         = 1
	fAnyValue           = 2
)

// framer builds a message as small header segments in one arena,
// interleaved with shared value slices. The segments live in one slice
// too and out points into it, so a message costs three allocations
// whatever its number of resources.
type framer struct {
	arena []byte
	start int // start of the current segment in arena
	segs  []mem.SliceBuffer
	out   mem.BufferSlice
}

func newFramer(arena, segs int) *framer {
	return &framer{arena: make([]byte, 0, arena), segs: make([]mem.SliceBuffer, 0, segs), out: make(mem.BufferSlice, 0, segs)}
}

func (f *framer) seg(b []byte) {
	if len(f.segs) == cap(f.segs) { // not expected: sized by the caller
		f.out = append(f.out, mem.SliceBuffer(b))
		return
	}
	f.segs = append(f.segs, b)
	f.out = append(f.out, &f.segs[len(f.segs)-1])
}

func (f *framer) str(num protowire.Number, s string) {
	if s == "" {
		return
	}
	f.arena = protowire.AppendTag(f.arena, num, protowire.BytesType)
	f.arena = protowire.AppendString(f.arena, s)
}

// value appends a length-delimited field whose bytes are shared.
func (f *framer) value(num protowire.Number, b []byte) {
	f.arena = protowire.AppendTag(f.arena, num, protowire.BytesType)
	f.arena = protowire.AppendVarint(f.arena, uint64(len(b)))
	if len(b) == 0 {
		return
	}
	f.cut()
	f.seg(b)
}

// cut ends the current arena segment.
func (f *framer) cut() {
	if len(f.arena) > f.start {
		f.seg(f.arena[f.start:len(f.arena):len(f.arena)])
	}
	f.start = len(f.arena)
}

func anySize(a *anypb.Any) int {
	n := 0
	if a.GetTypeUrl() != "" {
		n += protowire.SizeTag(fAnyTypeURL) + protowire.SizeBytes(len(a.GetTypeUrl()))
	}
	return n + protowire.SizeTag(fAnyValue) + protowire.SizeBytes(len(a.GetValue()))
}

func sizeStr(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(s))
}

// plainAny reports whether a is an Any with a value and no unknown fields
// (others take the standard codec).
func plainAny(a *anypb.Any) bool {
	return a != nil && len(a.GetValue()) > 0 && len(a.ProtoReflect().GetUnknown()) == 0
}

func marshalDelta(m *discovery.DeltaDiscoveryResponse) (mem.BufferSlice, bool) {
	if m.GetControlPlane() != nil || len(m.GetRemovedResourceNames()) > 0 || len(m.GetResourceErrors()) > 0 ||
		len(m.ProtoReflect().GetUnknown()) > 0 {
		return nil, false
	}
	arena := sizeStr(fDeltaSystemVersion, m.GetSystemVersionInfo()) + sizeStr(fDeltaTypeURL, m.GetTypeUrl()) +
		sizeStr(fDeltaNonce, m.GetNonce())
	for _, n := range m.GetRemovedResources() {
		arena += protowire.SizeTag(fDeltaRemoved) + protowire.SizeBytes(len(n))
	}
	for _, r := range m.GetResources() {
		if r == nil || r.GetResourceName() != nil || len(r.GetAliases()) > 0 || r.GetTtl() != nil ||
			r.GetCacheControl() != nil || r.GetMetadata() != nil || !plainAny(r.GetResource()) ||
			len(r.ProtoReflect().GetUnknown()) > 0 {
			return nil, false
		}
		// Tags and lengths of the Resource, its Any and the value take at
		// most 3×(1+10) bytes (field numbers < 16, varint lengths).
		arena += 33 + sizeStr(fResVersion, r.GetVersion()) + sizeStr(fResName, r.GetName()) +
			sizeStr(fAnyTypeURL, r.GetResource().GetTypeUrl())
	}
	f := newFramer(arena, 2*len(m.GetResources())+1)
	f.str(fDeltaSystemVersion, m.GetSystemVersionInfo())
	for _, r := range m.GetResources() {
		a := r.GetResource()
		as := anySize(a)
		rs := sizeStr(fResVersion, r.GetVersion()) + protowire.SizeTag(fResResource) + protowire.SizeBytes(as) +
			sizeStr(fResName, r.GetName())
		f.arena = protowire.AppendTag(f.arena, fDeltaResources, protowire.BytesType)
		f.arena = protowire.AppendVarint(f.arena, uint64(rs))
		f.str(fResVersion, r.GetVersion())
		f.arena = protowire.AppendTag(f.arena, fResResource, protowire.BytesType)
		f.arena = protowire.AppendVarint(f.arena, uint64(as))
		f.str(fAnyTypeURL, a.GetTypeUrl())
		f.value(fAnyValue, a.GetValue())
		f.str(fResName, r.GetName())
	}
	f.str(fDeltaTypeURL, m.GetTypeUrl())
	f.str(fDeltaNonce, m.GetNonce())
	for _, n := range m.GetRemovedResources() {
		f.arena = protowire.AppendTag(f.arena, fDeltaRemoved, protowire.BytesType)
		f.arena = protowire.AppendString(f.arena, n)
	}
	f.cut()
	return f.out, true
}

func marshalSotw(m *discovery.DiscoveryResponse) (mem.BufferSlice, bool) {
	if m.GetCanary() || m.GetControlPlane() != nil || len(m.GetResourceErrors()) > 0 ||
		len(m.ProtoReflect().GetUnknown()) > 0 {
		return nil, false
	}
	arena := sizeStr(fSotwVersion, m.GetVersionInfo()) + sizeStr(fSotwTypeURL, m.GetTypeUrl()) + sizeStr(fSotwNonce, m.GetNonce())
	for _, a := range m.GetResources() {
		if !plainAny(a) {
			return nil, false
		}
		arena += 22 + sizeStr(fAnyTypeURL, a.GetTypeUrl())
	}
	f := newFramer(arena, 2*len(m.GetResources())+1)
	f.str(fSotwVersion, m.GetVersionInfo())
	for _, a := range m.GetResources() {
		f.arena = protowire.AppendTag(f.arena, fSotwResources, protowire.BytesType)
		f.arena = protowire.AppendVarint(f.arena, uint64(anySize(a)))
		f.str(fAnyTypeURL, a.GetTypeUrl())
		f.value(fAnyValue, a.GetValue())
	}
	f.str(fSotwTypeURL, m.GetTypeUrl())
	f.str(fSotwNonce, m.GetNonce())
	f.cut()
	return f.out, true
}
