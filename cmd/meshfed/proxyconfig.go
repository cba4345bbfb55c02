package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshfed/meshfed/xds/ads"
	"github.com/meshfed/meshfed/xds/translate"
)

// configDump is /debug/config_dump?proxy=ID.
type configDump struct {
	ID        string                       `json:"id"`
	Class     string                       `json:"class"`
	Scope     *proxyScope                  `json:"scope,omitempty"`
	Resources map[string][]json.RawMessage `json:"resources"`
}

// proxyScope is what a scoped proxy sees (xds.Scope on the config dump).
type proxyScope struct {
	View    string   `json:"view"`
	Sidecar string   `json:"sidecar,omitempty"`
	Hosts   []string `json:"hosts"`
}

var proxyConfigTypes = map[string]string{
	"clusters":  translate.ClusterType,
	"endpoints": translate.EndpointType,
	"listeners": translate.ListenerType,
	"routes":    translate.RouteType,
}

func proxyConfigCmd() *cobra.Command {
	c := &cobra.Command{
		Use:     "proxy-config clusters|endpoints|listeners|routes|scope PROXY",
		Aliases: []string{"pc"},
		Short:   "Show the xDS resources a connected proxy is served, like istioctl proxy-config",
		Long: `Show what a connected proxy is served, read from /debug/config_dump.
PROXY is a node id or a unique part of one (see meshfed status).`,
	}
	for _, kind := range []string{"clusters", "endpoints", "listeners", "routes"} {
		c.AddCommand(adminView(&cobra.Command{
			Use:     kind + " PROXY",
			Aliases: []string{kind[:1], strings.TrimSuffix(kind, "s")},
			Short:   "Show the " + kind + " a proxy is served",
			Args:    cobra.ExactArgs(1),
		}, func(c *adminClient, proxy string) ([]json.RawMessage, error) {
			dump, err := readDump(c, proxy)
			if err != nil {
				return nil, err
			}
			if res := dump.Resources[proxyConfigTypes[kind]]; res != nil {
				return res, nil
			}
			return []json.RawMessage{}, nil // JSON and YAML print [], not null
		}, func(w io.Writer, res []json.RawMessage) error {
			return writeResources(w, kind, res)
		}))
	}
	c.AddCommand(adminView(&cobra.Command{
		Use:   "scope PROXY",
		Short: "Show a proxy's scope: the Sidecar that selected it and the hosts it is sent",
		Args:  cobra.ExactArgs(1),
	}, func(c *adminClient, proxy string) (*proxyScope, error) {
		dump, err := readDump(c, proxy)
		if err != nil {
			return nil, err
		}
		return dump.Scope, nil
	}, writeScope))
	return c
}

// writeScope prints a proxy's scope (docs/traffic.md, "Scoping").
func writeScope(w io.Writer, sc *proxyScope) error {
	if sc == nil {
		_, err := fmt.Fprintln(w, "not scoped: the proxy is sent every service")
		return err
	}
	sidecar := cmp.Or(sc.Sidecar, "none")
	_, err := fmt.Fprintf(w, "Sidecar: %s\nView:    %s\nHosts:   %d\n", sidecar, sc.View, len(sc.Hosts))
	for _, h := range sc.Hosts {
		if err == nil {
			_, err = fmt.Fprintf(w, "  %s\n", h)
		}
	}
	return err
}

// readDump finds the proxy whose id is, or uniquely contains, proxy and
// reads its config dump.
func readDump(c *adminClient, proxy string) (*configDump, error) {
	var ps []ads.ProxyStatus
	if err := c.get("/debug/syncz", &ps); err != nil {
		return nil, err
	}
	var ids []string
	for _, p := range ps {
		if p.ID == proxy {
			ids = []string{p.ID}
			break
		}
		if strings.Contains(p.ID, proxy) && !slices.Contains(ids, p.ID) {
			ids = append(ids, p.ID)
		}
	}
	switch len(ids) {
	case 0:
		return nil, fmt.Errorf("no connected proxy matches %q (meshfed status lists them)", proxy)
	case 1:
	default:
		return nil, fmt.Errorf("%q matches %d proxies: %s", proxy, len(ids), strings.Join(ids, ", "))
	}
	var streams []string
	for _, p := range ps {
		if p.ID == ids[0] {
			streams = append(streams, fmt.Sprintf("%s #%d connected %s", p.Stream, p.StreamID, p.Connected.Format(time.RFC3339)))
		}
	}
	if len(streams) > 1 {
		return nil, fmt.Errorf("%d streams share node id %q (%s): cannot tell which one you mean; "+
			"give each client its own node id (meshfed bootstrap --grpc does unless --node-id is given)",
			len(streams), ids[0], strings.Join(streams, "; "))
	}
	var d configDump
	if err := c.get("/debug/config_dump?proxy="+url.QueryEscape(ids[0]), &d); err != nil {
		if errors.Is(err, errNotFound) {
			return nil, fmt.Errorf("proxy %q disconnected", ids[0])
		}
		return nil, err
	}
	return &d, nil
}

