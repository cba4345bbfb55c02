package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
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
	Resources map[string][]json.RawMessage `json:"resources"`
}

var proxyConfigTypes = map[string]string{
	"clusters":  translate.ClusterType,
	"endpoints": translate.EndpointType,
	"listeners": translate.ListenerType,
	"routes":    translate.RouteType,
}

func proxyConfigCmd() *cobra.Command {
	c := &cobra.Command{
		Use:     "proxy-config clusters|endpoints|listeners|routes PROXY",
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
	return c
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
				Match struct {
					Prefix string `json:"prefix"`
					Path   string `json:"path"`
				} `json:"match"`
				Route struct {
					Cluster string `json:"cluster"`
				} `json:"route"`
			} `json:"routes"`
		} `json:"virtualHosts"`
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
		t.row("NAME", "VIRTUAL HOST", "DOMAINS", "MATCH", "CLUSTER")
		var r routeJSON
		err = each(&r, func() {
			for _, vh := range r.VirtualHosts {
				for _, rt := range vh.Routes {
					m := rt.Match.Prefix
					if rt.Match.Path != "" {
						m = rt.Match.Path
					}
					if m == "" {
						m = "/*"
					}
					t.row(r.Name, vh.Name, strings.Join(vh.Domains, ","), m, rt.Route.Cluster)
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
