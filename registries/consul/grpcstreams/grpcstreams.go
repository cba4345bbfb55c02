// Package grpcstreams is a gRPC client for many server-streaming calls on
// one HTTP/2 connection (cleartext) without a goroutine per call: one
// goroutine reads the connection and hands each call's messages to its
// callback.
//
// Why not grpc-go's client: a ClientStream is read by blocking in
// RecvMsg, and grpc-go starts a goroutine per stream to watch its
// context, so every open call holds two goroutines (≈ 10 KB of stacks
// with grpc-go 1.85's call depth) and ≈ 3.5 KB of heap. The consul
// registry holds a call per service of the catalog; at 10,000 services
// that was 1.35 KB per endpoint of the 2 KB budget (docs/architecture.md,
// "Packages"; bench/analysis.md). Here a call costs its callbacks and a
// small struct. The HTTP/2 framing and
// header compression are golang.org/x/net/http2's; this package holds
// the connection's state: streams, flow control, keepalive, GOAWAY.
//
// Only what such a client needs is implemented: unary requests sent in one
// DATA frame, uncompressed messages, no retries (a caller opens a call
// again after an error).
package grpcstreams

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Flow-control windows granted to the server: per call and for the
// connection. Messages are handed over as they are read, so a window is
// credit, not memory held.
const (
	streamWindow = 1 << 20
	connWindow   = 64 << 20
	// maxMessage bounds one message (a length prefix past it is an error).
	maxMessage = 256 << 20
	// maxStreamID is the last client stream ID HTTP/2 allows.
	maxStreamID = 1<<31 - 1
)

// Options tune a Conn; the zero value is usable.
type Options struct {
	// Keepalive is how often the connection is pinged while calls are
	// open (0: 30s; servers built on grpc-go refuse pings more often than
	// their enforcement policy, Consul's 15s). A ping not answered within
	// KeepaliveTimeout (0: 10s) closes the connection.
	Keepalive, KeepaliveTimeout time.Duration
	// UserAgent is sent with every call.
	UserAgent string
}

// ErrClosed is the error of calls ended by Close.
var ErrClosed = errors.New("grpcstreams: connection closed")

// Conn is one HTTP/2 connection carrying server-streaming calls. Its
// methods are safe for concurrent use.
type Conn struct {
	nc        net.Conn
	authority string
	opts      Options

	wmu  sync.Mutex // guards fr's writes, bw, henc and hbuf
	bw   *bufio.Writer
	fr   *http2.Framer
	henc *hpack.Encoder
	hbuf bytes.Buffer

	mu      sync.Mutex
	streams map[uint32]*Stream
	nextID  uint32
	err     error // set once the connection ends: every call fails with it
	goAway  bool  // the server sent GOAWAY: no new calls
	pingAt  time.Time
	done    chan struct{}
}

// Stream is one server-streaming call.
type Stream struct {
	c     *Conn
	id    uint32
	onMsg func([]byte) error
	onEnd func(error)

	// mu orders onMsg before onEnd: the reader holds it while it hands a
	// message over, the goroutine that ends the call sets ended under it.
	mu    sync.Mutex
	ended bool

	// Owned by the reader goroutine.
	headers bool   // the response headers arrived
	buf     []byte // the part of a message read so far
	unacked int    // bytes read since the last stream WINDOW_UPDATE
}

