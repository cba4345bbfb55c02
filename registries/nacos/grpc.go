package nacos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	nacospb "github.com/nacos-group/nacos-sdk-go/v2/api/grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshfed/meshfed/registries"
)

// clientVersion is what the registry calls itself in ConnectionSetupRequest.
const clientVersion = "Nacos-Go-Client:v2.3.5 meshfed"

// Nacos 2.x payload types (the Java class names of the messages).
const (
	typeServerCheck         = "ServerCheckRequest"
	typeConnectionSetup     = "ConnectionSetupRequest"
	typeHealthCheck         = "HealthCheckRequest"
	typeServiceList         = "ServiceListRequest"
	typeSubscribe           = "SubscribeServiceRequest"
	typeNotifySubscriber    = "NotifySubscriberRequest"
	typeNotifySubscriberAck = "NotifySubscriberResponse"
	typeClientDetection     = "ClientDetectionRequest"
	typeClientDetectionAck  = "ClientDetectionResponse"
	typeConnectReset        = "ConnectResetRequest"
	typeConnectResetAck     = "ConnectResetResponse"
	typeErrorResponse       = "ErrorResponse"
)

// response is the part every Nacos 2.x answer has.
type response struct {
	ResultCode int    `json:"resultCode"`
	ErrorCode  int    `json:"errorCode"`
	Message    string `json:"message"`
	RequestID  string `json:"requestId"`
}

type internalRequest struct {
	RequestID string `json:"requestId"`
	Module    string `json:"module"`
}

type connectionSetupRequest struct {
	internalRequest
	ClientVersion   string            `json:"clientVersion"`
	Tenant          string            `json:"tenant"`
	Labels          map[string]string `json:"labels"`
	ClientAbilities struct{}          `json:"clientAbilities"`
}

type namingRequest struct {
	RequestID   string `json:"requestId"`
	Module      string `json:"module"`
	Namespace   string `json:"namespace"`
	ServiceName string `json:"serviceName"`
	GroupName   string `json:"groupName"`
}

type serviceListRequest struct {
	namingRequest
	PageNo   int    `json:"pageNo"`
	PageSize int    `json:"pageSize"`
	Selector string `json:"selector"`
}

type subscribeRequest struct {
	namingRequest
	Subscribe bool   `json:"subscribe"`
	Clusters  string `json:"clusters"`
}

// notifyRequest is a push: a service's instance list after a change.
type notifyRequest struct {
	namingRequest
	ServiceInfo serviceInfo `json:"serviceInfo"`
}

// pushed is the newest push of one service not yet applied.
type pushed struct {
	info serviceInfo
	at   time.Time
}

// session is one gRPC connection to one Nacos server.
type session struct {
	r      *Registry
	cl     *client
	st     *state
	target string

	conn   *grpc.ClientConn
	req    nacospb.RequestClient
	stream nacospb.BiRequestStream_RequestBiStreamClient

	mu      sync.Mutex
	pending map[serviceKey]pushed
	signal  chan struct{} // one token: pending has something
	recvErr chan error    // the stream ended
}

var reqSeq atomic.Uint64

func nextID() string { return strconv.FormatUint(reqSeq.Add(1), 10) }