// The protojson fields the tables show.
type (
	socketAddress struct {
		Address   string `json:"address"`
		PortValue uint32 `json:"portValue"`
	}
	address struct {
		SocketAddress socketAddress `json:"socketAddress"`
	}
	clusterJSON struct {
		Name string `json:"name"`
		Type string `json:"type"`
	}
	claJSON struct {
		ClusterName string `json:"clusterName"`
		Endpoints   []struct {
			Locality struct {
				Region  string `json:"region"`
				Zone    string `json:"zone"`
				SubZone string `json:"subZone"`
			} `json:"locality"`
			LbEndpoints []struct {
				Endpoint struct {
					Address address `json:"address"`
				} `json:"endpoint"`
				HealthStatus        string `json:"healthStatus"`
				LoadBalancingWeight uint32 `json:"loadBalancingWeight"`
			} `json:"lbEndpoints"`
		} `json:"endpoints"`
	}
	listenerJSON struct {
		Name        string          `json:"name"`
		Address     address         `json:"address"`
		APIListener json.RawMessage `json:"apiListener"`
	}
	routeJSON struct {
		Name         string `json:"name"`
		VirtualHosts []struct {
			Name    string   `json:"name"`
			Domains []string `json:"domains"`
			Routes  []struct {
				Name           string         `json:"name"`
				Match          routeMatchJSON `json:"match"`
				Route          *routeAction   `json:"route"`
				Redirect       *redirectJSON  `json:"redirect"`
				DirectResponse *struct {
					Status uint32 `json:"status"`
				} `json:"directResponse"`
			} `json:"routes"`
		} `json:"virtualHosts"`
	}
	routeMatchJSON struct {
		Prefix              *string    `json:"prefix"`
		Path                *string    `json:"path"`
		SafeRegex           *regexJSON `json:"safeRegex"`
		PathSeparatedPrefix *string    `json:"pathSeparatedPrefix"`
		CaseSensitive       *bool      `json:"caseSensitive"`
		GRPC                *struct{}  `json:"grpc"`
		RuntimeFraction     *struct {
			DefaultValue struct {
				Numerator   uint32 `json:"numerator"`
				Denominator string `json:"denominator"`
			} `json:"defaultValue"`
		} `json:"runtimeFraction"`
		Headers []struct {
			Name           string           `json:"name"`
			StringMatch    *stringMatchJSON `json:"stringMatch"`
			PresentMatch   *bool            `json:"presentMatch"`
			ExactMatch     *string          `json:"exactMatch"`
			PrefixMatch    *string          `json:"prefixMatch"`
			SuffixMatch    *string          `json:"suffixMatch"`
			ContainsMatch  *string          `json:"containsMatch"`
			SafeRegexMatch *regexJSON       `json:"safeRegexMatch"`
			RangeMatch     *struct {
				Start json.Number `json:"start"`
				End   json.Number `json:"end"`
			} `json:"rangeMatch"`
			InvertMatch bool `json:"invertMatch"`
		} `json:"headers"`
		QueryParameters []struct {
			Name         string           `json:"name"`
			StringMatch  *stringMatchJSON `json:"stringMatch"`
			PresentMatch *bool            `json:"presentMatch"`
		} `json:"queryParameters"`
	}
	regexJSON struct {
		Regex string `json:"regex"`
	}
	stringMatchJSON struct {
		Exact      *string    `json:"exact"`
		Prefix     *string    `json:"prefix"`
		Suffix     *string    `json:"suffix"`
		Contains   *string    `json:"contains"`
		SafeRegex  *regexJSON `json:"safeRegex"`
		IgnoreCase bool       `json:"ignoreCase"`
	}
	routeAction struct {
		Cluster          string `json:"cluster"`
		ClusterHeader    string `json:"clusterHeader"`
		WeightedClusters *struct {
			Clusters []struct {
				Name   string  `json:"name"`
				Weight *uint32 `json:"weight"`
			} `json:"clusters"`
			TotalWeight *uint32 `json:"totalWeight"`
		} `json:"weightedClusters"`
	}
	redirectJSON struct {
		HTTPSRedirect  bool   `json:"httpsRedirect"`
		SchemeRedirect string `json:"schemeRedirect"`
		HostRedirect   string `json:"hostRedirect"`
		PortRedirect   uint32 `json:"portRedirect"`
		PathRedirect   string `json:"pathRedirect"`
		PrefixRewrite  string `json:"prefixRewrite"`
		ResponseCode   string `json:"responseCode"`
	}
)

