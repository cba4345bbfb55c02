package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/explain"
	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds"
	"github.com/meshfed/meshfed/xds/ads"
	"github.com/meshfed/meshfed/xds/translate"
)

// RegistryHealth is one registry on /healthz/registries.
type RegistryHealth struct {
	aggregate.RegistryStatus
	Restarts int `json:"restarts"`
}

// ProxySync is one proxy on /debug/syncz.
type ProxySync = ads.ProxyStatus

// ServiceInfo is one merged service on /debug/registryz, PortInfo one of
// its ports, EndpointInfo one endpoint on /debug/endpointz: package
// explain's, which builds them.
type (
	ServiceInfo  = explain.ServiceInfo
	PortInfo     = explain.PortInfo
	EndpointInfo = explain.EndpointInfo
)

// DigestInfo is the answer of GET /debug/digestz: a content digest of the
// served snapshot, overall and per registry (hex SHA-256). Replicas that
// read the same registries agree on every digest once they have caught up,
// whatever their Version; `meshfed status --admin A --admin B` compares
// them. A registry that contributes no service has model.EmptyDigest.
type DigestInfo struct {
	Version    uint64            `json:"version"` // the snapshot's version (differs between replicas)
	Overall    string            `json:"overall"`
	Registries map[string]string `json:"registries"`
}

// Configz is /debug/configz: the traffic objects in force and rejected
// (istioconfig.Status), and what of the objects in force a client kind is
// not sent because it does not implement it (docs/architecture.md §3.6).
type Configz struct {
	istioconfig.Status
	// NotForClients lists, per host, parts of the rules in force that a
	// client kind does not get: proxyless gRPC (TLS origination from files,
	// cookie hashing, rewrites...), and Envoy (matches on the calling
	// workload's labels).
	NotForClients []translate.TrafficNote `json:"notForClients"`
	// Specs holds the spec of every object in force, each named by kind,
	// namespace and name as in InForce (`meshfed describe HOST` reads the
	// rules of a host here).
	Specs []ObjectSpec `json:"specs"`
}

// ObjectSpec is the spec of one traffic object in force on /debug/configz:
// its istio.io/api message in protojson, as .spec of `kubectl get -o json`.
type ObjectSpec struct {
	Kind      string          `json:"kind"`
	Namespace string          `json:"namespace"`
	Name      string          `json:"name"`
	Spec      json.RawMessage `json:"spec"`
}

// ObjectSpecs returns the specs of objs for Configz.Specs; an object whose
// spec is no proto message (none in force is) gets a null spec.
func ObjectSpecs(objs []*model.ConfigObject) []ObjectSpec {
	out := make([]ObjectSpec, 0, len(objs))
	for _, o := range objs {
		spec := json.RawMessage("null")
		if m, ok := o.Spec.(proto.Message); ok {
			if b, err := protojson.Marshal(m); err == nil {
				spec = b
			}
		}
		out = append(out, ObjectSpec{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Spec: spec})
	}
	return out
}

// ReloadStatus is the outcome of the last reload of clusters.yaml (SIGHUP),
// shown on /readyz.
type ReloadStatus struct {
	At   time.Time `json:"at"`
	Path string    `json:"path"`
	OK   bool      `json:"ok"`
	// Error says why the file was not applied; the previous configuration
	// keeps running.
	Error string `json:"error,omitempty"`
	// Kept lists settings that changed in the file but need a restart
	// (listeners, debounce, syncTimeout, state); the running values stay.
	Kept []string `json:"restartNeeded,omitempty"`
}

// Handler serves the admin API and the status page (docs/architecture.md,
// admin API) behind the access policy of admin: (adminGuard). Every route
// names its method; the mux answers 405 to others.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("GET /healthz/registries", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.RegistryHealth())
	})
	mux.HandleFunc("GET /healthz/registries/{name}", s.registryHealth)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.gw.Metrics(), promhttp.HandlerOpts{}))

	mux.HandleFunc("GET /{$}", s.statusPage)
	mux.HandleFunc("GET /registries/{name}", s.registryPage)
	mux.HandleFunc("GET /hosts/{host}", s.hostPage)
	mux.Handle("GET /static/", staticHandler())
	mux.HandleFunc("GET /login", s.guard.loginForm)
	mux.HandleFunc("POST /login", s.guard.login)

	mux.HandleFunc("GET /debug/registryz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.ServiceInfos())
	})
	mux.HandleFunc("POST /debug/registries/{name}/release", s.release)
	mux.HandleFunc("GET /debug/endpointz", s.endpointz)
	mux.HandleFunc("GET /debug/describez", s.describez)
	mux.HandleFunc("GET /debug/conflictz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.gw.Conflicts())
	})
	mux.HandleFunc("GET /debug/configz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.gw.Configz())
	})
	mux.HandleFunc("GET /debug/syncz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, nonNil(s.gw.Proxies()))
	})
	mux.HandleFunc("GET /debug/config_dump", s.configDump)
	mux.HandleFunc("GET /debug/digestz", s.digestz)
	mux.HandleFunc("GET /debug/loglevel", s.getLogLevel)
	mux.HandleFunc("PUT /debug/loglevel", s.setLogLevel)
	if s.pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return s.guard.wrap(jsonErrors{mux})
}

