package istioconfig

import (
	"iter"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/istioconfig/drmerge"
	"github.com/meshfed/meshfed/model"
)

// MergedRule is one host whose DestinationRules are merged into one, as
// Istio merges them (drmerge; docs/architecture.md §3.6). /debug/configz
// lists it under "merged".
type MergedRule struct {
	// Host is the rules' host, resolved in their namespace.
	Host string `json:"host"`
	// Objects are the merged rules ("namespace/name"), oldest first: the
	// order their subsets were taken in.
	Objects []string `json:"objects"`
	// Policy names the rule whose top-level trafficPolicy is in force
	// ("" when none has one).
	Policy string `json:"policy,omitempty"`
	// IgnoredPolicies are the later rules whose trafficPolicy is not used.
	IgnoredPolicies []string `json:"ignoredPolicies,omitempty"`
	// DroppedSubsets are subsets left out because an older rule has a
	// subset of the same name.
	DroppedSubsets []drmerge.DroppedSubset `json:"droppedSubsets,omitempty"`
}

// mergedRules lists the hosts of the objects in force that have several
// DestinationRules, sorted by host.
func mergedRules(inForce iter.Seq[*model.ConfigObject]) []MergedRule {
	byHost := map[string][]*model.ConfigObject{}
	for o := range inForce {
		if o.Kind != KindDestinationRule {
			continue
		}
		for _, h := range claims(o) {
			byHost[h] = append(byHost[h], o)
		}
	}
	var out []MergedRule
	for h, rules := range byHost {
		if len(rules) < 2 {
			continue
		}
		r := drmerge.Merge(rules)
		m := MergedRule{Host: h, IgnoredPolicies: r.IgnoredPolicies, DroppedSubsets: r.DroppedSubsets}
		for _, o := range r.From {
			m.Objects = append(m.Objects, o.Namespace+"/"+o.Name)
			if m.Policy == "" && o.Spec.(*networking.DestinationRule).GetTrafficPolicy() != nil {
				m.Policy = o.Namespace + "/" + o.Name
			}
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b MergedRule) int { return strings.Compare(a.Host, b.Host) })
	return out
}