func writeResources(w io.Writer, kind string, res []json.RawMessage) error {
	var t table
	each := func(v any, f func()) error {
		for _, r := range res {
			if err := json.Unmarshal(r, v); err != nil {
				return fmt.Errorf("%s: %w", kind, err)
			}
			f()
		}
		return nil
	}
	var err error
	switch kind {
	case "clusters":
		t.row("SERVICE FQDN", "PORT", "SUBSET", "DIRECTION", "TYPE", "NAME")
		var c clusterJSON
		err = each(&c, func() {
			dir, port, subset, host := splitClusterName(c.Name)
			typ := c.Type
			if typ == "" {
				typ = "STATIC"
			}
			t.row(host, port, subset, dir, typ, c.Name)
			c = clusterJSON{}
		})
	case "endpoints":
		t.row("ENDPOINT", "STATUS", "LOCALITY", "WEIGHT", "CLUSTER")
		var c claJSON
		err = each(&c, func() {
			c2 := c
			for _, le := range c2.Endpoints {
				loc := strings.TrimRight(strings.Join([]string{le.Locality.Region, le.Locality.Zone, le.Locality.SubZone}, "/"), "/")
				for _, e := range le.LbEndpoints {
					a := e.Endpoint.Address.SocketAddress
					st := e.HealthStatus
					if st == "" {
						st = "UNKNOWN"
					}
					t.row(fmt.Sprintf("%s:%d", a.Address, a.PortValue), st, loc, fmt.Sprint(e.LoadBalancingWeight), c2.ClusterName)
				}
			}
			c = claJSON{}
		})
	case "listeners":
		t.row("NAME", "ADDRESS", "PORT", "TYPE")
		var l listenerJSON
		err = each(&l, func() {
			typ, addr, port := "TCP", l.Address.SocketAddress.Address, fmt.Sprint(l.Address.SocketAddress.PortValue)
			if len(l.APIListener) > 0 {
				typ, addr, port = "API (proxyless gRPC)", "-", "-"
			}
			t.row(l.Name, addr, port, typ)
			l = listenerJSON{}
		})
	case "routes":
		t.row("NAME", "VIRTUAL HOST", "DOMAINS", "ROUTE", "MATCH", "DESTINATION")
		var r routeJSON
		err = each(&r, func() {
			for _, vh := range r.VirtualHosts {
				for _, rt := range vh.Routes {
					dest := "-"
					switch {
					case rt.Route != nil:
						dest = rt.Route.String()
					case rt.Redirect != nil:
						dest = rt.Redirect.String()
					case rt.DirectResponse != nil:
						dest = fmt.Sprintf("direct response %d", rt.DirectResponse.Status)
					}
					t.row(r.Name, vh.Name, strings.Join(vh.Domains, ","), cmp.Or(rt.Name, "-"), rt.Match.String(), dest)
				}
			}
			r = routeJSON{}
		})
	}
	if err != nil {
		return err
	}
	if len(t.rows) == 1 {
		t.row("(none)")
	}
	t.write(w)
	return nil
}

// splitClusterName splits outbound|<port>|<subset>|<host>.
func splitClusterName(name string) (dir, port, subset, host string) {
	parts := strings.SplitN(name, "|", 4)
	if len(parts) != 4 {
		return "-", "-", "-", name
	}
	subset = parts[2]
	if subset == "" {
		subset = "-"
	}
	return parts[0], parts[1], subset, parts[3]
}

