package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/meshfed/meshfed/model"
)

// The file scenario (issue #16, "the user's path"): the registry is a real
// services file that the report rewrites, read by a real meshfed (or, as
// ServiceEntry files, by istiod). Health and labels do not survive into
// istiod's EDS, so an event is marked in the one thing both servers pass
// through: the changed endpoint's address, SeqAddr(seq).

// seqPrefix is the first two octets of every marker address; fixture
// addresses never use them (their second octet is at most 16+255>>8+…<254).
const seqPrefix = "10.254."

// SeqAddr is the address that marks event seq (1 ≤ seq < 65536).
func SeqAddr(seq int64) string {
	return seqPrefix + strconv.FormatInt(seq>>8&255, 10) + "." + strconv.FormatInt(seq&255, 10)
}

var seqPrefixB = []byte(seqPrefix)

// MaxSeqAddr returns the highest seq whose SeqAddr appears in a serialized
// ClusterLoadAssignment (a byte scan; the address string is followed by a
// protobuf tag, never a digit or dot). ok is false when none does.
func MaxSeqAddr(raw []byte) (seq int64, ok bool) {
	return maxAfter(raw, seqPrefixB, parseSeqAddr)
}

// parseSeqAddr reads the last two octets of a marker address, `a.b`, as
// the seq a<<8|b.
func parseSeqAddr(raw []byte) (int64, bool) {
	var a, b int64
	j, dots := 0, 0
	for ; j < len(raw) && (raw[j] == '.' || raw[j] >= '0' && raw[j] <= '9'); j++ {
		switch {
		case raw[j] == '.':
			dots++
		case dots == 0:
			a = a*10 + int64(raw[j]-'0')
		default:
			b = b*10 + int64(raw[j]-'0')
		}
	}
	return a<<8 | b, dots == 1 && j > 2
}

// FlipAddr gives the next endpoint slot of service i the marker address of
// a new event (a pod replaced) and returns the event's sequence number.
func (st *State) FlipAddr(i int) int64 {
	st.seq++
	j := int(st.seq % int64(st.eps))
	e := endpoint(i, j, st.gens[i][j], st.seq)
	e.Address = SeqAddr(st.seq)
	st.withEndpoint(i, j, e)
	return st.seq
}

// svcName is the registry's name of service i: with the file registry's
// domain Domain its hostname is Host(i).
func svcName(s *model.Service) string { return strings.TrimSuffix(s.Hostname, "."+Domain) }

// ServicesYAML renders services as a meshfed services file in the plain
// subset the file registry's fast path reads (registries/file/fast.go).
// Labels other than app and version (the seq marker) are left out.
func ServicesYAML(services []model.Service) []byte {
	var b bytes.Buffer
	b.Grow(len(services) * 1200)
	b.WriteString("services:\n")
	for i := range services {
		s := &services[i]
		fmt.Fprintf(&b, "  - name: %s\n    ports:\n      - {name: http, port: %d, protocol: HTTP}\n    endpoints:\n", svcName(s), Port)
		for _, e := range s.Endpoints {
			fmt.Fprintf(&b, "      - address: %s\n        locality: %s/%s\n        labels: {app: %s, version: %s}\n",
				e.Address, e.Locality.Region, e.Locality.Zone, e.Labels["app"], e.Labels["version"])
		}
	}
	return b.Bytes()
}

// ServicesFlowYAML renders services as ServicesYAML does, in the compact
// flow style of issue #22's 1 MB file: each endpoint one line of nested
// flow mappings (`- {address: …, ports: {http: …}, locality: …, labels:
// {…}}`), which the file registry's fast path does not read (each
// service's range is then parsed through the YAML node tree,
// registries/file/items.go).
func ServicesFlowYAML(services []model.Service) []byte {
	var b bytes.Buffer
	b.Grow(len(services) * 1200)
	b.WriteString("services:\n")
	for i := range services {
		s := &services[i]
		fmt.Fprintf(&b, "  - name: %s\n    ports: [{name: http, port: %d, protocol: HTTP}]\n    endpoints:\n", svcName(s), Port)
		for _, e := range s.Endpoints {
			fmt.Fprintf(&b, "      - {address: %s, ports: {http: %d}, locality: %s/%s, labels: {app: %s, version: %s}}\n",
				e.Address, Port, e.Locality.Region, e.Locality.Zone, e.Labels["app"], e.Labels["version"])
		}
	}
	return b.Bytes()
}

// ServiceEntryYAML renders service s as an Istio ServiceEntry (STATIC,
// MESH_INTERNAL) with the same endpoints, ports and localities.
func ServiceEntryYAML(s *model.Service) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: %s\n  namespace: default\nspec:\n  hosts: [%s]\n  location: MESH_INTERNAL\n  resolution: STATIC\n  ports:\n  - {name: http, number: %d, protocol: HTTP}\n  endpoints:\n",
		svcName(s), s.Hostname, Port)
	for _, e := range s.Endpoints {
		fmt.Fprintf(&b, "  - address: %s\n    locality: %s/%s\n    labels: {app: %s, version: %s}\n",
			e.Address, e.Locality.Region, e.Locality.Zone, e.Labels["app"], e.Labels["version"])
	}
	return b.Bytes()
}

// WriteFileAtomic writes data to path through a temporary file and a
// rename, as editors and config management tools do.
func WriteFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
