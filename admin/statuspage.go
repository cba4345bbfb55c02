package admin

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/explain"
	"github.com/meshfed/meshfed/xds/ads"
	"github.com/meshfed/meshfed/xds/translate"
)

// The status page (GET /) and the per-registry page (GET /registries/{name})
// are rendered on the server from the data the debug API serves, with
// embedded templates and assets: no external fetch, no client framework,
// one template execution per request. They refresh themselves every
// pageRefresh.

//go:embed ui
var uiFS embed.FS

const pageRefresh = 5 // seconds

var pageTmpl = template.Must(template.New("").Funcs(template.FuncMap{
	"ago":       pageAgo,
	"stateCls":  stateClass,
	"lower":     strings.ToLower,
	"rfc3339":   func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"shortType": translate.ShortType,
	"labels":    explain.LabelString,
	"join":      strings.Join,
	"hasWild":   func(h string) bool { return strings.Contains(h, "*") },
}).ParseFS(uiFS, "ui/*.html"))

// RegistryReport is one registry as /healthz/registries reports it. The page
// and the CLI decode it from the JSON, so fields that the health API
// gains show up without a change here.
type RegistryReport struct {
	Name      string    `json:"name"`
	Kind      string    `json:"kind"`
	Domain    string    `json:"domain,omitempty"`
	State     string    `json:"state"`
	Since     time.Time `json:"since,omitzero"`
	LastSync  time.Time `json:"lastSync,omitzero"`
	LastError string    `json:"lastError,omitempty"`
	Services  int       `json:"services"`
	Endpoints int       `json:"endpoints"`
	Restarts  int       `json:"restarts"`
	Withdrawn bool      `json:"withdrawn,omitempty"`
	HeldDown  bool      `json:"heldDown,omitempty"`
	// Restored: the state served was restored from disk at start and not
	// yet confirmed by the backend.
	Restored bool `json:"restored,omitempty"`
	// Hold is the update held back by maxDeleteRatio, if any.
	Hold *HoldReport `json:"hold,omitempty"`
}

// HoldReport is a held update: served and pending endpoint counts, since
// when, and why.
type HoldReport struct {
	Since   time.Time `json:"since"`
	Served  int       `json:"served"`
	Pending int       `json:"pending"`
	Reason  string    `json:"reason,omitempty"`
}

// Reports returns RegistryHealth in its JSON form (see RegistryReport).
func (s *Server) Reports() []RegistryReport {
	var out []RegistryReport
	b, err := json.Marshal(s.RegistryHealth())
	if err == nil {
		err = json.Unmarshal(b, &out)
	}
	if err != nil {
		s.log.Error("status page: registry health does not round-trip", "error", err)
	}
	return out
}

type pageData struct {
	Version     string
	Now         time.Time
	Refresh     int
	XDSVersion  uint64
	Ready       bool
	ReadyReason string
	Registries  []RegistryReport
	Conflicts   []aggregate.Conflict
	Proxies     []proxyRow
	Types       []string
	// Rules is /debug/configz: the config sources, the objects in force
	// and those rejected.
	Rules Configz
	// Registry page only.
	Registry *RegistryReport
	Services []ServiceInfo
	// Host page only: the explanation of HostName (with the endpoint
	// Query asks about), or why there is none.
	HostName  string
	Query     string
	Host      *explain.Description
	HostError string
}

type proxyRow struct {
	ads.ProxyStatus
	Cells    []proxyCell // one per pageData.Types
	Nacking  bool
	LastNack *ads.Nack
	NackType string
}

type proxyCell struct {
	State string
	Sent  string
	Acked string
}

var proxyTypes = []string{translate.ClusterType, translate.EndpointType, translate.ListenerType, translate.RouteType}

// ProxyRows is proxies one row each, with a column per served type.
func proxyRows(ps []ads.ProxyStatus) []proxyRow {
	out := make([]proxyRow, 0, len(ps))
	for _, p := range ps {
		r := proxyRow{ProxyStatus: p, Cells: make([]proxyCell, len(proxyTypes))}
		for _, t := range p.Types {
			st := ads.SyncState(t)
			if i := slices.Index(proxyTypes, t.TypeURL); i >= 0 {
				r.Cells[i] = proxyCell{State: st, Sent: t.SentVersion, Acked: t.AckedVersion}
			}
			if st == ads.StateNacked {
				r.Nacking = true
			}
			if t.LastNack != nil && (r.LastNack == nil || t.LastNack.At.After(r.LastNack.At)) {
				r.LastNack, r.NackType = t.LastNack, translate.ShortType(t.TypeURL)
			}
		}
		out = append(out, r)
	}
	return out
}