// String is a route match on one line: the path (/* for every path,
// /api* for a prefix, /old exactly, regex ...), then each header and
// query parameter with its match kind, e.g.
//
//	/*, header x-canary exact "yes", query v prefix "2"
func (m routeMatchJSON) String() string {
	var parts []string
	switch {
	case m.Path != nil:
		parts = append(parts, *m.Path)
	case m.SafeRegex != nil:
		parts = append(parts, "regex "+strconv.Quote(m.SafeRegex.Regex))
	case m.PathSeparatedPrefix != nil:
		parts = append(parts, *m.PathSeparatedPrefix+"/*")
	case m.Prefix != nil && *m.Prefix != "":
		parts = append(parts, *m.Prefix+"*")
	default: // prefix "" or "/": every path
		parts = append(parts, "/*")
	}
	if m.CaseSensitive != nil && !*m.CaseSensitive {
		parts[0] += " (ignore case)"
	}
	if m.GRPC != nil {
		parts = append(parts, "grpc")
	}
	for _, h := range m.Headers {
		var kind string
		switch {
		case h.StringMatch != nil:
			kind = h.StringMatch.String()
		case h.PresentMatch != nil && *h.PresentMatch:
			kind = "present"
		case h.PresentMatch != nil:
			kind = "absent"
		case h.ExactMatch != nil:
			kind = "exact " + strconv.Quote(*h.ExactMatch)
		case h.PrefixMatch != nil:
			kind = "prefix " + strconv.Quote(*h.PrefixMatch)
		case h.SuffixMatch != nil:
			kind = "suffix " + strconv.Quote(*h.SuffixMatch)
		case h.ContainsMatch != nil:
			kind = "contains " + strconv.Quote(*h.ContainsMatch)
		case h.SafeRegexMatch != nil:
			kind = "regex " + strconv.Quote(h.SafeRegexMatch.Regex)
		case h.RangeMatch != nil:
			kind = fmt.Sprintf("in [%s, %s)", cmp.Or(h.RangeMatch.Start.String(), "0"), h.RangeMatch.End)
		default:
			kind = "present"
		}
		p := "header " + h.Name + " " + kind
		if h.InvertMatch {
			p = "not " + p
		}
		parts = append(parts, p)
	}
	for _, q := range m.QueryParameters {
		kind := "present"
		if q.StringMatch != nil {
			kind = q.StringMatch.String()
		}
		parts = append(parts, "query "+q.Name+" "+kind)
	}
	if f := m.RuntimeFraction; f != nil {
		den := map[string]float64{"": 100, "HUNDRED": 100, "TEN_THOUSAND": 10000, "MILLION": 1000000}[f.DefaultValue.Denominator]
		if den == 0 {
			den = 100
		}
		parts = append(parts, fmt.Sprintf("%s of requests", percent(float64(f.DefaultValue.Numerator), den)))
	}
	return strings.Join(parts, ", ")
}

// String is a string match's kind and value, e.g. exact "yes".
func (s stringMatchJSON) String() string {
	var out string
	switch {
	case s.Exact != nil:
		out = "exact " + strconv.Quote(*s.Exact)
	case s.Prefix != nil:
		out = "prefix " + strconv.Quote(*s.Prefix)
	case s.Suffix != nil:
		out = "suffix " + strconv.Quote(*s.Suffix)
	case s.Contains != nil:
		out = "contains " + strconv.Quote(*s.Contains)
	case s.SafeRegex != nil:
		out = "regex " + strconv.Quote(s.SafeRegex.Regex)
	default:
		out = "exact \"\""
	}
	if s.IgnoreCase {
		out += " (ignore case)"
	}
	return out
}

// String is where a route sends its requests: one cluster, or weighted
// clusters with their shares, e.g. outbound|8080|v1|h 90%, outbound|8080|v2|h 10%.
func (a routeAction) String() string {
	switch {
	case a.Cluster != "":
		return a.Cluster
	case a.ClusterHeader != "":
		return "cluster named by header " + a.ClusterHeader
	case a.WeightedClusters != nil:
		var total float64
		for _, c := range a.WeightedClusters.Clusters {
			if c.Weight != nil {
				total += float64(*c.Weight)
			}
		}
		if tw := a.WeightedClusters.TotalWeight; tw != nil && *tw > 0 {
			total = float64(*tw)
		}
		parts := make([]string, 0, len(a.WeightedClusters.Clusters))
		for _, c := range a.WeightedClusters.Clusters {
			var w float64
			if c.Weight != nil {
				w = float64(*c.Weight)
			}
			parts = append(parts, c.Name+" "+percent(w, total))
		}
		return strings.Join(parts, ", ")
	}
	return "-"
}

// String is a redirect as redirect [scheme://][host][:port][path] (code).
func (r redirectJSON) String() string {
	scheme := r.SchemeRedirect
	if r.HTTPSRedirect {
		scheme = "https"
	}
	var to string
	if scheme != "" {
		to = scheme + "://"
	}
	to += r.HostRedirect
	if r.PortRedirect != 0 {
		to += ":" + strconv.FormatUint(uint64(r.PortRedirect), 10)
	}
	switch {
	case r.PathRedirect != "":
		to += r.PathRedirect
	case r.PrefixRewrite != "":
		to += r.PrefixRewrite + "*"
	}
	code := map[string]string{"": "301", "MOVED_PERMANENTLY": "301", "FOUND": "302", "SEE_OTHER": "303",
		"TEMPORARY_REDIRECT": "307", "PERMANENT_REDIRECT": "308"}[r.ResponseCode]
	return strings.TrimSpace("redirect " + cmp.Or(to, "(same URL)") + " (" + cmp.Or(code, r.ResponseCode) + ")")
}

// percent is part/total as a percentage, without decimals when whole.
func percent(part, total float64) string {
	if total == 0 {
		return "0%"
	}
	return strconv.FormatFloat(math.Round(part/total*1000)/10, 'f', -1, 64) + "%"
}