// jsonErrors answers the mux's own errors, 404 for a path no route serves
// and 405 for a method a route does not take, in JSON ({"error": ...}) like
// every other admin answer; the mux's Allow header stays.
type jsonErrors struct{ mux *http.ServeMux }

func (j jsonErrors) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h, pattern := j.mux.Handler(r)
	if pattern != "" {
		j.mux.ServeHTTP(w, r)
		return
	}
	h.ServeHTTP(&errorJSONWriter{ResponseWriter: w, r: r}, r)
}

// errorJSONWriter replaces the plain-text body of a 404 or 405 with JSON.
type errorJSONWriter struct {
	http.ResponseWriter
	r       *http.Request
	replace bool
}

func (e *errorJSONWriter) WriteHeader(code int) {
	var msg string
	switch code {
	case http.StatusMethodNotAllowed:
		msg = fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", e.r.Method, e.r.URL.Path, e.Header().Get("Allow"))
	case http.StatusNotFound:
		msg = "no admin endpoint " + strconv.Quote(e.r.URL.Path)
	default:
		e.ResponseWriter.WriteHeader(code)
		return
	}
	e.replace = true
	writeJSON(e.ResponseWriter, code, map[string]string{"error": msg})
}

func (e *errorJSONWriter) Write(b []byte) (int, error) {
	if e.replace {
		return len(b), nil // the mux's plain text, replaced
	}
	return e.ResponseWriter.Write(b)
}

// getLogLevel answers {"level": "INFO"}.
func (s *Server) getLogLevel(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"level": levelName(s.level.Level())})
}

