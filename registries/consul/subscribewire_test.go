package consul

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meshfed/meshfed/registries"
)

func msg(fields ...func([]byte) []byte) []byte {
	var b []byte
	for _, f := range fields {
		b = f(b)
	}
	return b
}

func str(num protowire.Number, s string) func([]byte) []byte {
	return func(b []byte) []byte { return appendString(b, num, s) }
}

func sub(num protowire.Number, m []byte) func([]byte) []byte {
	return func(b []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), m)
	}
}

func varint(num protowire.Number, v uint64) func([]byte) []byte {
	return func(b []byte) []byte {
		return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
	}
}

// TestDecodeEvent decodes an EventBatch of a register and a deregister
// as Consul's servers encode them (field numbers of pbsubscribe and
// pbservice), with fields the registry does not read skipped.
func TestDecodeEvent(t *testing.T) {
	t.Parallel()
	node := msg(str(1, "uuid"), str(2, "node-1"), str(3, "10.0.0.1"), str(4, "dc1"),
		sub(6, msg(str(1, "zone"), str(2, "z1"))), varint(99, 7))
	svc := msg(str(2, "web-1"), str(3, "web"), str(4, "a"), str(4, "b=c"), str(5, "10.1.0.1"),
		sub(6, msg(str(1, "protocol"), str(2, "http"))), varint(7, 8080), sub(8, msg(varint(1, 3), varint(2, 1))),
		sub(14, msg(varint(1, 5), varint(2, 6)))) // RaftIndex, not read
	check := msg(str(1, "node-1"), str(2, "service:web-1"), str(4, "warning"), str(7, "web-1"))
	csn := msg(sub(1, node), sub(2, svc), sub(3, check))
	reg := msg(varint(1, 42), sub(10, msg(varint(1, 0), sub(2, csn))))
	dereg := msg(varint(1, 42), sub(10, msg(varint(1, 1), sub(2, msg(sub(1, msg(str(2, "node-2"))), sub(2, msg(str(2, "web-2"))))))))
	ev, err := decodeEvent(msg(varint(1, 42), sub(4, msg(sub(1, reg), sub(1, dereg)))))
	if err != nil {
		t.Fatal(err)
	}
	if ev.index != 42 || len(ev.updates) != 2 || ev.updates[0].deregister || !ev.updates[1].deregister {
		t.Fatalf("event %+v", ev)
	}
	e := ev.updates[0].entry
	if e.Node.Node != "node-1" || e.Node.Address != "10.0.0.1" || e.Node.Datacenter != "dc1" || e.Node.Meta["zone"] != "z1" {
		t.Errorf("node %+v", e.Node)
	}
	s := e.Service
	if s.ID != "web-1" || s.Service != "web" || len(s.Tags) != 2 || s.Tags[1] != "b=c" || s.Address != "10.1.0.1" ||
		s.Meta["protocol"] != "http" || s.Port != 8080 || s.Weights.Passing != 3 || s.Weights.Warning != 1 {
		t.Errorf("service %+v", s)
	}
	if len(e.Checks) != 1 || e.Checks[0].Status != "warning" || e.Checks[0].ServiceID != "web-1" || e.Checks.AggregatedStatus() != "warning" {
		t.Errorf("checks %+v", e.Checks)
	}
	if d := ev.updates[1].entry; d.Node.Node != "node-2" || d.Service.ID != "web-2" {
		t.Errorf("deregistered %+v %+v", d.Node, d.Service)
	}

	end, err := decodeEvent(msg(varint(1, 43), varint(2, 1)))
	if err != nil || !end.endOfSnapshot || end.index != 43 {
		t.Errorf("end of snapshot: %+v, %v", end, err)
	}
}

