package model

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"slices"
	"strconv"
	"strings"
)

// Digest is a content digest of a snapshot: what it serves, not how or when
// it was built. Two meshfed replicas that read the same registries compute
// the same Digest (docs/architecture.md, "HA"), whatever their snapshot
// versions, timestamps or the order in which registries listed things.
type Digest struct {
	// Overall covers every service: hostname, resolution, ports, sources
	// and endpoints.
	Overall string
	// Registries covers, per registry name, the services that registry
	// contributes with only that registry's endpoints. A registry that
	// contributes nothing is absent.
	Registries map[string]string
}

// EmptyDigest is the digest of nothing: what a registry that contributes
// no service has.
var EmptyDigest = hex.EncodeToString(sha256.New().Sum(nil))

// DigestOf computes the Digest of s (nil: no services). Endpoint order,
// port order, label order and Endpoint.Origin (not served) do not change
// it; every served field does.
func DigestOf(s *Snapshot) Digest {
	overall := sha256.New()
	per := map[string]hash.Hash{}
	for _, svc := range s.Services() {
		head := serviceLine(svc)
		writeLines(overall, head, endpointLines(svc.Endpoints, ""))
		for _, reg := range svc.Sources {
			h, ok := per[reg]
			if !ok {
				h = sha256.New()
				per[reg] = h
			}
			writeLines(h, head, endpointLines(svc.Endpoints, reg))
		}
	}
	d := Digest{Overall: hex.EncodeToString(overall.Sum(nil)), Registries: make(map[string]string, len(per))}
	for reg, h := range per {
		d.Registries[reg] = hex.EncodeToString(h.Sum(nil))
	}
	return d
}

func writeLines(h hash.Hash, head string, eps []string) {
	h.Write([]byte(head))
	for _, e := range eps {
		h.Write([]byte(e))
	}
}

// serviceLine encodes a service without its endpoints; strconv.Quote keeps
// fields unambiguous whatever they hold.
func serviceLine(s *Service) string {
	ports := slices.Clone(s.Ports)
	slices.SortFunc(ports, func(a, b Port) int { return int(a.Number) - int(b.Number) })
	var b strings.Builder
	b.WriteString("S ")
	b.WriteString(strconv.Quote(s.Hostname))
	b.WriteString(" " + s.Resolution.String())
	for _, p := range ports {
		b.WriteString(" " + strconv.Quote(p.Name) + ":" + strconv.FormatUint(uint64(p.Number), 10) + ":" + string(p.Protocol))
	}
	b.WriteString(" sources")
	for _, src := range s.Sources {
		b.WriteString(" " + strconv.Quote(src))
	}
	b.WriteString("\n")
	return b.String()
}

// endpointLines encodes the endpoints (of registry reg only, unless reg is
// ""), sorted.
func endpointLines(eps []Endpoint, reg string) []string {
	out := make([]string, 0, len(eps))
	for i := range eps {
		e := &eps[i]
		if reg != "" && e.Source.Registry != reg {
			continue
		}
		var b strings.Builder
		b.WriteString("E ")
		b.WriteString(strconv.Quote(e.Address))
		b.WriteString(" " + e.Health.String())
		w := e.Weight
		if w == 0 {
			w = 1
		}
		b.WriteString(" w" + strconv.FormatUint(uint64(w), 10))
		b.WriteString(" " + strconv.Quote(e.Locality.String()))
		b.WriteString(" " + strconv.Quote(e.Source.Registry) + " " + strconv.Quote(e.Source.Cluster) + " " + strconv.Quote(e.Source.Network))
		b.WriteString(" ports")
		for _, k := range sortedKeys(e.Ports) {
			b.WriteString(" " + strconv.Quote(k) + "=" + strconv.FormatUint(uint64(e.Ports[k]), 10))
		}
		b.WriteString(" labels")
		for _, k := range sortedKeys(e.Labels) {
			b.WriteString(" " + strconv.Quote(k) + "=" + strconv.Quote(e.Labels[k]))
		}
		b.WriteString("\n")
		out = append(out, b.String())
	}
	slices.Sort(out)
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
