package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshfed/meshfed/admin"
	"github.com/meshfed/meshfed/xds/translate"
)

// description is what `meshfed describe HOST -o json|yaml` prints.
type description struct {
	Service   admin.ServiceInfo    `json:"service"`
	Endpoints []admin.EndpointInfo `json:"endpoints"`
	Conflicts []conflictJSON       `json:"conflicts"`
	Routes    []routeRef           `json:"routes"`
	// Traffic is the traffic rules in force and rejected for the host
	// (/debug/configz).
	Traffic trafficInfo `json:"traffic"`
}

// conflictJSON is a /debug/conflictz entry (aggregate.Conflict's JSON form).
type conflictJSON struct {
	Registry string `json:"registry,omitempty"`
	Host     string `json:"host,omitempty"`
	Subject  string `json:"subject,omitempty"`
	Reason   string `json:"reason"`
	Category string `json:"category"`
}

// routeRef is how one service port is reached: the xDS names meshfed
// serves it under, per client class.
type routeRef struct {
	Port         uint32 `json:"port"`
	Cluster      string `json:"cluster"`
	EnvoyRoute   string `json:"envoyRoute"`   // route configuration of the port's listener
	EnvoyDomains string `json:"envoyDomains"` // its virtual host's domains
	GRPCTarget   string `json:"grpcTarget"`   // what a proxyless client dials
}

func describeCmd() *cobra.Command {
	return adminView(&cobra.Command{
		Use:   "describe HOST",
		Short: "Explain one service: the registries that publish it, its endpoints by locality and health, conflicts, routes and the traffic rules in force for it",
		Args:  cobra.ExactArgs(1),
	}, readDescription, func(w io.Writer, d *description) error {
		writeDescription(w, newPainter(w), d)
		return nil
	})
}

func readDescription(c *adminClient, host string) (*description, error) {
	var svcs []admin.ServiceInfo
	if err := c.get("/debug/registryz", &svcs); err != nil {
		return nil, err
	}
	var conflicts []conflictJSON
	if err := c.get("/debug/conflictz", &conflicts); err != nil {
		return nil, err
	}
	d := &description{Conflicts: []conflictJSON{}, Routes: []routeRef{}}
	for _, cf := range conflicts {
		if cf.Host == host {
			d.Conflicts = append(d.Conflicts, cf)
		}
	}
	i := slices.IndexFunc(svcs, func(s admin.ServiceInfo) bool { return s.Host == host })
	if i < 0 {
		msg := fmt.Sprintf("no service %q is served", host)
		if len(d.Conflicts) > 0 {
			msg += fmt.Sprintf("; %d conflicts name it (see /debug/conflictz):", len(d.Conflicts))
			for _, cf := range d.Conflicts {
				msg += "\n  " + cf.Category + ": " + cf.Reason
			}
		} else if near := nearHosts(svcs, host); len(near) > 0 {
			msg += "; did you mean " + strings.Join(near, ", ") + "?"
		}
		return nil, errors.New(msg)
	}
	d.Service = svcs[i]
	if err := c.get("/debug/endpointz?host="+url.QueryEscape(host), &d.Endpoints); err != nil {
		return nil, err
	}
	slices.SortFunc(d.Endpoints, func(a, b admin.EndpointInfo) int {
		return cmp.Or(cmp.Compare(a.Locality, b.Locality), cmp.Compare(a.Health, b.Health), cmp.Compare(a.Address, b.Address))
	})
	var cz admin.Configz
	if err := c.get("/debug/configz", &cz); err != nil {
		return nil, err
	}
	d.Traffic = readTraffic(cz, host, d.Endpoints)
	for _, p := range d.Service.Ports {
		d.Routes = append(d.Routes, routeRef{
			Port:         p.Port,
			Cluster:      translate.ClusterName(host, p.Port),
			EnvoyRoute:   translate.EnvoyRouteName(p.Port),
			EnvoyDomains: fmt.Sprintf("%s, %s:%d", host, host, p.Port),
			GRPCTarget:   "xds:///" + translate.GRPCListenerName(host, p.Port),
		})
	}
	return d, nil
}

// nearHosts suggests hosts sharing the first label of host.
func nearHosts(svcs []admin.ServiceInfo, host string) []string {
	first, _, _ := strings.Cut(host, ".")
	var out []string
	for _, s := range svcs {
		if f, _, _ := strings.Cut(s.Host, "."); f == first && len(out) < 5 {
			out = append(out, s.Host)
		}
	}
	return out
}

func writeDescription(w io.Writer, p painter, d *description) {
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
		loc := e.Locality
		if loc == "" {
			loc = "-"
		}
		var addrs []string
		for _, pt := range s.Ports {
			if n, ok := e.Ports[pt.Name]; ok {
				addrs = append(addrs, fmt.Sprintf("%s:%d", e.Address, n))
			}
		}
		if len(addrs) == 0 {
			addrs = []string{e.Address}
		}
		var labels []string
		for k, v := range e.Labels {
			labels = append(labels, k+"="+v)
		}
		slices.Sort(labels)
		cl := e.Cluster
		if cl == "" {
			cl = "-"
		}
		i := t.row("  "+loc, strings.Join(addrs, ","), e.Health, fmt.Sprint(e.Weight), e.Registry, cl, strings.Join(labels, ","))
		t.color(i, 2, func(h string) string {
			switch h {
			case "HEALTHY":
				return p.paint(green, h)
			case "DEGRADED", "DRAINING":
				return p.paint(yellow, h)
			}
			return p.paint(red, h)
		})
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