// Dial opens a connection over nc, which must be connected to a server
// that speaks HTTP/2 with prior knowledge (gRPC's cleartext transport);
// authority is the :authority of every call. The connection is closed
// when the handshake fails or Close is called.
func Dial(nc net.Conn, authority string, opts Options) (*Conn, error) {
	if opts.Keepalive <= 0 {
		opts.Keepalive = 30 * time.Second
	}
	if opts.KeepaliveTimeout <= 0 {
		opts.KeepaliveTimeout = 10 * time.Second
	}
	c := &Conn{nc: nc, authority: authority, opts: opts, streams: map[uint32]*Stream{}, nextID: 1, done: make(chan struct{})}
	c.bw = bufio.NewWriterSize(nc, 16<<10)
	c.fr = http2.NewFramer(c.bw, bufio.NewReaderSize(nc, 32<<10))
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = 1 << 20
	c.henc = hpack.NewEncoder(&c.hbuf)
	err := c.write(func() error {
		if _, err := io.WriteString(c.bw, http2.ClientPreface); err != nil {
			return err
		}
		if err := c.fr.WriteSettings(
			http2.Setting{ID: http2.SettingEnablePush, Val: 0},
			http2.Setting{ID: http2.SettingInitialWindowSize, Val: streamWindow},
			http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 20},
		); err != nil {
			return err
		}
		return c.fr.WriteWindowUpdate(0, connWindow-65535)
	})
	if err != nil {
		nc.Close()
		return nil, err
	}
	go c.read()
	go c.keepalive()
	return c, nil
}

// write runs f with the writer held and flushes what it wrote.
func (c *Conn) write(f func() error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := f(); err != nil {
		return err
	}
	return c.bw.Flush()
}

// Done is closed when the connection has ended; Err then says why.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the connection ended (nil while it is up).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Usable reports whether new calls may be opened on the connection (it is
// up and the server did not send GOAWAY).
func (c *Conn) Usable() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err == nil && !c.goAway && c.nextID < maxStreamID
}

// Close ends the connection; its open calls end with ErrClosed.
func (c *Conn) Close() error {
	c.fail(ErrClosed)
	return nil
}

// fail ends the connection with err (the first error wins) and every
// call with it.
func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	streams := c.streams
	c.streams = nil
	close(c.done)
	c.mu.Unlock()
	c.nc.Close()
	for _, s := range streams {
		s.finish(err)
	}
}

// finish calls onEnd once an onMsg in progress has returned; no onMsg
// follows. Only the goroutine that took s from the map calls it.
func (s *Stream) finish(err error) {
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
	s.onEnd(err)
}

// deliver hands msg to onMsg unless the call has ended.
func (s *Stream) deliver(msg []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return nil
	}
	return s.onMsg(msg)
}

// Stream starts a call of method (the gRPC path, /package.Service/Method)
// with the serialized request req. onMsg is called with each message of
// the response, in order, on the connection's reader goroutine: while it
// runs no other call receives anything, and it may keep the slice. An
// error from it cancels the call. onEnd is called once when the call
// ends, after the last onMsg has returned, on whichever goroutine ended it:
// with the call's gRPC status error (io.EOF for status OK), a connection
// error, or context.Canceled after Cancel. Callbacks must not call the
// Conn's methods; onMsg must not wait for a Cancel.
func (c *Conn) Stream(method string, req []byte, onMsg func([]byte) error, onEnd func(error)) (*Stream, error) {
	if len(req)+5 > 65535 {
		// The server's initial window; larger requests would have to
		// wait for WINDOW_UPDATE, which this client does not track.
		return nil, fmt.Errorf("grpcstreams: a request of %d bytes is over 64 KB", len(req))
	}
	s := &Stream{c: c, onMsg: onMsg, onEnd: onEnd}
	c.mu.Lock()
	switch {
	case c.err != nil:
		c.mu.Unlock()
		return nil, c.err
	case c.goAway || c.nextID >= maxStreamID:
		c.mu.Unlock()
		return nil, status.Error(codes.Unavailable, "grpcstreams: the connection takes no new calls (GOAWAY)")
	}
	c.wmu.Lock() // stream IDs must reach the wire in order
	s.id = c.nextID
	c.nextID += 2
	c.streams[s.id] = s
	c.mu.Unlock()
	err := func() error {
		defer c.wmu.Unlock()
		c.hbuf.Reset()
		for _, f := range [][2]string{
			{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", c.authority},
			{"content-type", "application/grpc+proto"}, {"te", "trailers"}, {"user-agent", c.opts.UserAgent},
		} {
			if f[1] != "" {
				if err := c.henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
					return err
				}
			}
		}
		if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: s.id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true}); err != nil {
			return err
		}
		msg := make([]byte, 5+len(req))
		binary.BigEndian.PutUint32(msg[1:5], uint32(len(req)))
		copy(msg[5:], req)
		for len(msg) > 0 { // frames of at most HTTP/2's default size
			n := min(len(msg), 16384)
			if err := c.fr.WriteData(s.id, n == len(msg), msg[:n]); err != nil {
				return err
			}
			msg = msg[n:]
		}
		return c.bw.Flush()
	}()
	if err != nil {
		c.take(s.id) // the caller learns it from err, not onEnd
		c.fail(fmt.Errorf("grpcstreams: write: %w", err))
		return nil, err
	}
	return s, nil
}

