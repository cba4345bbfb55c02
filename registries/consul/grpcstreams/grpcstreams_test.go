package grpcstreams

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/meshfed/meshfed/test/servers"
)

// raw is a gRPC codec of serialized bytes, for the test server.
type raw struct{}

func (raw) Name() string { return "proto" }
func (raw) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}
func (raw) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

// The test server's calls: the request is "count size code", the
// response count messages of size bytes, message i filled with byte i,
// then status code. Method /test.S/Block answers nothing until the call
// is cancelled and records that.
type server struct {
	addr     string
	srv      *grpc.Server
	canceled atomic.Int64
}

func startServer(t *testing.T) *server {
	t.Helper()
	lis := servers.LowListener(t)
	s := &server{addr: lis.Addr().String()}
	s.srv = grpc.NewServer(grpc.ForceServerCodecV2(raw{}), grpc.UnknownServiceHandler(func(_ any, st grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(st)
		var req []byte
		if err := st.RecvMsg(&req); err != nil {
			return err
		}
		if method == "/test.S/Block" {
			<-st.Context().Done()
			s.canceled.Add(1)
			return st.Context().Err()
		}
		var count, size, code int
		if _, err := fmt.Sscan(string(req), &count, &size, &code); err != nil {
			return status.Errorf(codes.InvalidArgument, "request %q: %v", req, err)
		}
		for i := range count {
			msg := bytes.Repeat([]byte{byte(i)}, size)
			if err := st.SendMsg(&msg); err != nil {
				return err
			}
		}
		if code != 0 {
			return status.Errorf(codes.Code(code), "failed as asked: ünïcode %d%%", code)
		}
		return nil
	}))
	go s.srv.Serve(lis)
	t.Cleanup(s.srv.Stop)
	return s
}

func dial(t *testing.T, addr string, opts Options) *Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Dial(nc, addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// call is one call's outcome.
type call struct {
	mu   sync.Mutex
	msgs [][]byte
	err  error
	ends int
	done chan struct{}
}

func open(t *testing.T, c *Conn, method, req string) (*Stream, *call) {
	t.Helper()
	r := &call{done: make(chan struct{})}
	s, err := c.Stream(method, []byte(req), func(b []byte) error {
		r.mu.Lock()
		r.msgs = append(r.msgs, b)
		r.mu.Unlock()
		return nil
	}, func(err error) {
		r.mu.Lock()
		r.err = err
		r.ends++
		r.mu.Unlock()
		close(r.done)
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, r
}

func (r *call) wait(t *testing.T) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the call did not end in 30s")
	}
}

func (r *call) check(t *testing.T, count, size int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.msgs) != count {
		t.Fatalf("%d messages, want %d (end: %v)", len(r.msgs), count, r.err)
	}
	for i, m := range r.msgs {
		if len(m) != size || (size > 0 && (m[0] != byte(i) || m[size-1] != byte(i))) {
			t.Fatalf("message %d: %d bytes starting %v, want %d bytes of %d", i, len(m), m[:min(len(m), 4)], size, byte(i))
		}
	}
}

// TestManyCallsOneConnection: 2,000 calls at once on one connection each
// get their messages in order and end once with io.EOF (status OK).
func TestManyCallsOneConnection(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := dial(t, s.addr, Options{})
	var calls []*call
	for i := range 2000 {
		_, r := open(t, c, "/test.S/Many", fmt.Sprintf("%d 100 0", i%7))
		calls = append(calls, r)
	}
	for i, r := range calls {
		r.wait(t)
		r.check(t, i%7, 100)
		if r.err != io.EOF || r.ends != 1 {
			t.Fatalf("call %d ended %d times with %v, want once with io.EOF", i, r.ends, r.err)
		}
	}
}

// TestFlowControl: 48 MB on one call and 8 calls of 8 MB at once, in
// messages of 1 MB and 16 KB: more than the windows granted, so the
// client must send WINDOW_UPDATE for the calls and the connection.
func TestFlowControl(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := dial(t, s.addr, Options{})
	_, big := open(t, c, "/test.S/Big", "48 1048576 0")
	var small []*call
	for range 8 {
		_, r := open(t, c, "/test.S/Small", "512 16384 0")
		small = append(small, r)
	}
	big.wait(t)
	big.check(t, 48, 1<<20)
	for _, r := range small {
		r.wait(t)
		r.check(t, 512, 16384)
	}
}

