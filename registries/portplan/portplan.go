// Package portplan is the conversion toolkit of instance-based platforms
// (Consul, Eureka, Nacos, ZooKeeper): each instance states its own ports,
// and a service's ports and endpoints are planned from what they say
// (docs/architecture.md §3.1.1). A platform validates its instances,
// decides what each one serves (an Instance), and Plan materialises the
// service:
//
//   - IP vs hostname: an EDS service needs IP addresses, a DNS one
//     hostnames; when both appear the IPs are kept and the hostnames
//     rejected (Rejects.HostnameAmongIPs).
//   - Votes → numbers: the service serves every port name one of its
//     instances declares, each on the number most of those instances give
//     (the smallest on a tie), and with the protocol most of them give.
//   - Taken numbers: one number cannot be two ports. Port names pick in
//     rank order (Options.ByUse: the name declared by more instances
//     first; else by name), each taking its most given number that no
//     earlier name took; a name left with none is dropped
//     (Rejects.PortDropped).
//   - NotServed: an endpoint that does not serve one of the service's ports
//     is marked model.NotServed on it (left out of that port's endpoints,
//     not rejected); one that serves none of them is rejected
//     (Rejects.ServesNoPort).
package portplan

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

// Port is one port an instance serves, under its port name.
type Port struct {
	Number uint32
	// Protocol is the instance's vote for the port's protocol; "" votes
	// for nothing (Options.Protocol decides when nobody votes).
	Protocol model.Protocol
}

// Instance is one validated instance: its endpoint (without Ports: the
// plan fills them), the ports it serves by name, and whether its address
// is an IP address (else a hostname).
type Instance struct {
	Endpoint model.Endpoint
	Ports    map[string]Port
	IP       bool
}

// Options are a platform's choices where platforms differ.
type Options struct {
	// ByUse ranks port names by how many instances declare them, most
	// first, then by name; otherwise by name.
	ByUse bool
	// SortByNumber orders the service's ports by number; otherwise in rank
	// order.
	SortByNumber bool
	// Explicit writes every served port's number into the endpoint's
	// Ports; otherwise only the numbers that differ from the service port
	// (and NotServed).
	Explicit bool
	// Protocol is a port's protocol when none of its instances votes for
	// one. Nil: TCP.
	Protocol func(name string) model.Protocol
}

// Rejects are called for instances and ports the plan leaves out, in the
// order it meets them; a nil one leaves the item out silently.
type Rejects struct {
	// HostnameAmongIPs: in's address is a hostname while others are IPs.
	HostnameAmongIPs func(in Instance)
	// PortDropped: every number the port name's instances use is taken.
	PortDropped func(name string)
	// ServesNoPort: in serves none of the service's ports (its numbers
	// were taken by other names).
	ServesNoPort func(in Instance)
}

// Result is the planned part of a service.
type Result struct {
	Ports      []model.Port
	Endpoints  []model.Endpoint // sorted by Origin, then Address
	Resolution model.Resolution // EDS if any address is an IP, else DNS
}

// Plan plans the ports and endpoints of one service from its instances.
// ok is false when no endpoint is left: publish no service. Plan does not
// modify insts (an endpoint's Ports map is a new one).
func Plan(insts []Instance, opts Options, rej Rejects) (Result, bool) {
	anyIP := slices.ContainsFunc(insts, func(i Instance) bool { return i.IP })
	kept := make([]Instance, 0, len(insts))
	numbers := map[string]map[uint32]int{}
	protos := map[string]map[model.Protocol]int{}
	for _, in := range insts {
		if anyIP && !in.IP {
			if rej.HostnameAmongIPs != nil {
				rej.HostnameAmongIPs(in)
			}
			continue
		}
		for name, p := range in.Ports {
			if numbers[name] == nil {
				numbers[name], protos[name] = map[uint32]int{}, map[model.Protocol]int{}
			}
			numbers[name][p.Number]++
			if p.Protocol != "" {
				protos[name][p.Protocol]++
			}
		}
		kept = append(kept, in)
	}
	if len(kept) == 0 {
		return Result{}, false
	}

	names := slices.Collect(maps.Keys(numbers))
	total := func(name string) int {
		n := 0
		for _, v := range numbers[name] {
			n += v
		}
		return n
	}
	slices.SortFunc(names, func(a, b string) int {
		if opts.ByUse {
			if c := cmp.Compare(total(b), total(a)); c != 0 {
				return c
			}
		}
		return cmp.Compare(a, b)
	})
	res := Result{Resolution: model.ResolutionEDS}
	if !anyIP {
		res.Resolution = model.ResolutionDNS
	}
	taken := map[uint32]bool{}
	for _, name := range names {
		i := slices.IndexFunc(registries.Ranked(numbers[name]), func(n uint32) bool { return !taken[n] })
		if i < 0 {
			if rej.PortDropped != nil {
				rej.PortDropped(name)
			}
			continue
		}
		n := registries.Ranked(numbers[name])[i]
		taken[n] = true
		def := model.ProtocolTCP
		if opts.Protocol != nil {
			def = opts.Protocol(name)
		}
		res.Ports = append(res.Ports, model.Port{Name: name, Number: n, Protocol: registries.Majority(protos[name], def)})
	}
	if opts.SortByNumber {
		slices.SortFunc(res.Ports, func(a, b model.Port) int { return cmp.Compare(a.Number, b.Number) })
	}

	res.Endpoints = make([]model.Endpoint, 0, len(kept))
	for _, in := range kept {
		ep := in.Endpoint
		ep.Ports = nil
		served := 0
		for _, p := range res.Ports {
			n := model.NotServed
			if ip, has := in.Ports[p.Name]; has {
				n = ip.Number
				served++
			}
			if opts.Explicit || n != p.Number {
				if ep.Ports == nil {
					ep.Ports = map[string]uint32{}
				}
				ep.Ports[p.Name] = n
			}
		}
		if served == 0 {
			if rej.ServesNoPort != nil {
				rej.ServesNoPort(in)
			}
			continue
		}
		res.Endpoints = append(res.Endpoints, ep)
	}
	if len(res.Endpoints) == 0 {
		return Result{}, false
	}
	slices.SortStableFunc(res.Endpoints, func(a, b model.Endpoint) int {
		return cmp.Or(strings.Compare(a.Origin, b.Origin), strings.Compare(a.Address, b.Address))
	})
	return res, true
}