// Cancel ends the call (RST_STREAM CANCEL); onEnd is called with
// context.Canceled unless the call had ended already.
func (s *Stream) Cancel() {
	if s.c.take(s.id) == nil {
		return
	}
	_ = s.c.write(func() error { return s.c.fr.WriteRSTStream(s.id, http2.ErrCodeCancel) })
	s.finish(context.Canceled)
}

// take removes call id and returns it (nil if it had ended): whoever
// takes a call ends it.
func (c *Conn) take(id uint32) *Stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.streams[id]
	delete(c.streams, id)
	return s
}

func (c *Conn) stream(id uint32) *Stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[id]
}

// end ends call s (if still open) with err, resetting it on the wire when
// the server has not ended it.
func (c *Conn) end(s *Stream, err error, reset bool) {
	if c.take(s.id) == nil {
		return
	}
	if reset {
		_ = c.write(func() error { return c.fr.WriteRSTStream(s.id, http2.ErrCodeCancel) })
	}
	s.finish(err)
}

// read is the connection's reader goroutine.
func (c *Conn) read() {
	connUnacked := 0
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				if s := c.stream(se.StreamID); s != nil {
					c.end(s, status.Errorf(codes.Internal, "grpcstreams: %v", se), true)
				}
				continue
			}
			c.fail(status.Errorf(codes.Unavailable, "grpcstreams: read: %v", err))
			return
		}
		c.mu.Lock()
		c.pingAt = time.Time{} // any frame shows the server is alive
		c.mu.Unlock()
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := c.write(func() error {
					if v, ok := f.Value(http2.SettingHeaderTableSize); ok {
						c.henc.SetMaxDynamicTableSizeLimit(v)
					}
					return c.fr.WriteSettingsAck()
				}); err != nil {
					c.fail(err)
					return
				}
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				if err := c.write(func() error { return c.fr.WritePing(true, f.Data) }); err != nil {
					c.fail(err)
					return
				}
			}
		case *http2.GoAwayFrame:
			c.goAwayFrom(f.LastStreamID, f.ErrCode)
		case *http2.RSTStreamFrame:
			if s := c.stream(f.StreamID); s != nil {
				c.end(s, status.Errorf(codes.Unavailable, "grpcstreams: stream reset by the server: %v", f.ErrCode), false)
			}
		case *http2.MetaHeadersFrame:
			if s := c.stream(f.StreamID); s != nil {
				c.onHeaders(s, f)
			}
		case *http2.DataFrame:
			n := int(f.Length)
			connUnacked += n
			if connUnacked >= connWindow/4 {
				incr := connUnacked
				connUnacked = 0
				if err := c.write(func() error { return c.fr.WriteWindowUpdate(0, uint32(incr)) }); err != nil {
					c.fail(err)
					return
				}
			}
			if s := c.stream(f.StreamID); s != nil {
				c.onData(s, f, n)
			}
		}
	}
}

