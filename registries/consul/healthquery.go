package consul

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/hashicorp/consul/api"
)

// healthQuery asks /v1/health/service/<name> with the query string and
// answer handling of the api package's Health().ServiceMultipleTags, but
// hands the request straight to the transport. Every service holds one
// such request in flight for up to waitTime, and at 10,000 services over
// HTTPS what net/http's Client and the api package add per request was
// ≈ 1.6 KB of the ≈ 20 KB a service cost (heap profile, bench/analysis.md
// "Consul: a blocking query without the api package's copies"): a copy of
// the request to attach its context, a copy of its headers for
// redirects, and a URL parsed from a string. Here the URL is built, the
// request made once with its context, and Consul never redirects.
type healthQuery struct {
	rt     http.RoundTripper // the services' tokenTransport
	scheme string
	host   string
	token  string
	dc     string
	tags   []string
	// passing adds ?passing (instances whose checks all pass).
	passing bool
}

func newHealthQuery(rt http.RoundTripper, c *Config, token string) *healthQuery {
	return &healthQuery{rt: rt, scheme: c.Scheme, host: c.Address, token: token, dc: c.Datacenter, tags: c.Tags, passing: c.PassingOnly}
}

// query asks for service name's instances with q's index, wait and
// consistency (its other fields are not read), as ServiceMultipleTags
// would: the same parameters, errors as api.StatusError for answers other
// than 200, and the answer's X-Consul-Index.
func (h *healthQuery) query(ctx context.Context, name string, q *api.QueryOptions) ([]*api.ServiceEntry, uint64, error) {
	params := url.Values{}
	if h.dc != "" {
		params.Set("dc", h.dc)
	}
	if q.AllowStale {
		params.Set("stale", "")
	}
	if q.RequireConsistent {
		params.Set("consistent", "")
	}
	if q.WaitIndex != 0 {
		params.Set("index", strconv.FormatUint(q.WaitIndex, 10))
	}
	if q.WaitTime != 0 {
		params.Set("wait", strconv.FormatInt(max(int64(q.WaitTime/time.Millisecond), 1), 10)+"ms")
	}
	for _, t := range h.tags {
		params.Add("tag", t)
	}
	if h.passing {
		params.Set(api.HealthPassing, "1")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
	if err != nil {
		return nil, 0, err
	}
	req.URL = &url.URL{Scheme: h.scheme, Host: h.host, Path: "/v1/health/service/" + name, RawQuery: params.Encode()}
	req.Host = h.host
	if h.token != "" {
		req.Header.Set("X-Consul-Token", h.token)
	}
	resp, err := h.rt.RoundTrip(req)
	if err != nil {
		return nil, 0, fmt.Errorf("query %s: %w", req.URL.Redacted(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, 0, api.StatusError{Code: resp.StatusCode, Body: string(body)}
	}
	index, err := strconv.ParseUint(resp.Header.Get("X-Consul-Index"), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("failed to parse X-Consul-Index: %w", err)
	}
	var out []*api.ServiceEntry
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, 0, err
	}
	return out, index, nil
}
