package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshfed/meshfed/admin"
	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/xds/ads"
	"github.com/meshfed/meshfed/xds/translate"
)

// Exit codes of `meshfed status`. When several apply, the first in this
// order wins: exitFailed, exitUnhealthy (or exitDrift), exitRejected.
const (
	exitOK        = 0
	exitFailed    = 1 // could not read the status
	exitUnhealthy = 2 // a registry is not Synced or a proxy NACKs
	exitRejected  = 3 // a traffic object is rejected (listed on /debug/configz)
)

// worseExit is the exit code of two that wins (see the constants).
func worseExit(a, b int) int {
	rank := func(c int) int {
		switch c {
		case exitOK:
			return 0
		case exitRejected:
			return 1
		case exitUnhealthy:
			return 2
		}
		return 3 // exitFailed and anything unknown
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}

// statusReport is what `meshfed status -o json|yaml` prints.
type statusReport struct {
	Admin      string                 `json:"admin"`
	Registries []admin.RegistryReport `json:"registries"`
	Proxies    []proxyReport          `json:"proxies"`
	// Healthy is false when a registry is not Synced or a proxy NACKs;
	// the exit code is then 2.
	Healthy bool `json:"healthy"`
	// Rules are the traffic rules (/debug/configz); nil when the admin
	// API does not serve them. Any rejected object makes the exit code 3.
	Rules *rulesReport `json:"rules,omitempty"`
}

// rulesReport is the state of the traffic rules: their config sources,
// how many objects are in force and those rejected, with the reason.
type rulesReport struct {
	Sources  []istioconfig.SourceState `json:"sources"`
	InForce  int                       `json:"inForce"`
	Rejected []istioconfig.Rejection   `json:"rejected"`
}

// proxyReport is one xDS stream, with its per-type state.
type proxyReport struct {
	ID        string       `json:"id"`
	Class     string       `json:"class"`
	Stream    string       `json:"stream"`
	StreamID  int64        `json:"streamId"`
	Connected time.Time    `json:"connected"`
	Types     []typeReport `json:"types"`
}

type typeReport struct {
	Type         string    `json:"type"` // CDS, EDS, LDS, RDS
	State        string    `json:"state"`
	SentVersion  string    `json:"sentVersion,omitempty"`
	AckedVersion string    `json:"ackedVersion,omitempty"`
	Resources    int       `json:"resources"`
	LastNack     *ads.Nack `json:"lastNack,omitempty"`
}

func statusCmd() *cobra.Command {
	var (
		af     adminFlags
		output outputFormat
		proxy  string
	)
	c := &cobra.Command{
		Use:   "status",
		Short: "Show every registry and connected proxy with its sync state, read from a running meshfed's admin API",
		Long: `Show every registry (state, last sync, counts, held updates) and every
connected proxy, one row per xDS stream with a column per type (CDS, EDS,
LDS, RDS), like istioctl proxy-status.

Then the traffic rules (/debug/configz): each config source and its state,
the number of objects in force, and each rejected object on one line,
file:line, kind, namespace/name and reason.

Exit codes (when several apply, the lowest non-zero one wins):
  0  every registry is Synced, no proxy NACKs, no traffic object rejected
  1  the status cannot be read
  2  a registry is not Synced or a proxy NACKs its configuration
     (with several --admin: the replicas' contents drift)
  3  a traffic object (VirtualService, DestinationRule...) is rejected`,
		Example: `  meshfed status
  meshfed status --proxy sidecar~10.0.0.5 -o json
  meshfed status --admin 10.0.0.7:15014 --token-file /etc/meshfed/admin.token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.check("table", "json", "yaml"); err != nil {
				return err
			}
			clients, err := af.clients(cmd)
			if err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), err)
				return exitError{exitFailed}
			}
			w := cmd.OutOrStdout()
			code := exitOK
			var reports []statusReport
			for i, c := range clients {
				rep, err := readStatus(c, proxy)
				if err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: %v\n", c.base, err)
					code = exitFailed
					continue
				}
				if !rep.Healthy {
					code = worseExit(code, exitUnhealthy)
				}
				if rep.Rules != nil && len(rep.Rules.Rejected) > 0 {
					code = worseExit(code, exitRejected)
				}
				reports = append(reports, rep)
				if output == "table" {
					if len(clients) > 1 {
						if i > 0 {
							fmt.Fprintln(w)
						}
						fmt.Fprintf(w, "== %s ==\n", c.base)
					}
					writeStatus(w, newPainter(w), rep, time.Now())
				}
			}
			if output == "table" && len(clients) > 1 {
				fmt.Fprintln(w)
				if err := runDrift(w, clients); err != nil { // drift.go
					var ee exitError
					if !errors.As(err, &ee) {
						fmt.Fprintln(cmd.ErrOrStderr(), err)
						return exitError{exitFailed}
					}
					code = worseExit(code, ee.code)
				}
			}
			if output != "table" {
				var v any = reports
				if len(clients) == 1 && len(reports) == 1 {
					v = reports[0]
				}
				if err := printData(w, output, v); err != nil {
					return err
				}
			}
			if code != exitOK {
				return exitError{code}
			}
			return nil
		},
	}
	af.register(c)
	c.Flags().StringVarP((*string)(&output), "output", "o", "table", "table, json or yaml")
	c.Flags().StringVar(&proxy, "proxy", "", "show only proxies whose node id contains this")
	return c
}

// readStatus reads the registries and the proxies (those whose id
// contains proxy, when set).
func readStatus(c *adminClient, proxy string) (statusReport, error) {
	rep := statusReport{Admin: c.base, Healthy: true}
	if err := c.get("/healthz/registries", &rep.Registries); err != nil {
		return rep, err
	}
	var ps []ads.ProxyStatus
	if err := c.get("/debug/syncz", &ps); err != nil {
		return rep, err
	}
	for _, r := range rep.Registries {
		if r.State != "Synced" {
			rep.Healthy = false
		}
	}
	var cz admin.Configz
	switch err := c.get("/debug/configz", &cz); {
	case errors.Is(err, errNotFound): // a meshfed without traffic rules
	case err != nil:
		return rep, err
	default:
		rep.Rules = &rulesReport{Sources: cz.Sources, InForce: len(cz.InForce), Rejected: cz.Rejected}
		if rep.Rules.Sources == nil {
			rep.Rules.Sources = []istioconfig.SourceState{}
		}
		if rep.Rules.Rejected == nil {
			rep.Rules.Rejected = []istioconfig.Rejection{}
		}
	}
	rep.Proxies = []proxyReport{}
	for _, p := range ps {
		if proxy != "" && !strings.Contains(p.ID, proxy) {
			continue
		}
		pr := proxyReport{ID: p.ID, Class: p.Class, Stream: p.Stream, StreamID: p.StreamID, Connected: p.Connected}
		for _, t := range p.Types {
			st := ads.SyncState(t)
			if st == ads.StateNacked {
				rep.Healthy = false
			}
			pr.Types = append(pr.Types, typeReport{Type: translate.ShortType(t.TypeURL), State: st,
				SentVersion: t.SentVersion, AckedVersion: t.AckedVersion, Resources: t.Resources, LastNack: t.LastNack})
		}
		rep.Proxies = append(rep.Proxies, pr)
	}
	return rep, nil
}

var statusTypes = []string{"CDS", "EDS", "LDS", "RDS"}

func writeStatus(w io.Writer, p painter, rep statusReport, now time.Time) {
	var rt table
	rt.row("REGISTRY", "KIND", "STATE", "SERVICES", "ENDPOINTS", "RESTARTS", "LAST SYNC", "LAST ERROR")
	for _, r := range rep.Registries {
		state := r.State
		if r.Restored {
			state += " (restored)"
		}
		i := rt.row(r.Name, r.Kind, state, fmt.Sprint(r.Services), fmt.Sprint(r.Endpoints),
			fmt.Sprint(r.Restarts), ago(now, r.LastSync), p.oneLine(r.LastError))
		rt.color(i, 2, p.state)
	}
	rt.write(w)
	for _, r := range rep.Registries {
		switch {
		case r.Hold != nil:
			reason := ""
			if r.Hold.Reason != "" {
				reason = ": " + p.oneLine(r.Hold.Reason)
			}
			fmt.Fprintf(w, "%s %s: update held since %s, serving %d endpoints, %d pending%s\n  release it: meshfed release %s\n",
				p.paint(yellow, "HELD"), r.Name, ago(now, r.Hold.Since), r.Hold.Served, r.Hold.Pending, reason, r.Name)
		case r.HeldDown:
			fmt.Fprintf(w, "%s %s: an update is held back by maxDeleteRatio (see /debug/conflictz)\n", p.paint(yellow, "HELD"), r.Name)
		}
	}
	fmt.Fprintln(w)
	var pt table
	other := false // a type beyond the four columns (Istio's MCP collections)
	for _, pr := range rep.Proxies {
		for _, t := range pr.Types {
			other = other || !slices.Contains(statusTypes, t.Type)
		}
	}
	head := append([]string{"PROXY", "CLASS", "STREAM"}, statusTypes...)
	if other {
		head = append(head, "OTHER TYPES")
	}
	pt.row(append(head, "LAST NACK")...)
	if len(rep.Proxies) == 0 {
		pt.row("(none connected)")
	}
	for _, pr := range rep.Proxies {
		cells := make([]string, len(statusTypes))
		for i := range cells {
			cells[i] = "-"
		}
		nack, nackAt := "", time.Time{}
		var others []string
		for _, t := range pr.Types {
			if !slices.Contains(statusTypes, t.Type) {
				others = append(others, t.Type+" "+t.State)
			}
			for i, name := range statusTypes {
				if t.Type == name {
					cells[i] = t.State
					if t.State != ads.StateSynced && t.SentVersion != "" {
						cells[i] += " (" + t.SentVersion + ")"
					}
				}
			}
			if n := t.LastNack; n != nil && n.At.After(nackAt) {
				nack, nackAt = t.Type+" "+ago(now, n.At)+": "+p.oneLine(n.Error), n.At
			}
		}
		row := append([]string{pr.ID, pr.Class, fmt.Sprintf("%s #%d", pr.Stream, pr.StreamID)}, cells...)
		if other {
			row = append(row, strings.Join(others, ", "))
		}
		i := pt.row(append(row, nack)...)
		for c := range cells {
			pt.color(i, 3+c, p.state)
		}
	}
	pt.write(w)
	writeRules(w, p, rep.Rules)
	shared := map[string]int{}
	for _, pr := range rep.Proxies {
		shared[pr.ID]++
	}
	for _, pr := range rep.Proxies {
		if n := shared[pr.ID]; n > 1 {
			fmt.Fprintf(w, "%s %d streams share node id %s: proxy-config cannot tell them apart; give each client its own node id\n",
				p.paint(yellow, "SHARED"), n, pr.ID)
			delete(shared, pr.ID)
		}
	}
}

// writeRules writes the traffic rules: a line with the counts, the config
// sources with their state, and one REJECTED line per rejected object.
func writeRules(w io.Writer, p painter, r *rulesReport) {
	if r == nil || (len(r.Sources) == 0 && r.InForce == 0 && len(r.Rejected) == 0) {
		return // no configSources
	}
	fmt.Fprintf(w, "\nTRAFFIC RULES: %d in force, %d rejected (details: /debug/configz)\n", r.InForce, len(r.Rejected))
	if len(r.Sources) > 0 {
		var st table
		st.row("CONFIG SOURCE", "KIND", "STATE", "LAST ERROR")
		for _, s := range r.Sources {
			name := s.Name
			if s.Cluster != "" {
				name += " (" + s.Cluster + ")"
			}
			i := st.row(name, s.Kind, s.State, p.oneLine(s.Error))
			st.color(i, 2, p.state)
		}
		st.write(w)
	}
	for _, rj := range r.Rejected {
		kept := ""
		if rj.KeptLastGood {
			kept = " (its last good version stays in force)"
		}
		rj.Reason = p.oneLine(rj.Reason)
		fmt.Fprintf(w, "%s %s%s\n", p.paint(red, "REJECTED"), rj, kept)
	}
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return now.Sub(t).Truncate(time.Second).String() + " ago"
}

// oneLine puts s on one line, cut to 80 characters on a terminal only:
// piped or redirected output keeps the whole text.
func (p painter) oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if r := []rune(s); p.tty && len(r) > 80 {
		s = string(r[:77]) + "..."
	}
	return s
}