// TestDecodeEventMalformed: truncated or garbled input is an error,
// never a panic or a half-read instance.
func TestDecodeEventMalformed(t *testing.T) {
	t.Parallel()
	good := msg(varint(1, 9), sub(10, msg(sub(2, msg(sub(1, msg(str(2, "n"))), sub(2, msg(str(2, "id"))))))))
	// Past the index (2 bytes, a whole message), a cut falls inside the
	// update.
	for i := 3; i < len(good); i++ {
		if _, err := decodeEvent(good[:i]); err == nil {
			t.Errorf("truncated at %d of %d: no error", i, len(good))
		}
	}
	if _, err := decodeEvent(msg(sub(10, msg(varint(1, 0))))); err == nil {
		t.Error("an update without an instance: no error")
	}
}

func FuzzDecodeEvent(f *testing.F) {
	f.Add(msg(varint(1, 9), sub(10, msg(sub(2, msg(sub(1, msg(str(2, "n"))), sub(2, msg(str(2, "id")))))))))
	f.Add(msg(varint(1, 1), varint(2, 1)))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := decodeEvent(b)
		if err != nil {
			return
		}
		for _, u := range ev.updates {
			if u.entry == nil || u.entry.Node == nil || u.entry.Service == nil {
				t.Fatalf("update without an instance: %+v", u)
			}
		}
	})
}

// instanceEvent is an Event registering instance id of service web on
// node at index idx.
func instanceEvent(idx uint64, node, id string) []byte {
	csn := msg(sub(1, msg(str(2, node), str(3, "10.0.0.1"))), sub(2, msg(str(2, id), str(3, "web"), varint(7, 80))))
	return msg(varint(1, idx), sub(10, msg(varint(1, 0), sub(2, csn))))
}

// TestViewWaitsForTheConsistentIndex: a snapshot older than the
// consistent read made before the subscription (a restarted server's) is
// not sent until the events that follow it reach that read's index; then
// every change is. A stream that never reaches it is sent as it is when
// catchUpTimeout passes.
func TestViewWaitsForTheConsistentIndex(t *testing.T) {
	t.Parallel()
	for _, reach := range []bool{true, false} {
		r := &Registry{log: slog.New(slog.DiscardHandler), m: newMetrics(fmt.Sprintf("view-%v", reach))}
		w := &watch{r: r, service: make(chan serviceEvent, 10)}
		f := &follower{w: w, e: &entry{name: "web", ctx: context.Background()}, b: &registries.Backoff{}}
		f.v, f.want, f.snap = view{instances: map[string][]byte{}}, 7, make(chan struct{})
		got := func() []string {
			select {
			case ev := <-w.service:
				var ids []string
				for _, e := range ev.entries {
					ids = append(ids, e.Service.ID)
				}
				return ids
			default:
				return nil
			}
		}
		for _, b := range [][]byte{instanceEvent(5, "n1", "a"), msg(varint(1, 5), varint(2, 1))} { // snapshot, EndOfSnapshot
			if err := f.onMsg(b); err != nil {
				t.Fatal(err)
			}
		}
		if ids := got(); ids != nil {
			t.Fatalf("sent %v before the consistent index", ids)
		}
		if !reach {
			f.catchUpTimedOut()
			if ids := got(); !slices.Equal(ids, []string{"a"}) {
				t.Fatalf("after the timeout: sent %v, want [a]", ids)
			}
			continue
		}
		if err := f.onMsg(instanceEvent(7, "n2", "b")); err != nil {
			t.Fatal(err)
		}
		if ids := got(); !slices.Equal(ids, []string{"a", "b"}) {
			t.Fatalf("at the consistent index: sent %v, want [a b]", ids)
		}
		select {
		case <-f.snap:
		default:
			t.Error("the starter is not released")
		}
		if err := f.onMsg(instanceEvent(9, "n3", "c")); err != nil {
			t.Fatal(err)
		}
		if ids := got(); !slices.Equal(ids, []string{"a", "b", "c"}) {
			t.Fatalf("a change: sent %v, want [a b c]", ids)
		}
	}
}
