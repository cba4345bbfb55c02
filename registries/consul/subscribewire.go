package consul

import (
	"fmt"

	"github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/encoding/protowire"
)

// The wire form of Consul's event stream (package subscribe,
// proto/private/pbsubscribe in Consul's repository), the part this
// registry uses. Consul publishes no Go module for it: its generated code
// is in Consul's main module (Business Source License since 1.16.2, and
// importing it brings the whole agent), so the few messages read here are
// encoded and decoded with protowire. The field numbers have been fixed
// since Consul 1.10: every client agent speaks this protocol to servers
// of other versions during upgrades.

// subscribeMethod is the stream's gRPC method.
const subscribeMethod = "/subscribe.StateChangeSubscription/Subscribe"

// topicServiceHealth is pbsubscribe.Topic_ServiceHealth: the instances of
// one service with their node and checks.
const topicServiceHealth = 1

// encodeSubscribe encodes a SubscribeRequest for the health of service
// name. It sets the top-level Key (field 2), which every server since
// 1.10 reads (newer ones when NamedSubject is absent).
func encodeSubscribe(name, token, dc string) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType) // Topic
	b = protowire.AppendVarint(b, topicServiceHealth)
	b = appendString(b, 2, name) // Key
	b = appendString(b, 3, token)
	b = appendString(b, 5, dc)
	return b
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// event is one decoded top-level Event.
type event struct {
	index         uint64
	endOfSnapshot bool
	newSnapshot   bool // NewSnapshotToFollow: reset the view
	updates       []update
}

// update is a ServiceHealthUpdate: register (or replace) or deregister
// one instance; raw is the instance's CheckServiceNode as received
// (decodeCheckServiceNode reads it again).
type update struct {
	deregister bool
	entry      *api.ServiceEntry
	raw        []byte
}

// decodeEvent decodes an Event; an EventBatch's events are flattened into
// updates (they share one index and apply together).
func decodeEvent(b []byte) (event, error) {
	var ev event
	err := walk(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			ev.index = n
		case num == 2 && typ == protowire.VarintType:
			ev.endOfSnapshot = n != 0
		case num == 3 && typ == protowire.VarintType:
			ev.newSnapshot = n != 0
		case num == 4 && typ == protowire.BytesType: // EventBatch
			return walk(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if num != 1 || typ != protowire.BytesType {
					return nil
				}
				inner, err := decodeEvent(v)
				ev.updates = append(ev.updates, inner.updates...)
				return err
			})
		case num == 10 && typ == protowire.BytesType: // ServiceHealthUpdate
			u, err := decodeUpdate(v)
			ev.updates = append(ev.updates, u)
			return err
		}
		return nil // other payloads (config entries, service lists) are not read
	})
	return ev, err
}

func decodeUpdate(b []byte) (update, error) {
	var u update
	err := walk(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			u.deregister = n == 1 // CatalogOp: Register 0, Deregister 1
		case num == 2 && typ == protowire.BytesType:
			e, err := decodeCheckServiceNode(v)
			u.entry, u.raw = e, v
			return err
		}
		return nil
	})
	if err == nil && u.entry == nil {
		err = fmt.Errorf("service health update without an instance")
	}
	return u, err
}

// decodeCheckServiceNode decodes a CheckServiceNode into the form the
// HTTP API's /v1/health/service answer decodes to, with the fields
// Convert and the filters read.
func decodeCheckServiceNode(b []byte) (*api.ServiceEntry, error) {
	e := &api.ServiceEntry{Node: &api.Node{}, Service: &api.AgentService{}}
	err := walk(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			return decodeNode(v, e.Node)
		case 2:
			return decodeNodeService(v, e.Service)
		case 3:
			c := &api.HealthCheck{}
			e.Checks = append(e.Checks, c)
			return decodeCheck(v, c)
		}
		return nil
	})
	return e, err
}

func decodeNode(b []byte, n *api.Node) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			n.ID = string(v)
		case 2:
			n.Node = string(v)
		case 3:
			n.Address = string(v)
		case 4:
			n.Datacenter = string(v)
		case 6:
			return decodeMapEntry(v, &n.Meta)
		}
		return nil
	})
}

func decodeNodeService(b []byte, s *api.AgentService) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			s.Kind = api.ServiceKind(v)
		case num == 2 && typ == protowire.BytesType:
			s.ID = string(v)
		case num == 3 && typ == protowire.BytesType:
			s.Service = string(v)
		case num == 4 && typ == protowire.BytesType:
			s.Tags = append(s.Tags, string(v))
		case num == 5 && typ == protowire.BytesType:
			s.Address = string(v)
		case num == 6 && typ == protowire.BytesType:
			return decodeMapEntry(v, &s.Meta)
		case num == 7 && typ == protowire.VarintType:
			s.Port = int(int32(n))
		case num == 8 && typ == protowire.BytesType: // Weights
			return walk(v, func(num protowire.Number, typ protowire.Type, _ []byte, n uint64) error {
				if typ == protowire.VarintType && num == 1 {
					s.Weights.Passing = int(int32(n))
				} else if typ == protowire.VarintType && num == 2 {
					s.Weights.Warning = int(int32(n))
				}
				return nil
			})
		}
		return nil
	})
}

func decodeCheck(b []byte, c *api.HealthCheck) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			c.Node = string(v)
		case 2:
			c.CheckID = string(v)
		case 3:
			c.Name = string(v)
		case 4:
			c.Status = string(v)
		case 7:
			c.ServiceID = string(v)
		case 8:
			c.ServiceName = string(v)
		}
		return nil
	})
}

// decodeMapEntry adds one map<string, string> entry to *m.
func decodeMapEntry(b []byte, m *map[string]string) error {
	var k, v string
	err := walk(b, func(num protowire.Number, typ protowire.Type, b []byte, _ uint64) error {
		if typ == protowire.BytesType && num == 1 {
			k = string(b)
		} else if typ == protowire.BytesType && num == 2 {
			v = string(b)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[k] = v
	return nil
}

// walk calls f for each field of the message in b: v for length-delimited
// fields, n for varints; other types are skipped. It fails on malformed
// input (never panics).
func walk(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return fmt.Errorf("consul event: %w", protowire.ParseError(l))
		}
		b = b[l:]
		var v []byte
		var n uint64
		switch typ {
		case protowire.BytesType:
			v, l = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			n, l = protowire.ConsumeVarint(b)
		default:
			l = protowire.ConsumeFieldValue(num, typ, b)
		}
		if l < 0 {
			return fmt.Errorf("consul event field %d: %w", num, protowire.ParseError(l))
		}
		b = b[l:]
		if typ != protowire.BytesType && typ != protowire.VarintType {
			continue
		}
		if err := f(num, typ, v, n); err != nil {
			return err
		}
	}
	return nil
}
