package eureka

import (
	"slices"
	"strings"
	"unique"

	"github.com/hudl/fargo"

	"github.com/meshfed/meshfed/pack"
)

// The state's records. Decoding an answer makes many small allocations
// (the JSON decoder's, fargo's records, each string); records kept one
// by one among them keep most of the heap's spans they sit in alive and
// mostly empty (bench/analysis.md, "Where the RSS above the heap went").
// So the state keeps copies made after the decode: a full fetch's
// instances are one array and their strings one pack (settle), and an
// instance a delta adds or changes is one record and one pack of its
// own. A record replaced by a delta leaves its slot in its fetch's array
// unused until the next full fetch replaces the whole state: the waste is
// bounded by one full fetch. Nothing else points into the records'
// strings: conversion copies what it publishes (convertApp).

// appInstances are the instances of one app in the state, sorted by id,
// one per id. A full fetch's apps are windows of one array of pointers,
// each with no room beyond its end, so that a delta may change an app's
// list in place and an insert moves it out.
type appInstances []*instance

// find returns the position of the instance with id in a, and whether it
// is there.
func (a appInstances) find(id string) (int, bool) {
	return slices.BinarySearchFunc(a, id, func(in *instance, id string) int { return strings.Compare(in.id(), id) })
}

// settle copies ins into one new array (their rare fields into another),
// their strings into one new pack, with the delta action dropped and the status canonical (package
// unique: few values). Equal metadata is held once (instances alike carry
// the same), and so is a host name equal to the address.
func settle(ins []instance) []instance {
	out := slices.Clone(ins)
	strs := make([]*string, 0, 4*len(out))
	firstMeta := map[string]int{} // metadata → first instance with it
	nrare := 0
	for i := range out {
		if out[i].rare != nil {
			nrare++
		}
	}
	rares := make([]rareFields, 0, nrare)
	for i := range out {
		in := &out[i]
		in.deleted = false
		in.Status = fargo.StatusType(unique.Make(string(in.Status)).Value())
		strs = append(strs, &in.InstanceId, &in.IPAddr)
		if in.rare != nil {
			rares = append(rares, *in.rare)
			in.rare = &rares[len(rares)-1]
			strs = append(strs, &in.rare.awsID, &in.rare.zone, &in.rare.problem)
		}
		if in.HostName != in.IPAddr {
			strs = append(strs, &in.HostName)
		}
		if _, ok := firstMeta[in.Metadata]; !ok {
			firstMeta[in.Metadata] = i
			strs = append(strs, &in.Metadata)
		}
	}
	pack.Strings(strs...)
	for i := range out {
		in := &out[i]
		if in.HostName == in.IPAddr {
			in.HostName = in.IPAddr
		}
		in.Metadata = out[firstMeta[in.Metadata]].Metadata
	}
	return out
}

// settleFull turns a full fetch into the state: app key → instances,
// settled together (settle). Apps named twice are merged; of the
// instances of an app with the same id, the last one counts.
func settleFull(p *payload) map[string]appInstances {
	var order []string
	byKey := make(map[string][]instance, len(p.apps))
	n := 0
	for _, a := range p.apps {
		key := appKey(a.name)
		if _, ok := byKey[key]; !ok {
			order = append(order, key)
		}
		byKey[key] = append(byKey[key], a.instances...)
		n += len(a.instances)
	}
	all := make([]instance, 0, n)
	bounds := make([]int, 0, len(order)+1)
	for _, key := range order {
		start := len(all)
		all = append(all, byKey[key]...)
		app := all[start:]
		slices.SortStableFunc(app, func(a, b instance) int { return strings.Compare(a.id(), b.id()) })
		// One per id, the last one listed: a stable sort keeps their order.
		kept := 0
		for i := range app {
			if kept > 0 && app[kept-1].id() == app[i].id() {
				kept--
			}
			app[kept] = app[i]
			kept++
		}
		all = all[:start+kept]
		bounds = append(bounds, start)
	}
	bounds = append(bounds, len(all))
	all = settle(all)
	ptrs := make([]*instance, len(all))
	for i := range all {
		ptrs[i] = &all[i]
	}
	apps := make(map[string]appInstances, len(order))
	for i, key := range order {
		apps[key] = ptrs[bounds[i]:bounds[i+1]:bounds[i+1]]
	}
	return apps
}