// TestStatusError: a call that fails ends with its gRPC status, message
// decoded, after the messages sent before it.
func TestStatusError(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := dial(t, s.addr, Options{})
	_, r := open(t, c, "/test.S/Fail", fmt.Sprintf("3 10 %d", codes.PermissionDenied))
	r.wait(t)
	r.check(t, 3, 10)
	if st, _ := status.FromError(r.err); st.Code() != codes.PermissionDenied || st.Message() != "failed as asked: ünïcode 7%" {
		t.Errorf("ended with %v, want PermissionDenied \"failed as asked: ünïcode 7%%\"", r.err)
	}
	// A trailers-only answer (no message before the error).
	_, r = open(t, c, "/test.S/Fail", "not numbers")
	r.wait(t)
	if status.Code(r.err) != codes.InvalidArgument {
		t.Errorf("ended with %v, want InvalidArgument", r.err)
	}
}

// TestCancel: Cancel ends the call on both sides, once.
func TestCancel(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := dial(t, s.addr, Options{})
	st, r := open(t, c, "/test.S/Block", "")
	time.Sleep(50 * time.Millisecond)
	st.Cancel()
	st.Cancel()
	r.wait(t)
	if !errors.Is(r.err, context.Canceled) || r.ends != 1 {
		t.Errorf("ended %d times with %v, want once with context.Canceled", r.ends, r.err)
	}
	for deadline := time.Now().Add(10 * time.Second); s.canceled.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if s.canceled.Load() != 1 {
		t.Error("the server did not see the call cancelled")
	}
	// The connection still carries calls.
	_, r = open(t, c, "/test.S/After", "2 5 0")
	r.wait(t)
	r.check(t, 2, 5)
}

// TestServerGoesAway: a server stopping ends every open call with
// Unavailable and the connection takes no new calls.
func TestServerGoesAway(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := dial(t, s.addr, Options{})
	var calls []*call
	for range 10 {
		_, r := open(t, c, "/test.S/Block", "")
		calls = append(calls, r)
	}
	time.Sleep(50 * time.Millisecond)
	s.srv.Stop()
	for _, r := range calls {
		r.wait(t)
		if status.Code(r.err) != codes.Unavailable || r.ends != 1 {
			t.Errorf("ended %d times with %v, want once with Unavailable", r.ends, r.err)
		}
	}
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the connection did not end")
	}
	if c.Usable() {
		t.Error("a closed connection says it is usable")
	}
	if _, err := c.Stream("/test.S/Late", nil, func([]byte) error { return nil }, func(error) {}); err == nil {
		t.Error("a call opened on a closed connection")
	}
}

// TestKeepaliveDetectsASilentServer: when the server stops answering
// (a proxy in between drops everything), the unanswered ping fails the
// connection and its calls.
func TestKeepaliveDetectsASilentServer(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	lis := servers.LowListener(t)
	var silent atomic.Bool
	go func() {
		in, err := lis.Accept()
		if err != nil {
			return
		}
		defer in.Close()
		out, err := net.Dial("tcp", s.addr)
		if err != nil {
			return
		}
		defer out.Close()
		pipe := func(dst, src net.Conn) {
			buf := make([]byte, 32<<10)
			for {
				n, err := src.Read(buf)
				if err != nil {
					return
				}
				if !silent.Load() {
					if _, err := dst.Write(buf[:n]); err != nil {
						return
					}
				}
			}
		}
		go pipe(out, in)
		pipe(in, out)
	}()
	c := dial(t, lis.Addr().String(), Options{Keepalive: 100 * time.Millisecond, KeepaliveTimeout: 200 * time.Millisecond})
	_, r := open(t, c, "/test.S/Block", "")
	time.Sleep(400 * time.Millisecond) // pings answered: still up
	if c.Err() != nil {
		t.Fatalf("connection failed while the server answered pings: %v", c.Err())
	}
	silent.Store(true)
	r.wait(t)
	if status.Code(r.err) != codes.Unavailable {
		t.Errorf("ended with %v, want Unavailable (keepalive)", r.err)
	}
}
