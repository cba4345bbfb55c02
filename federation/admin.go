package federation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/xds"
	"github.com/meshfed/meshfed/xds/ads"
)

// RegistryHealth is one registry on /healthz/registries.
type RegistryHealth struct {
	aggregate.RegistryStatus
	Restarts int `json:"restarts"`
}

// ProxySync is one proxy on /debug/syncz.
type ProxySync = ads.ProxyStatus

// ServiceInfo is one merged service on /debug/registryz.
type ServiceInfo struct {
	Host       string     `json:"host"`
	Resolution string     `json:"resolution"`
	Ports      []PortInfo `json:"ports"`
	Sources    []string   `json:"sources"`
	Endpoints  int        `json:"endpoints"`
	// Restored: some of its sources serve a state restored from state.dir
	// at start and have not synced since.
	Restored bool `json:"restored,omitempty"`
}

// PortInfo is a service port on /debug/registryz.
type PortInfo struct {
	Name     string `json:"name"`
	Port     uint32 `json:"port"`
	Protocol string `json:"protocol"`
}

// EndpointInfo is one endpoint on /debug/endpointz.
type EndpointInfo struct {
	Address  string            `json:"address"`
	Ports    map[string]uint32 `json:"ports"` // by service port name
	Health   string            `json:"health"`
	Weight   uint32            `json:"weight"`
	Locality string            `json:"locality,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Registry string            `json:"registry"`
	Cluster  string            `json:"cluster,omitempty"`
	Network  string            `json:"network,omitempty"`
}

// Handler serves the admin API and the status page (docs/architecture.md,
// admin API) behind the access policy of admin: (adminGuard). Every route
// names its method; the mux answers 405 to others.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", g.readyz)
	mux.HandleFunc("GET /healthz/registries", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, g.RegistryHealth())
	})
	mux.HandleFunc("GET /healthz/registries/{name}", g.registryHealth)
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.metrics, promhttp.HandlerOpts{}))

	mux.HandleFunc("GET /{$}", g.statusPage)
	mux.HandleFunc("GET /registries/{name}", g.registryPage)
	mux.Handle("GET /static/", staticHandler())
	mux.HandleFunc("GET /login", g.guard.loginForm)
	mux.HandleFunc("POST /login", g.guard.login)

	mux.HandleFunc("GET /debug/registryz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, g.ServiceInfos())
	})
	mux.HandleFunc("POST /debug/registries/{name}/release", g.release)
	mux.HandleFunc("GET /debug/endpointz", g.endpointz)
	mux.HandleFunc("GET /debug/conflictz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, g.Conflicts())
	})
	mux.HandleFunc("GET /debug/configz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, g.Configz())
	})
	mux.HandleFunc("GET /debug/syncz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, nonNil(g.xds.Proxies()))
	})
	mux.HandleFunc("GET /debug/config_dump", g.configDump)
	mux.HandleFunc("GET /debug/digestz", g.digestz)
	mux.HandleFunc("GET /debug/loglevel", g.getLogLevel)
	mux.HandleFunc("PUT /debug/loglevel", g.setLogLevel)
	if g.config().Admin.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return g.guard.wrap(mux)
}

// getLogLevel answers {"level": "INFO"}.
func (g *Gateway) getLogLevel(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"level": levelName(g.level.Level())})
}

// setLogLevel sets the level of every logger of the process from
// ?level= or a JSON body {"level": "debug"}: trace, debug, info, warn or
// error. It answers the new level.
func (g *Gateway) setLogLevel(w http.ResponseWriter, r *http.Request) {
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
	old := g.level.Level()
	g.level.Set(lv)
	g.log.Info("log level changed", "level", levelName(lv), "was", levelName(old))
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
func (g *Gateway) RegistryHealth() []RegistryHealth {
	sts := g.agg.Registries()
	out := make([]RegistryHealth, 0, len(sts))
	for _, st := range sts {
		h := RegistryHealth{RegistryStatus: st}
		if r, ok := g.runner(st.Name); ok {
			h.Restarts = r.Restarts()
		}
		out = append(out, h)
	}
	return out
}

// readyz answers 503 while the process cannot serve a complete model, 200
// otherwise. A failed reload of clusters.yaml does not make it unready
// (the running configuration keeps serving; taking the pod out of its
// Service for a typo would hurt more than it tells): the answer stays 200
// and carries the reload's error in "reason" and "reload".
func (g *Gateway) readyz(w http.ResponseWriter, _ *http.Request) {
	reason := ""
	switch ok, why := g.agg.Ready(); {
	case g.draining.Load():
		reason = "draining"
	case !g.serving.Load():
		reason = "xDS server not serving yet"
		if g.traffic != nil {
			if ok, why := g.traffic.Ready(); !ok {
				reason += ": " + why
			}
		}
	case !ok:
		reason = why
	}
	body := map[string]any{"ready": reason == ""}
	code := http.StatusOK
	if reason != "" {
		code = http.StatusServiceUnavailable
	} else if notes := g.trafficNotes(); notes != "" {
		// Ready without some config source's rules: say which and why.
		reason = "serving without " + notes
	}
	if rl := g.LastReload(); rl != nil {
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
func (g *Gateway) release(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ctx, cancel := context.WithTimeout(r.Context(), releaseTimeout)
	defer cancel()
	st, err := g.agg.Release(ctx, name)
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
	g.log.Warn("held-down update released by an operator", "registry", name, "remote", r.RemoteAddr)
	h := RegistryHealth{RegistryStatus: st}
	if rr, ok := g.runner(name); ok {
		h.Restarts = rr.Restarts()
	}
	writeJSON(w, http.StatusOK, h)
}

// releaseTimeout bounds how long a release waits for the aggregator to
// apply it.
const releaseTimeout = 10 * time.Second

func (g *Gateway) registryHealth(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	for _, h := range g.RegistryHealth() {
		if h.Name != name {
			continue
		}
		code := http.StatusOK
		if h.State != registries.Synced {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, h)
		return
	}
	writeJSON(w, http.StatusNotFound, map[string]string{"error": "no registry named " + strconv.Quote(name)})
}

// Conflicts lists everything kept from proxies: what the aggregator
// rejected or quarantined, then what translation could not serve.
func (g *Gateway) Conflicts() []aggregate.Conflict {
	out := nonNil(g.agg.Conflicts())
	for _, s := range g.xds.Skipped() {
		out = append(out, aggregate.Conflict{
			Rejection: model.Rejection{Host: s.Host, Subject: "port " + strconv.FormatUint(uint64(s.Port), 10), Reason: s.Reason},
			Category:  CategoryXDSSkipped,
		})
	}
	for _, i := range g.xds.Invalid() {
		out = append(out, aggregate.Conflict{
			Rejection: model.Rejection{Host: i.Host, Reason: i.Error},
			Category:  CategoryXDSInvalid,
		})
	}
	return out
}

// Conflict categories added by the xDS translation, beside the aggregator's.
const (
	CategoryXDSSkipped = "xds-skipped" // a TCP port another service owns on Envoy listeners
	CategoryXDSInvalid = "xds-invalid" // resources that failed validation; the service is not served
)

// ServiceInfos is /debug/registryz: the merged services of the current
// snapshot.
func (g *Gateway) ServiceInfos() []ServiceInfo {
	restored := map[string]bool{}
	for _, st := range g.agg.Registries() {
		restored[st.Name] = st.Restored
	}
	return serviceInfos(g.agg.Snapshot(), restored)
}

func serviceInfos(snap *model.Snapshot, restored map[string]bool) []ServiceInfo {
	out := make([]ServiceInfo, 0, snap.Len())
	for _, s := range snap.Services() {
		info := ServiceInfo{
			Host:       s.Hostname,
			Resolution: s.Resolution.String(),
			Sources:    nonNil(s.Sources),
			Endpoints:  len(s.Endpoints),
			Restored:   slices.ContainsFunc(s.Sources, func(n string) bool { return restored[n] }),
		}
		for _, p := range s.Ports {
			info.Ports = append(info.Ports, PortInfo{Name: p.Name, Port: p.Number, Protocol: string(p.Protocol)})
		}
		out = append(out, info)
	}
	return out
}

func (g *Gateway) endpointz(w http.ResponseWriter, r *http.Request) {
	host := r.URL.Query().Get("host")
	if host == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "missing ?host=; /debug/registryz lists the hosts"})
		return
	}
	svc, ok := g.agg.Snapshot().Service(host)
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no service " + strconv.Quote(host)})
		return
	}
	out := make([]EndpointInfo, 0, len(svc.Endpoints))
	for i := range svc.Endpoints {
		e := &svc.Endpoints[i]
		ports := make(map[string]uint32, len(svc.Ports))
		for _, p := range svc.Ports {
			if n, ok := e.PortFor(p); ok {
				ports[p.Name] = n
			}
		}
		out = append(out, EndpointInfo{
			Address:  e.Address,
			Ports:    ports,
			Health:   e.Health.String(),
			Weight:   e.Weight,
			Locality: e.Locality.String(),
			Labels:   e.Labels,
			Registry: e.Source.Registry,
			Cluster:  e.Source.Cluster,
			Network:  e.Source.Network,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

func (g *Gateway) configDump(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("proxy")
	if id == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "missing ?proxy=; /debug/syncz lists the proxies"})
		return
	}
	dump, ok := g.xds.ConfigDump(id)
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no connected proxy " + strconv.Quote(id)})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(dump)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// nonNil makes empty lists encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
