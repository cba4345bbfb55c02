package main

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshfed/meshfed/explain"
)

// describe prints the explanation of one host that the server computes
// (GET /debug/describez, package explain): the CLI only renders it.

func describeCmd() *cobra.Command {
	var endpoint string
	c := adminView(&cobra.Command{
		Use:   "describe HOST [--endpoint ADDR]",
		Short: "Explain one service: the registries that publish it, its endpoints by locality and health, conflicts, routes and the traffic rules in force for it; with --endpoint, why that endpoint is or is not in each kind of client's EDS",
		Args:  cobra.ExactArgs(1),
	}, func(c *adminClient, host string) (any, error) {
		d, err := readDescription(c, host, endpoint)
		if err != nil || endpoint == "" {
			return d, err
		}
		return d.Endpoint, nil
	}, func(w io.Writer, v any) error {
		p := newPainter(w)
		switch v := v.(type) {
		case *explain.Description:
			writeDescription(w, p, v)
		case *explain.EndpointReport:
			writeEndpointReport(w, p, v)
		}
		return nil
	})
	c.Flags().StringVar(&endpoint, "endpoint", "", "explain one endpoint of HOST: an IP or IP:port")
	return c
}

func readDescription(c *adminClient, host, endpoint string) (*explain.Description, error) {
	q := url.Values{"host": {host}}
	if endpoint != "" {
		q.Set("endpoint", endpoint)
	}
	var d explain.Description
	if err := c.get("/debug/describez?"+q.Encode(), &d); err != nil {
		// A host or endpoint not served: the API's own message says why
		// and what is near.
		var ae apiError
		if errors.Is(err, errNotFound) && errors.As(err, &ae) {
			return nil, ae
		}
		return nil, err
	}
	if endpoint != "" && d.Endpoint == nil {
		return nil, fmt.Errorf("this meshfed does not explain endpoints (GET /debug/describez answered no endpoint): upgrade it")
	}
	return &d, nil
}

func writeDescription(w io.Writer, p painter, d *explain.Description) {
	s := d.Service
	fmt.Fprintf(w, "Service:     %s\n", s.Host)
	fmt.Fprintf(w, "Registries:  %s\n", strings.Join(s.Sources, ", "))
	fmt.Fprintf(w, "Resolution:  %s\n", s.Resolution)
	var ports []string
	for _, pt := range s.Ports {
		ports = append(ports, fmt.Sprintf("%s %d/%s", pt.Name, pt.Port, strings.ToLower(pt.Protocol)))
	}
	fmt.Fprintf(w, "Ports:       %s\n", strings.Join(ports, ", "))

	healthy := 0
	for _, e := range d.Endpoints {
		if e.Health == "HEALTHY" {
			healthy++
		}
	}
	fmt.Fprintf(w, "\nEndpoints:   %d (%d healthy)\n", len(d.Endpoints), healthy)
	var t table
	t.row("  LOCALITY", "ADDRESS", "HEALTH", "WEIGHT", "REGISTRY", "CLUSTER", "LABELS")
	for _, e := range d.Endpoints {
		var addrs []string
		for _, pt := range s.Ports {
			if n, ok := e.Ports[pt.Name]; ok {
				addrs = append(addrs, fmt.Sprintf("%s:%d", e.Address, n))
			}
		}
		if len(addrs) == 0 {
			addrs = []string{e.Address}
		}
		i := t.row("  "+dash(e.Locality), strings.Join(addrs, ","), e.Health, fmt.Sprint(e.Weight), e.Registry, dash(e.Cluster), explain.LabelString(e.Labels))
		t.color(i, 2, p.health)
	}
	t.write(w)

	fmt.Fprintf(w, "\nRoutes:\n")
	var rt table
	rt.row("  PORT", "CLUSTER", "ENVOY ROUTE (DOMAINS)", "GRPC TARGET")
	for _, r := range d.Routes {
		rt.row(fmt.Sprintf("  %d", r.Port), r.Cluster, fmt.Sprintf("%s (%s)", r.EnvoyRoute, r.EnvoyDomains), r.GRPCTarget)
	}
	rt.write(w)

	fmt.Fprintf(w, "\nConflicts:   %d\n", len(d.Conflicts))
	for _, c := range d.Conflicts {
		fmt.Fprintf(w, "  %s %s %s: %s\n", p.paint(red, c.Category), c.Registry, c.Subject, c.Reason)
	}

	writeTraffic(w, p, d.Traffic)
}