// goAwayFrom: the server takes no new calls; those past lastID were not
// processed and end now (the others run to their end).
func (c *Conn) goAwayFrom(lastID uint32, code http2.ErrCode) {
	c.mu.Lock()
	c.goAway = true
	var gone []*Stream
	for id, s := range c.streams {
		if id > lastID {
			gone = append(gone, s)
		}
	}
	c.mu.Unlock()
	for _, s := range gone {
		c.end(s, status.Errorf(codes.Unavailable, "grpcstreams: the server is going away (%v)", code), false)
	}
}

// onHeaders handles the response headers, or the trailers that end the
// call (also a trailers-only response).
func (c *Conn) onHeaders(s *Stream, f *http2.MetaHeadersFrame) {
	if !s.headers {
		s.headers = true
		if st := f.PseudoValue("status"); st != "200" {
			c.end(s, status.Errorf(codes.Unavailable, "grpcstreams: HTTP status %q", st), !f.StreamEnded())
			return
		}
	}
	if !f.StreamEnded() {
		return
	}
	code, msg := codes.Unknown, "grpcstreams: the call ended without a grpc-status"
	for _, hf := range f.RegularFields() {
		switch hf.Name {
		case "grpc-status":
			if n, err := strconv.ParseUint(hf.Value, 10, 32); err == nil {
				code = codes.Code(n)
			}
		case "grpc-message":
			msg, _ = url.PathUnescape(hf.Value)
		}
	}
	if code == codes.OK {
		c.end(s, io.EOF, false)
		return
	}
	c.end(s, status.Error(code, msg), false)
}

// onData appends a DATA frame's payload to the call's buffer and hands
// over every message it completes.
func (c *Conn) onData(s *Stream, f *http2.DataFrame, n int) {
	s.unacked += n
	if s.unacked >= streamWindow/4 && !f.StreamEnded() {
		incr := s.unacked
		s.unacked = 0
		_ = c.write(func() error { return c.fr.WriteWindowUpdate(s.id, uint32(incr)) })
	}
	s.buf = append(s.buf, f.Data()...)
	for len(s.buf) >= 5 {
		if s.buf[0] != 0 {
			c.end(s, status.Error(codes.Internal, "grpcstreams: compressed message (none was accepted)"), true)
			return
		}
		size := binary.BigEndian.Uint32(s.buf[1:5])
		if size > maxMessage {
			c.end(s, status.Errorf(codes.ResourceExhausted, "grpcstreams: message of %d bytes", size), true)
			return
		}
		if len(s.buf) < 5+int(size) {
			break
		}
		msg := bytes.Clone(s.buf[5 : 5+size])
		s.buf = s.buf[5+size:]
		if err := s.deliver(msg); err != nil {
			c.end(s, err, true)
			return
		}
	}
	if len(s.buf) == 0 {
		s.buf = nil // release the buffer between messages
	}
	if f.StreamEnded() {
		c.end(s, status.Error(codes.Internal, "grpcstreams: the call ended without trailers"), false)
	}
}

// keepalive pings the server every opts.Keepalive while calls are open
// and fails the connection when no frame arrives within
// opts.KeepaliveTimeout of a ping (read clears pingAt on every frame).
func (c *Conn) keepalive() {
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-c.done:
			return false
		case <-t.C:
			return true
		}
	}
	for wait(c.opts.Keepalive) {
		c.mu.Lock()
		open := len(c.streams) > 0
		if open {
			c.pingAt = time.Now()
		}
		c.mu.Unlock()
		if !open {
			continue
		}
		if err := c.write(func() error { return c.fr.WritePing(false, [8]byte{'m', 'e', 's', 'h', 'f', 'e', 'd'}) }); err != nil {
			c.fail(status.Errorf(codes.Unavailable, "grpcstreams: ping: %v", err))
			return
		}
		if !wait(c.opts.KeepaliveTimeout) {
			return
		}
		c.mu.Lock()
		late := !c.pingAt.IsZero()
		c.mu.Unlock()
		if late {
			c.fail(status.Error(codes.Unavailable, "grpcstreams: keepalive ping not answered"))
			return
		}
	}
}