func (s *Server) pageData() *pageData {
	ok, why := s.gw.Ready()
	d := &pageData{
		Version:     s.version,
		Now:         time.Now(),
		Refresh:     pageRefresh,
		XDSVersion:  s.gw.XDSVersion(),
		Ready:       ok && s.gw.Serving() && !s.gw.Draining(),
		ReadyReason: why,
		Registries:  s.Reports(),
		Conflicts:   s.gw.Conflicts(),
		Proxies:     proxyRows(s.gw.Proxies()),
		Rules:       s.gw.Configz(),
	}
	for _, t := range proxyTypes {
		d.Types = append(d.Types, translate.ShortType(t))
	}
	if !d.Ready && d.ReadyReason == "" {
		d.ReadyReason = "xDS not serving"
	}
	return d
}

func (s *Server) statusPage(w http.ResponseWriter, _ *http.Request) {
	s.render(w, http.StatusOK, "index.html", s.pageData())
}

func (s *Server) registryPage(w http.ResponseWriter, r *http.Request) {
	d := s.pageData()
	name := r.PathValue("name")
	for i := range d.Registries {
		if d.Registries[i].Name == name {
			d.Registry = &d.Registries[i]
		}
	}
	if d.Registry == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no registry named " + strconv.Quote(name)})
		return
	}
	d.Registries = []RegistryReport{*d.Registry}
	d.Registry = &d.Registries[0]
	for _, si := range s.ServiceInfos() {
		if slices.Contains(si.Sources, name) {
			d.Services = append(d.Services, si)
		}
	}
	var cs []aggregate.Conflict
	for _, c := range d.Conflicts {
		if c.Registry == name {
			cs = append(cs, c)
		}
	}
	d.Conflicts = cs
	s.render(w, http.StatusOK, "registry.html", d)
}

// hostPage is GET /hosts/{host}[?endpoint=ADDR]: the explanation of one
// host, as /debug/describez serves it and `meshfed describe` prints it.
func (s *Server) hostPage(w http.ResponseWriter, r *http.Request) {
	d := s.pageData()
	d.HostName, d.Query = r.PathValue("host"), r.URL.Query().Get("endpoint")
	// An endpoint that is not served still shows the host, under the error.
	in := s.explainInput()
	var err error
	if d.Host, err = explain.Describe(in, d.HostName); err == nil && d.Query != "" {
		d.Host.Endpoint, err = explain.Explain(in, d.HostName, d.Query)
	}
	code := http.StatusOK
	if err != nil {
		d.HostError, code = err.Error(), http.StatusNotFound
		var nf *explain.NotFoundError
		if !errors.As(err, &nf) {
			code = http.StatusInternalServerError
		}
	}
	s.render(w, code, "host.html", d)
}

func (s *Server) render(w http.ResponseWriter, code int, name string, d any) {
	var buf bytes.Buffer
	if err := pageTmpl.ExecuteTemplate(&buf, name, d); err != nil {
		s.log.Error("status page not rendered", "template", name, "error", err)
		http.Error(w, "status page failed; the JSON API under /debug/ still answers", http.StatusInternalServerError)
		return
	}
	pageHeaders(w)
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// pageHeaders forbids anything the page does not need: no external
// fetch, no framing.
func pageHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "same-origin")
}

// renderLogin answers a browser that lacks the token with a form that
// posts it to /login.
func renderLogin(w http.ResponseWriter, code int, next, msg string) {
	var buf bytes.Buffer
	if err := pageTmpl.ExecuteTemplate(&buf, "login.html", map[string]string{"Next": next, "Msg": msg}); err != nil {
		writeJSON(w, code, map[string]string{"error": msg})
		return
	}
	pageHeaders(w)
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// staticHandler serves the embedded stylesheet and script.
func staticHandler() http.Handler {
	sub, err := fs.Sub(uiFS, "ui/static")
	if err != nil {
		panic(err) // embedded at build time
	}
	return http.StripPrefix("/static/", http.FileServerFS(sub))
}

func pageAgo(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return d.Truncate(time.Second).String() + " ago"
	case d < time.Hour:
		return d.Truncate(time.Minute).String() + " ago"
	}
	return d.Truncate(time.Hour).String() + " ago"
}

// stateClass maps a registry or proxy state to a CSS class.
func stateClass(s string) string {
	switch s {
	case "Synced", ads.StateSynced:
		return "ok"
	case "Starting", ads.StateNotSent, ads.StateStale, "Held":
		return "warn"
	case "":
		return "none"
	}
	return "bad"
}