// health colours an endpoint health.
func (p painter) health(h string) string {
	switch h {
	case "HEALTHY":
		return p.paint(green, h)
	case "DEGRADED", "DRAINING":
		return p.paint(yellow, h)
	}
	return p.paint(red, h)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeTraffic is the traffic rules part of the describe table.
func writeTraffic(w io.Writer, p painter, t explain.Traffic) {
	fmt.Fprintf(w, "\nTraffic rules: %d in force\n", len(t.VirtualServices)+len(t.DestinationRules))
	var rt table
	for _, r := range append(slices.Clone(t.VirtualServices), t.DestinationRules...) {
		rt.row("  "+r.Kind, r.ID(), r.Source)
	}
	rt.write(w)
	for _, d := range t.DroppedSubsets {
		fmt.Fprintf(w, "  subset %s of %s dropped: %s defines it\n", d.Subset, d.Object, d.KeptFrom)
	}
	for _, r := range t.IgnoredPolicies {
		fmt.Fprintf(w, "  trafficPolicy of %s not used: an older rule has one\n", r)
	}

	if len(t.Subsets) > 0 {
		fmt.Fprintf(w, "\nSubsets:\n")
		var st table
		st.row("  NAME", "LABELS", "ENDPOINTS", "RULE")
		for _, s := range t.Subsets {
			i := st.row("  "+s.Name, explain.LabelString(s.Labels), fmt.Sprint(s.Endpoints), s.Rule)
			if s.Endpoints == 0 {
				st.color(i, 2, func(c string) string { return p.paint(yellow, c) })
			}
		}
		st.write(w)
	}

	if len(t.RouteTable) > 0 {
		fmt.Fprintf(w, "\nRoute table:\n")
		var tt table
		tt.row("  ROUTE", "MATCH", "DESTINATIONS", "VIRTUALSERVICE")
		var pol []string
		for _, r := range t.RouteTable {
			name := r.Protocol
			if r.Name != "" {
				name += " " + r.Name
			}
			match := "*"
			if len(r.Match) > 0 {
				match = strings.Join(r.Match, " or ")
			}
			var dests []string
			for _, d := range r.Destinations {
				dests = append(dests, d.String())
			}
			if r.Action != "" {
				dests = append(dests, r.Action)
			}
			tt.row("  "+name, match, "→ "+strings.Join(dests, ", "), r.VirtualService)
			var ps []string
			for _, kv := range [][2]string{{"timeout", r.Timeout}, {"retries", r.Retries}, {"fault", r.Fault}, {"mirror", r.Mirror}} {
				if kv[1] != "" {
					ps = append(ps, kv[0]+" "+kv[1])
				}
			}
			if len(ps) > 0 {
				pol = append(pol, fmt.Sprintf("  %s: %s", name, strings.Join(ps, "; ")))
			}
		}
		tt.write(w)
		if len(pol) > 0 {
			fmt.Fprintf(w, "\nRoute policies:\n%s\n", strings.Join(pol, "\n"))
		}
	}

	if len(t.Policies) > 0 {
		fmt.Fprintf(w, "\nPolicies:\n")
		var pt table
		for _, pl := range t.Policies {
			scope := pl.Rule
			if pl.Scope != "" {
				scope += " " + pl.Scope
			}
			pt.row("  "+pl.Kind, pl.Summary, "("+scope+")")
		}
		pt.write(w)
	}

	if len(t.Rejected) > 0 {
		fmt.Fprintf(w, "\nRejected:    %d\n", len(t.Rejected))
		for _, r := range t.Rejected {
			kept := ""
			if r.KeptLastGood {
				kept = " (last good version kept in force)"
			}
			lines := strings.Split(r.String(), "\n")
			fmt.Fprintf(w, "  %s %s%s\n", p.paint(red, "REJECTED"), lines[0], kept)
			for _, l := range lines[1:] {
				fmt.Fprintf(w, "    %s\n", l)
			}
		}
	}

	if len(t.NotForClients) > 0 {
		fmt.Fprintf(w, "\nNot for clients:\n")
		for _, n := range t.NotForClients {
			fmt.Fprintf(w, "  %s: %s\n", n.Client, n.Note)
		}
	}
}

// writeEndpointReport is `describe HOST --endpoint ADDR` as a table.
func writeEndpointReport(w io.Writer, p painter, r *explain.EndpointReport) {
	fmt.Fprintf(w, "Endpoint:    %s of %s\n", r.Query, r.Host)
	fmt.Fprintf(w, "Scope:       %s\n", r.Scope.Note)
	for _, c := range r.Quarantined {
		fmt.Fprintf(w, "%s %s %s %s: %s\n", p.paint(red, "QUARANTINED"), c.Category, c.Registry, c.Subject, c.Reason)
	}
	for _, v := range r.Endpoints {
		e := v.Endpoint
		fmt.Fprintf(w, "\n%s  %s  locality %s  registry %s (%s: %s)\n", e.Address, p.health(e.Health), dash(e.Locality),
			v.Registry.Name, p.state(v.Registry.State), v.Registry.Note)
		var t table
		t.row("  CLUSTER", "ENVOY (SOTW, DELTA)", "PROXYLESS GRPC")
		var notes []string
		for _, c := range v.Clusters {
			name := c.Cluster
			if c.EndpointPort != 0 {
				name += fmt.Sprintf(" (as port %d)", c.EndpointPort)
			}
			i := t.row("  "+name, verdict(c.Envoy), verdict(c.GRPC))
			t.color(i, 1, p.verdict(c.Envoy))
			t.color(i, 2, p.verdict(c.GRPC))
			if c.EndpointPort != 0 && c.Locality != "" {
				notes = append(notes, fmt.Sprintf("  %s: %s", c.Cluster, c.Locality))
			}
		}
		t.write(w)
		fmt.Fprintf(w, "  istiod (MCP): %s\n", verdict(v.ServiceEntry))
		if len(notes) > 0 {
			fmt.Fprintf(w, "  Locality:\n  %s\n", strings.Join(notes, "\n  "))
		}
	}
}

// verdict is "in, used: reason", "in, not used: reason" or "not in:
// reason".
func verdict(v explain.Verdict) string {
	switch {
	case v.Used:
		return "in, used: " + v.Reason
	case v.In:
		return "in, not used: " + v.Reason
	}
	return "not in: " + v.Reason
}

func (p painter) verdict(v explain.Verdict) func(string) string {
	c := red
	switch {
	case v.Used:
		c = green
	case v.In:
		c = yellow
	}
	return func(s string) string { return p.paint(c, s) }
}