// watchGRPC connects to the first server that answers, reads the whole
// state, and then applies pushes and list changes until the connection
// fails; it returns that error.
func (r *Registry) watchGRPC(ctx context.Context, cl *client, st *state) error {
	n := len(r.cfg.Servers)
	var errs []error
	for attempt := range n {
		i := (cl.current + attempt) % n
		err := r.session(ctx, cl, st, i)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil || registries.IsPermanent(err) {
			return err
		}
		var se *sessionError
		if errors.As(err, &se) && se.synced {
			// The session ran: report its end, reconnect after backoff.
			return err
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// sessionError is the end of a session; synced says whether it got as far
// as publishing (a failure after that is an outage, not a bad server).
type sessionError struct {
	err    error
	synced bool
}

func (e *sessionError) Error() string { return e.err.Error() }
func (e *sessionError) Unwrap() error { return e.err }

func (r *Registry) session(ctx context.Context, cl *client, st *state, i int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &session{
		r: r, cl: cl, st: st, target: cl.grpcTarget(i),
		pending: map[serviceKey]pushed{},
		signal:  make(chan struct{}, 1),
		recvErr: make(chan error, 1),
	}
	if err := cl.login(ctx, i); err != nil {
		r.m.conn.Err.Inc()
		return st.permanentIfAuth(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel and conn.Close: the receiver has returned
	if err := s.connect(ctx, &wg); err != nil {
		r.m.conn.Err.Inc()
		if s.conn != nil {
			s.conn.Close()
		}
		return st.permanentIfAuth(err)
	}
	defer s.conn.Close()
	defer cancel()
	r.m.conn.OK.Inc()
	st.newSession()
	if cl.current != i {
		r.log.Info("nacos: connected to another server", "server", r.cfg.Servers[i])
	}
	cl.current = i
	if st.pub.Condition().Failing() || st.pub.Published() {
		r.m.reconnects.Inc()
	}

	if err := s.sync(ctx); err != nil {
		return st.permanentIfAuth(err)
	}
	listT := time.NewTicker(r.cfg.ListInterval.Std())
	defer listT.Stop()
	healthT := time.NewTicker(healthInterval)
	defer healthT.Stop()
	resyncT := time.NewTicker(r.cfg.ResyncInterval.Std())
	defer resyncT.Stop()
	fail := func(err error) error { return &sessionError{err: err, synced: true} }
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-s.recvErr:
			return fail(fmt.Errorf("nacos %s: stream ended: %s", s.target, grpcReason(err)))
		case <-s.signal:
			s.applyPending()
		case <-listT.C:
			if err := s.sync(ctx); err != nil {
				return fail(err)
			}
		case <-resyncT.C:
			if err := s.resync(ctx); err != nil {
				return fail(err)
			}
		case <-healthT.C:
			if err := cl.login(ctx, i); err != nil {
				return fail(err)
			}
			var ans response
			if err := s.call(ctx, typeHealthCheck, internalRequest{RequestID: nextID(), Module: "internal"}, "", &ans); err != nil {
				return fail(err)
			}
		}
	}
}

// connect dials, checks the server, opens the stream, sends the setup
// request and starts the receiver (counted in wg).
func (s *session) connect(ctx context.Context, wg *sync.WaitGroup) error {
	creds := insecure.NewCredentials()
	if s.cl.tls != nil {
		creds = credentials.NewTLS(s.cl.tls)
	}
	conn, err := grpc.NewClient(s.target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return fmt.Errorf("nacos %s: %v", s.target, err)
	}
	s.conn = conn
	s.req = nacospb.NewRequestClient(conn)
	var check struct {
		response
		ConnectionID string `json:"connectionId"`
	}
	if err := s.call(ctx, typeServerCheck, internalRequest{RequestID: nextID(), Module: "internal"}, "", &check); err != nil {
		return err
	}
	stream, err := nacospb.NewBiRequestStreamClient(conn).RequestBiStream(ctx)
	if err != nil {
		return fmt.Errorf("nacos %s: opening the stream: %s", s.target, grpcReason(err))
	}
	s.stream = stream
	setup := connectionSetupRequest{
		internalRequest: internalRequest{RequestID: nextID(), Module: "internal"},
		ClientVersion:   clientVersion,
		Tenant:          s.r.cfg.Namespace,
		Labels:          map[string]string{"source": "sdk", "module": "naming", "AppName": "meshfed"},
	}
	if err := s.send(typeConnectionSetup, setup, s.cl.authHeaders("")); err != nil {
		return fmt.Errorf("nacos %s: connection setup: %s", s.target, grpcReason(err))
	}
	wg.Go(s.receive)
	return nil
}

// send writes one payload on the stream. Only connect (before the
// receiver starts) and the receiver call it.
func (s *session) send(typ string, body any, headers map[string]string) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return s.stream.Send(&nacospb.Payload{
		Metadata: &nacospb.Metadata{Type: typ, Headers: headers},
		Body:     &anypb.Any{Value: b},
	})
}

// receive reads the stream until it ends: it acknowledges pushes and
// hands their service lists to the session loop, answers the server's
// liveness checks, and reports the end on recvErr.
func (s *session) receive() {
	for {
		p, err := s.stream.Recv()
		if err != nil {
			s.recvErr <- err
			return
		}
		typ := p.GetMetadata().GetType()
		body := p.GetBody().GetValue()
		var id struct {
			RequestID string `json:"requestId"`
		}
		_ = json.Unmarshal(body, &id)
		ack := response{ResultCode: 200, RequestID: id.RequestID}
		switch typ {
		case typeNotifySubscriber:
			var n notifyRequest
			if err := json.Unmarshal(body, &n); err != nil {
				s.r.log.Warn("nacos push is not the expected JSON", "err", err)
				ack.ResultCode, ack.ErrorCode, ack.Message = 500, 500, "bad push"
			} else {
				s.r.m.pushes.Inc()
				s.push(n)
			}
			err = s.send(typeNotifySubscriberAck, ack, nil)
		case typeClientDetection:
			err = s.send(typeClientDetectionAck, ack, nil)
		case typeConnectReset:
			_ = s.send(typeConnectResetAck, ack, nil)
			err = errors.New("server asked to reconnect (ConnectResetRequest)")
		default:
			s.r.log.Debug("nacos: ignoring a server request", "type", typ)
		}
		if err != nil {
			s.recvErr <- err
			return
		}
	}
}

// push records the newest instance list of a service for the loop.
func (s *session) push(n notifyRequest) {
	group := n.GroupName
	if group == "" {
		group = n.ServiceInfo.GroupName
	}
	name := n.ServiceName
	if name == "" {
		name = n.ServiceInfo.Name
	}
	if g, svc, ok := strings.Cut(name, "@@"); ok {
		group, name = g, svc
	}
	key := serviceKey{group: group, name: name}
	s.mu.Lock()
	s.pending[key] = pushed{info: n.ServiceInfo, at: time.Now()}
	s.mu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// applyPending applies every push received since the last call and
// publishes once.
func (s *session) applyPending() {
	s.mu.Lock()
	p := s.pending
	s.pending = map[serviceKey]pushed{}
	s.mu.Unlock()
	changed := false
	first := time.Time{}
	for key, v := range p {
		if !s.st.isSubscribed(key) {
			continue // unsubscribed meanwhile, or not ours
		}
		if s.st.set(key, v.info.Hosts, v.info.LastRefTime) {
			changed = true
		}
		if first.IsZero() || v.at.Before(first) {
			first = v.at
		}
	}
	if len(p) > 0 {
		s.st.publish(changed, first)
	}
}

// sync lists the services of every group, subscribes to the new ones
// (their answer is their instance list), unsubscribes from the gone ones,
// and publishes. On a session's first call every service is new, so the
// state is read anew in full; nothing is published if any step fails.
func (s *session) sync(ctx context.Context) error {
	lists := make([][]string, len(s.r.cfg.Groups))
	listed, known := 0, 0
	for i, group := range s.r.cfg.Groups {
		names, err := s.list(ctx, group)
		if err != nil {
			s.r.m.list.Err.Inc()
			return err
		}
		s.r.m.list.OK.Inc()
		lists[i] = names
		for _, name := range names {
			listed++
			if s.st.isSubscribed(serviceKey{group: group, name: name}) {
				known++
			}
		}
	}
	changed := false
	if known == listed && listed == len(s.st.held) {
		// Every service listed is subscribed and none is held besides
		// them (names are distinct): nothing came or went, so no set of
		// the names is built and nothing held is walked.
		s.applyPendingInto(&changed)
		s.st.publish(changed, time.Now())
		return nil
	}
	keep := make(map[serviceKey]bool, listed)
	for i, group := range s.r.cfg.Groups {
		for _, name := range lists[i] {
			keep[serviceKey{group: group, name: name}] = true
		}
	}
	at := time.Now()
	for key := range keep {
		if s.st.isSubscribed(key) {
			continue
		}
		info, err := s.subscribe(ctx, key, true)
		if err != nil {
			s.r.m.sub.Err.Inc()
			return err
		}
		s.r.m.sub.OK.Inc()
		s.st.subscribed(key)
		if s.st.set(key, info.Hosts, info.LastRefTime) {
			changed = true
		}
		at = time.Now()
	}
	for key, h := range s.st.held {
		if h.session == s.st.session && !keep[key] {
			if _, err := s.subscribe(ctx, key, false); err != nil {
				s.r.log.Debug("nacos unsubscribe failed", "service", key.String(), "err", err)
			}
		}
	}
	if s.st.retain(keep) {
		changed = true
	}
	// Pushes that arrived while subscribing are at least as new as the
	// answers (older ones are ignored by their lastRefTime).
	s.applyPendingInto(&changed)
	s.st.publish(changed, at)
	return nil
}

// resync reads every subscribed service again (subscribing again is
// idempotent) and publishes what changed: the repair for lost pushes.
func (s *session) resync(ctx context.Context) error {
	changed := false
	at := time.Now()
	for key, h := range s.st.held {
		if h.session != s.st.session {
			continue
		}
		info, err := s.subscribe(ctx, key, true)
		if err != nil {
			s.r.m.sub.Err.Inc()
			return err
		}
		s.r.m.sub.OK.Inc()
		if s.st.set(key, info.Hosts, info.LastRefTime) {
			changed = true
			s.r.m.repairs.Inc()
			s.r.log.Info("nacos resync found a change no push had brought", "service", key.String())
		}
	}
	s.applyPendingInto(&changed)
	s.st.publish(changed, at)
	return nil
}

// applyPendingInto applies pending pushes without publishing.
func (s *session) applyPendingInto(changed *bool) {
	s.mu.Lock()
	p := s.pending
	s.pending = map[serviceKey]pushed{}
	s.mu.Unlock()
	for key, v := range p {
		if s.st.isSubscribed(key) && s.st.set(key, v.info.Hosts, v.info.LastRefTime) {
			*changed = true
		}
	}
}

// list returns the wanted service names of a group, all pages.
func (s *session) list(ctx context.Context, group string) ([]string, error) {
	return listAll(s.r.cfg.wanted, s.st.wholeList(group), func(pageNo, pageSize int) ([]string, int, error) {
		req := serviceListRequest{
			namingRequest: namingRequest{RequestID: nextID(), Module: "naming", Namespace: s.r.cfg.Namespace, GroupName: group},
			PageNo:        pageNo, PageSize: pageSize,
		}
		var ans struct {
			response
			Count        int      `json:"count"`
			ServiceNames []string `json:"serviceNames"`
		}
		err := s.call(ctx, typeServiceList, req, "", &ans)
		return ans.ServiceNames, ans.Count, err
	})
}

// subscribe (or unsubscribes from) a service; the answer is its
// instance list.
func (s *session) subscribe(ctx context.Context, key serviceKey, on bool) (*serviceInfo, error) {
	req := subscribeRequest{
		namingRequest: namingRequest{RequestID: nextID(), Module: "naming", Namespace: s.r.cfg.Namespace, ServiceName: key.name, GroupName: key.group},
		Subscribe:     on,
	}
	var ans struct {
		response
		ServiceInfo serviceInfo `json:"serviceInfo"`
	}
	if err := s.call(ctx, typeSubscribe, req, key.String(), &ans); err != nil {
		return nil, err
	}
	return &ans.ServiceInfo, nil
}

// call sends one unary request and decodes the answer into out, which
// must embed response.
func (s *session) call(ctx context.Context, typ string, body any, resource string, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.r.cfg.Timeout.Std())
	defer cancel()
	ans, err := s.req.Request(ctx, &nacospb.Payload{
		Metadata: &nacospb.Metadata{Type: typ, Headers: s.cl.authHeaders(resource)},
		Body:     &anypb.Any{Value: b},
	})
	if err != nil {
		return fmt.Errorf("nacos %s: %s: %s", s.target, typ, grpcReason(err))
	}
	raw := ans.GetBody().GetValue()
	var base response
	if err := json.Unmarshal(raw, &base); err != nil {
		return fmt.Errorf("nacos %s: %s: answer is not JSON: %v", s.target, typ, err)
	}
	if ans.GetMetadata().GetType() == typeErrorResponse || (base.ResultCode != 0 && base.ResultCode != 200) {
		msg := fmt.Sprintf("nacos %s: %s: error %d: %s", s.target, typ, base.ErrorCode, base.Message)
		if base.ErrorCode == 401 || base.ErrorCode == 403 {
			return &authError{msg: msg}
		}
		return errors.New(msg)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("nacos %s: %s: answer is not the expected JSON: %v", s.target, typ, err)
	}
	return nil
}

// grpcReason is a gRPC error's message without the status wrapping.
func grpcReason(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Code().String() + ": " + st.Message()
	}
	return err.Error()
}
