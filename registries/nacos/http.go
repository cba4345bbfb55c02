package nacos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/meshfed/meshfed/registries"
)

// serviceInfo is a service's instance list as Nacos answers a subscription,
// pushes a change, or lists instances over HTTP.
type serviceInfo struct {
	Name        string     `json:"name"`
	GroupName   string     `json:"groupName"`
	Hosts       []instance `json:"hosts"`
	LastRefTime int64      `json:"lastRefTime"`
}

// pollHTTP runs the http transport: every pollInterval it lists the
// services of every group and fetches each one's instances, then applies
// and publishes the whole state at once. It returns on the first error.
func (r *Registry) pollHTTP(ctx context.Context, cl *client, st *state) error {
	for {
		if err := r.syncHTTP(ctx, cl, st); err != nil {
			return st.permanentIfAuth(err)
		}
		if err := registries.Sleep(ctx, r.cfg.PollInterval.Std()); err != nil {
			return err
		}
	}
}

// syncHTTP reads the whole state once, trying the servers in order.
func (r *Registry) syncHTTP(ctx context.Context, cl *client, st *state) error {
	n := len(r.cfg.Servers)
	var errs []error
	for attempt := range n {
		i := (cl.current + attempt) % n
		lists, at, err := r.readAllHTTP(ctx, cl, i)
		if err == nil {
			cl.current = i
			changed := false
			keep := map[serviceKey]bool{}
			for key, info := range lists {
				keep[key] = true
				if st.set(key, info.Hosts, 0) {
					changed = true
				}
			}
			if st.retain(keep) {
				changed = true
			}
			st.publish(changed, at)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ae *authError
		if errors.As(err, &ae) {
			return err
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// readAllHTTP lists every wanted service of every group on server i and
// fetches its instances.
func (r *Registry) readAllHTTP(ctx context.Context, cl *client, i int) (map[serviceKey]*serviceInfo, time.Time, error) {
	if err := cl.login(ctx, i); err != nil {
		r.m.conn.Err.Inc()
		return nil, time.Time{}, err
	}
	out := map[serviceKey]*serviceInfo{}
	for _, group := range r.cfg.Groups {
		names, err := r.listHTTP(ctx, cl, i, group)
		if err != nil {
			r.m.list.Err.Inc()
			return nil, time.Time{}, err
		}
		r.m.list.OK.Inc()
		for _, name := range names {
			key := serviceKey{group: group, name: name}
			q := url.Values{
				"serviceName": {key.String()}, "groupName": {group}, "namespaceId": {r.cfg.Namespace},
				"healthyOnly": {"false"},
			}
			var info serviceInfo
			if err := cl.getJSON(ctx, i, "/v1/ns/instance/list", q, key.String(), &info); err != nil {
				r.m.inst.Err.Inc()
				return nil, time.Time{}, err
			}
			r.m.inst.OK.Inc()
			out[key] = &info
		}
	}
	return out, time.Now(), nil
}

// listHTTP returns the wanted service names of a group, all pages.
func (r *Registry) listHTTP(ctx context.Context, cl *client, i int, group string) ([]string, error) {
	return listAll(r.cfg.wanted, nil, func(pageNo, pageSize int) ([]string, int, error) {
		q := url.Values{
			"pageNo": {strconv.Itoa(pageNo)}, "pageSize": {strconv.Itoa(pageSize)},
			"namespaceId": {r.cfg.Namespace}, "groupName": {group},
		}
		var ans struct {
			Count int      `json:"count"`
			Doms  []string `json:"doms"`
		}
		err := cl.getJSON(ctx, i, "/v1/ns/service/list", q, "", &ans)
		return ans.Doms, ans.Count, err
	})
}

// listAll reads a group's service list page by page with fetch (names of
// one page, the server's count) and returns the names wanted keeps, each
// once. Pages agree only if the server orders the services alike on
// every call; Polaris 1.18 lists them in its cache's map order, so pages
// overlap and leave services out (at 1,000 services: 502 found, the rest
// dropped and found again on the next list). When the pages hold fewer
// distinct names than the count, the list is read again as one page
// holding them all. whole, when not nil, remembers that across lists: it
// is the count of the last list whose pages overlapped (0: none), and
// such a group is read as one page from the first request on (at 10,000
// services: one request instead of 21, and half the names decoded).
func listAll(wanted func(string) bool, whole *int, fetch func(pageNo, pageSize int) ([]string, int, error)) ([]string, error) {
	seen := map[string]bool{}
	var names []string
	add := func(page []string) {
		for _, n := range page {
			if n == "" {
				continue
			}
			if !seen[n] && wanted(n) {
				names = append(names, n)
			}
			seen[n] = true
		}
	}
	if whole != nil && *whole > 0 {
		page, c, err := fetch(1, *whole+1)
		if err != nil {
			return nil, err
		}
		add(page)
		if len(seen) < c { // more services than last time
			if page, _, err = fetch(1, c+1); err != nil {
				return nil, err
			}
			add(page)
		}
		*whole = c
		return names, nil
	}
	count := 0
	for pageNo := 1; pageNo <= 10000; pageNo++ {
		page, c, err := fetch(pageNo, defaultPageSize)
		if err != nil {
			return nil, err
		}
		count = max(count, c)
		add(page)
		if len(page) < defaultPageSize || len(seen) >= c {
			break
		}
	}
	if len(seen) < count {
		// One more than the count: Polaris 1.18 slices a group's names
		// past their end (empty names) when a page ends exactly at the
		// count of all groups' services.
		page, _, err := fetch(1, count+1)
		if err != nil {
			return nil, err
		}
		add(page)
		if whole != nil {
			*whole = count
		}
	}
	return names, nil
}

// getJSON GETs path on server i with the credentials and decodes the JSON
// answer into v.
func (c *client) getJSON(ctx context.Context, i int, path string, q url.Values, resource string, v any) error {
	for k, val := range c.authHeaders(resource) {
		q.Set(k, val)
	}
	u := c.baseURL(i) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"?"+q.Encode(), nil)
	if err != nil {
		return fmt.Errorf("%s: %w", u, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %s", u, registries.NetReason(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return fmt.Errorf("%s: reading the answer: %s", u, registries.NetReason(err))
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return &authError{msg: fmt.Sprintf("%s: HTTP %d", u, resp.StatusCode)}
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("%s: HTTP %d %s", u, resp.StatusCode, http.StatusText(resp.StatusCode))
	case len(body) > maxAnswer:
		return fmt.Errorf("%s: answer larger than %d MiB", u, maxAnswer>>20)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s: answer is not the expected JSON: %v", u, err)
	}
	return nil
}
