package translate

import (
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/istioconfig/drmerge"
	"github.com/meshfed/meshfed/model"
)

// hostIndex finds the traffic config of a service hostname as Istio's
// sidecars do (docs/architecture.md §3.6):
//   - A VirtualService applies to the mesh when its gateways are empty or
//     hold "mesh"; its hosts and a DestinationRule's host are exact names,
//     "*.suffix" wildcards or "*". Short names ("reviews") resolve in the
//     rule's namespace to reviews.<ns>.svc.cluster.local.
//   - The most specific host wins: an exact name, then the longest
//     wildcard suffix, then "*" (Istio's mostSpecificWildcardVsIndex).
//   - Between VirtualServices naming the same host string, the config
//     source keeps one per host (the oldest), so there is no tie. The
//     DestinationRules naming one host string (one namespace: the source
//     refuses others) are merged into one rule as Istio merges them
//     (drmerge).
type hostIndex struct {
	exact map[string]hostConfig
	// merged holds the merged DestinationRule of each host string with
	// several, with the rules it was made of: the next index reuses it
	// while they are the same objects, so the host is not rebuilt.
	merged map[string]mergedDR
	// wild holds wildcard hosts ("*.suffix" as ".suffix", "*" as ""),
	// longest first.
	wildVS, wildDR []wildRule
	// cfg is the snapshot indexed: the next Translate with the same
	// snapshot reuses the index, memo included.
	cfg *model.ConfigSnapshot
	// memo holds lookup's answers: finding a host's wildcard rules scans
	// them all, which with many wildcard rules and services dominated a
	// one-service update (BenchmarkWildcardRulesFlip).
	memo map[string]hostConfig
}

type wildRule struct {
	suffix string
	obj    *model.ConfigObject
}

type mergedDR struct {
	from []*model.ConfigObject // in snapshot order
	obj  *model.ConfigObject
}

// configByHost indexes cfg by host; prev (may be nil) is the index of
// the previous snapshot: returned as is when it indexes cfg (config
// snapshots are immutable), else its merged rules are reused when
// unchanged.
func configByHost(cfg *model.ConfigSnapshot, prev *hostIndex) *hostIndex {
	if prev != nil && prev.cfg == cfg {
		return prev
	}
	idx := &hostIndex{exact: map[string]hostConfig{}, cfg: cfg, memo: map[string]hostConfig{}}
	drs := map[string][]*model.ConfigObject{}
	var hosts []string
	for _, o := range cfg.Objects() {
		switch sp := o.Spec.(type) {
		case *networking.VirtualService:
			if gw := sp.GetGateways(); len(gw) > 0 && !slices.Contains(gw, meshGateway) {
				continue // gateway-only rules do not apply to clients in the mesh
			}
			for _, h := range sp.GetHosts() {
				idx.add(fqdn(h, o.Namespace), o, true)
			}
		case *networking.DestinationRule:
			h := fqdn(sp.GetHost(), o.Namespace)
			if drs[h] == nil {
				hosts = append(hosts, h)
			}
			drs[h] = append(drs[h], o)
		}
	}
	for _, h := range hosts {
		rules := drs[h]
		if len(rules) == 1 {
			idx.add(h, rules[0], false)
			continue
		}
		if idx.merged == nil {
			idx.merged = map[string]mergedDR{}
		}
		m, ok := mergedDR{}, false
		if prev != nil {
			m, ok = prev.merged[h]
		}
		if !ok || !slices.Equal(m.from, rules) {
			m = mergedDR{from: rules, obj: mergeRules(rules)}
		}
		idx.merged[h] = m
		idx.add(h, m.obj, false)
	}
	byLen := func(a, b wildRule) int { return len(b.suffix) - len(a.suffix) }
	slices.SortStableFunc(idx.wildVS, byLen)
	slices.SortStableFunc(idx.wildDR, byLen)
	return idx
}

func (idx *hostIndex) add(h string, o *model.ConfigObject, isVS bool) {
	if h == "*" || strings.HasPrefix(h, "*.") {
		w := wildRule{suffix: strings.TrimPrefix(h, "*"), obj: o}
		if isVS {
			idx.wildVS = append(idx.wildVS, w)
		} else {
			idx.wildDR = append(idx.wildDR, w)
		}
		return
	}
	hc := idx.exact[h]
	if isVS && hc.vs == nil {
		hc.vs = o
	} else if !isVS && hc.dr == nil {
		hc.dr = o
	}
	idx.exact[h] = hc
}

// lookup returns the traffic config of a service hostname.
func (idx *hostIndex) lookup(host string) hostConfig {
	if idx == nil {
		return hostConfig{}
	}
	if hc, ok := idx.memo[host]; ok {
		return hc
	}
	hc := idx.find(host)
	idx.memo[host] = hc
	return hc
}

// trimMemo forgets the memoised lookups when they hold many more hosts
// than the snapshot has services (hosts gone since), bounding the memory.
func (idx *hostIndex) trimMemo(services int) {
	if idx != nil && len(idx.memo) > 2*services+1024 {
		clear(idx.memo)
	}
}

// find is lookup without the memo.
func (idx *hostIndex) find(host string) hostConfig {
	hc := idx.exact[host]
	wild := func(rules []wildRule) *model.ConfigObject {
		for _, w := range rules {
			if strings.HasSuffix(host, w.suffix) && len(host) > len(w.suffix) {
				return w.obj
			}
		}
		return nil
	}
	if hc.vs == nil {
		hc.vs = wild(idx.wildVS)
	}
	if hc.dr == nil {
		hc.dr = wild(idx.wildDR)
	}
	return hc
}

// namespace is the namespace of the host's VirtualService ("" without).
func (hc hostConfig) namespace() string {
	if hc.vs == nil {
		return ""
	}
	return hc.vs.Namespace
}

// mergeRules is the one DestinationRule the rules for one host make
// (drmerge.Merge), as a config object named after the oldest rule.
func mergeRules(rules []*model.ConfigObject) *model.ConfigObject {
	r := drmerge.Merge(rules)
	first := r.From[0]
	o := &model.ConfigObject{Kind: first.Kind, Namespace: first.Namespace, Name: first.Name,
		Created: first.Created, File: first.File, Line: first.Line, Spec: r.Spec}
	var src, hash []string
	for _, f := range r.From {
		src, hash = append(src, f.Source), append(hash, f.Hash)
	}
	o.Source, o.Hash = strings.Join(src, " + "), strings.Join(hash, "+")
	return o
}

// describe names the objects of hc, as "VirtualService ns/name,
// DestinationRule ns/name (source)".
func (hc hostConfig) describe() string {
	var parts []string
	for _, o := range []*model.ConfigObject{hc.vs, hc.dr} {
		if o != nil {
			parts = append(parts, o.Kind+" "+o.Namespace+"/"+o.Name+" ("+o.Source+")")
		}
	}
	return strings.Join(parts, ", ")
}