// setLogLevel sets the level of every logger of the process from
// ?level= or a JSON body {"level": "debug"}: trace, debug, info, warn or
// error. It answers the new level.
func (s *Server) setLogLevel(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("level")
	if name == "" {
		var body struct {
			Level string `json:"level"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 1024)).Decode(&body); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want ?level= or a JSON body {\"level\": \"debug\"}"})
			return
		}
		name = body.Level
	}
	lv, err := ParseLevel(name)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	old := s.level.Level()
	s.level.Set(lv)
	s.log.Info("log level changed", "level", levelName(lv), "was", levelName(old))
	writeJSON(w, http.StatusOK, map[string]string{"level": levelName(lv)})
}

// ParseLevel reads trace, debug, info, warn or error (any case).
func ParseLevel(s string) (slog.Level, error) {
	if strings.EqualFold(s, "trace") {
		return xds.LevelTrace, nil
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("log level %q: want trace, debug, info, warn or error", s)
	}
	return lv, nil
}

func levelName(l slog.Level) string {
	if l == xds.LevelTrace {
		return "TRACE"
	}
	return l.String()
}

// RegistryHealth returns every registry's status with its restart count.
func (s *Server) RegistryHealth() []RegistryHealth {
	sts := s.gw.Registries()
	out := make([]RegistryHealth, 0, len(sts))
	for _, st := range sts {
		h := RegistryHealth{RegistryStatus: st, Restarts: s.gw.Restarts(st.Name)}
		out = append(out, h)
	}
	return out
}

// readyz answers 503 while the process cannot serve a complete model, 200
// otherwise. A failed reload of clusters.yaml does not make it unready
// (the running configuration keeps serving; taking the pod out of its
// Service for a typo would hurt more than it tells): the answer stays 200
// and carries the reload's error in "reason" and "reload".
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	reason := ""
	switch ok, why := s.gw.Ready(); {
	case s.gw.Draining():
		reason = "draining"
	case !s.gw.Serving():
		reason = "xDS server not serving yet"
		if ok, why := s.gw.TrafficReady(); !ok {
			reason += ": " + why
		}
	case !ok:
		reason = why
	}
	body := map[string]any{"ready": reason == ""}
	code := http.StatusOK
	if reason != "" {
		code = http.StatusServiceUnavailable
	} else if notes := s.gw.TrafficNotes(); notes != "" {
		// Ready without some config source's rules: say which and why.
		reason = "serving without " + notes
	}
	if rl := s.gw.LastReload(); rl != nil {
		body["reload"] = rl
		if !rl.OK {
			msg := "clusters.yaml reload failed; running the previous configuration: " + rl.Error
			if reason != "" {
				reason += "; " + msg
			} else {
				reason = msg
			}
		}
	}
	if reason != "" {
		body["reason"] = reason
	}
	writeJSON(w, code, body)
}

// release applies a registry's held-down update now (POST
// /debug/registries/{name}/release): 200 with the registry's JSON, 404 for
// an unknown name, 409 when nothing is held.
func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ctx, cancel := context.WithTimeout(r.Context(), releaseTimeout)
	defer cancel()
	st, err := s.gw.Release(ctx, name)
	switch {
	case errors.Is(err, aggregate.ErrUnknownRegistry):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no registry named " + strconv.Quote(name)})
		return
	case errors.Is(err, aggregate.ErrNothingHeld):
		writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
		return
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "release not applied yet: " + err.Error()})
		return
	}
	s.log.Warn("held-down update released by an operator", "registry", name, "remote", r.RemoteAddr)
	h := RegistryHealth{RegistryStatus: st, Restarts: s.gw.Restarts(name)}
	writeJSON(w, http.StatusOK, h)
}

// releaseTimeout bounds how long a release waits for the aggregator to
// apply it.
const releaseTimeout = 10 * time.Second

func (s *Server) registryHealth(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	for _, h := range s.RegistryHealth() {
		if h.Name != name {
			continue
		}
		code := http.StatusOK
		if h.State != aggregate.Synced {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, h)
		return
	}
	writeJSON(w, http.StatusNotFound, map[string]string{"error": "no registry named " + strconv.Quote(name)})
}

// ServiceInfos is /debug/registryz: the merged services of the current
// snapshot.
func (s *Server) ServiceInfos() []ServiceInfo {
	restored := map[string]bool{}
	for _, st := range s.gw.Registries() {
		restored[st.Name] = st.Restored
	}
	return serviceInfos(s.gw.Snapshot(), restored)
}

func serviceInfos(snap *model.Snapshot, restored map[string]bool) []ServiceInfo {
	return explain.Services(snap, restored)
}

func (s *Server) endpointz(w http.ResponseWriter, r *http.Request) {
	host := r.URL.Query().Get("host")
	if host == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "missing ?host=; /debug/registryz lists the hosts"})
		return
	}
	svc, ok := s.gw.Snapshot().Service(host)
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no service " + strconv.Quote(host)})
		return
	}
	writeJSON(w, http.StatusOK, explain.Endpoints(svc))
}

// explainInput is what package explain reads of the gateway now.
func (s *Server) explainInput() explain.Input {
	cz := s.gw.Configz()
	return explain.Input{Snapshot: s.gw.Snapshot(), Registries: s.gw.Registries(), Conflicts: s.gw.Conflicts(),
		Rules: cz.Status, NotForClients: cz.NotForClients}
}

// describe explains host, and with addr != "" that endpoint of it
// (explain.Describe, explain.Explain).
func (s *Server) describe(host, addr string) (*explain.Description, error) {
	in := s.explainInput()
	d, err := explain.Describe(in, host)
	if err != nil || addr == "" {
		return d, err
	}
	if d.Endpoint, err = explain.Explain(in, host, addr); err != nil {
		return nil, err
	}
	return d, nil
}

// describez answers GET /debug/describez?host=H[&endpoint=ADDR]: the
// explanation of a host (explain.Description), with why endpoint ADDR
// (an IP or IP:port) is or is not in each kind of client's EDS; 404 with
// a did-you-mean for a host or endpoint that is not served.
func (s *Server) describez(w http.ResponseWriter, r *http.Request) {
	host := r.URL.Query().Get("host")
	if host == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "missing ?host=; /debug/registryz lists the hosts"})
		return
	}
	d, err := s.describe(host, r.URL.Query().Get("endpoint"))
	var nf *explain.NotFoundError
	switch {
	case errors.As(err, &nf):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
	case err != nil:
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
	default:
		writeJSON(w, http.StatusOK, d)
	}
}

func (s *Server) configDump(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("proxy")
	if id == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "missing ?proxy=; /debug/syncz lists the proxies"})
		return
	}
	dump, ok := s.gw.ConfigDump(id)
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no connected proxy " + strconv.Quote(id)})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(dump)
}

func (s *Server) digestz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.gw.Digest())
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // an API, not HTML: reasons keep their > and &
	_ = enc.Encode(v)
}

// nonNil makes empty lists encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
