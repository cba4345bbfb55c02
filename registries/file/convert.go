package file

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v4"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/validate"
	"github.com/meshfed/meshfed/yamlconf"
	"github.com/meshfed/meshfed/yamlconf/yamlpath"
)

// The services file, as decoded. Numbers are int64 and optional values
// pointers so that validation can name what is missing or out of range.
type servicesFile struct {
	Services *[]serviceEntry `yaml:"services"`
}

type serviceEntry struct {
	Name       string          `yaml:"name"`
	Resolution string          `yaml:"resolution"`
	Ports      []portEntry     `yaml:"ports"`
	Endpoints  []endpointEntry `yaml:"endpoints"`
}

type portEntry struct {
	Name     string `yaml:"name"`
	Port     *int64 `yaml:"port"`
	Protocol string `yaml:"protocol"`
}

type endpointEntry struct {
	Address  string            `yaml:"address"`
	Ports    map[string]int64  `yaml:"ports"`
	Labels   map[string]string `yaml:"labels"`
	Locality string            `yaml:"locality"`
	Weight   *int64            `yaml:"weight"`
	Health   string            `yaml:"health"`
}

// Error is one problem in a services file, at a line, column and key when
// known: "services.yaml:12:9: services[0].endpoints[1].health: unknown
// health ...".
type Error struct {
	File   string // base name of the file
	Line   int    // 1-based; 0 if unknown
	Column int    // 1-based; 0 if unknown
	Key    string // e.g. services[0].ports[1].port; "" if unknown
	Msg    string
}

func (e *Error) Error() string {
	return yamlconf.Problem{File: e.File, Line: e.Line, Column: e.Column, Key: e.Key, Msg: e.Msg}.String()
}

// Errors is every problem found in a services file, in file order. Any of
// them rejects the whole file.
type Errors []*Error

// maxErrors bounds how many problems one parse reports.
const maxErrors = 20

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Parse reads a services file's content (YAML 1.2, through
// package yamlconf like clusters.yaml). name is the file's base name,
// used in errors and in each endpoint's Origin ("services.yaml:LINE"). It
// returns the services under c (hostnames <name>.<c.Domain>, sources
// c.Name), never a nil slice, or an Errors listing every problem (at most
// 20) when any part of the file is invalid. Endpoint addresses are not
// checked: the aggregator quarantines bad ones individually.
func Parse(name string, data []byte, c registries.Common) ([]model.Service, error) {
	// The fast path (see fast.go); any doubt or problem takes the node path.
	if services, ok := fastParse(name, data, c); ok {
		return services, nil
	}
	return parseNodes(name, data, c)
}

// parseNodes is Parse through the YAML node tree, every problem at its
// position.
func parseNodes(name string, data []byte, c registries.Common) ([]model.Service, error) {
	root, probs := yamlconf.Parse(name, data)
	if len(probs) > 0 {
		return nil, toErrors(probs)
	}
	p := &parse{file: name, root: root, d: yamlconf.NewDecoder(name, "", len(data))}
	var sf servicesFile
	p.d.Decode("", root, root, &sf)
	if sf.Services == nil && !p.d.HasProblem("services") {
		p.errorf("services", "is required (write `services: []` for none)")
	}
	var services []model.Service
	if sf.Services != nil {
		services = p.convert(*sf.Services, c)
	}
	if probs := p.d.Problems(); len(probs) > 0 {
		return nil, toErrors(probs)
	}
	return services, nil
}

func toErrors(probs []yamlconf.Problem) Errors {
	errs := make(Errors, 0, min(len(probs), maxErrors+1))
	for _, pr := range probs {
		if len(errs) == maxErrors {
			errs = append(errs, &Error{File: pr.File, Msg: fmt.Sprintf("and %d more errors", len(probs)-maxErrors)})
			break
		}
		errs = append(errs, &Error{File: pr.File, Line: pr.Line, Column: pr.Column, Key: pr.Key, Msg: pr.Msg})
	}
	return errs
}

type parse struct {
	file string
	root *yaml.Node
	d    *yamlconf.Decoder
	// fast: the entries came from the fast path, which has no nodes: any
	// problem sets failed (Parse then takes the node path to report it
	// with its position).
	fast   bool
	failed bool
	names  map[string]string // service name → key of its first declaration
}

// errorf records a problem at key (a path built with at/child), unless
// decoding already found one there.
func (p *parse) errorf(key, format string, args ...any) {
	if p.fast {
		p.failed = true
		return
	}
	if p.d.HasProblem(key) {
		return
	}
	n, _ := yamlpath.Lookup(p.root, key)
	p.d.Addf(n, key, format, args...)
}

// line returns the line of key, or of its closest ancestor present.
func (p *parse) line(key string) int {
	if p.fast {
		return 0
	}
	if n, _ := yamlpath.Lookup(p.root, key); n != nil {
		return n.Line
	}
	return 0
}

func (p *parse) convert(entries []serviceEntry, c registries.Common) []model.Service {
	out := make([]model.Service, 0, len(entries))
	for i, se := range entries {
		out = append(out, p.service(i, se, nil, c))
	}
	return out
}

// service converts services[i]; epLines, on the fast path, are the lines
// of its endpoints.
func (p *parse) service(i int, se serviceEntry, epLines []int, c registries.Common) model.Service {
	if p.names == nil {
		p.names = map[string]string{}
	}
	names := p.names
	{
		key := at("services", i)
		switch {
		case se.Name == "":
			p.errorf(child(key, "name"), "is required")
		case !validate.Label(se.Name):
			p.errorf(child(key, "name"), "%q is not a DNS label (lowercase letters, digits and '-', at most 63)", se.Name)
		case names[se.Name] != "":
			p.errorf(child(key, "name"), "service %q is already declared at line %d", se.Name, p.line(names[se.Name]))
		default:
			names[se.Name] = key
		}
		svc := model.Service{Hostname: se.Name, Endpoints: make([]model.Endpoint, 0, len(se.Endpoints))}
		if c.Domain != "" {
			svc.Hostname = se.Name + "." + c.Domain
		}
		switch strings.ToUpper(se.Resolution) {
		case "", "EDS":
		case "DNS":
			svc.Resolution = model.ResolutionDNS
		default:
			p.errorf(child(key, "resolution"), "unknown resolution %q (want EDS or DNS)", se.Resolution)
		}
		svc.Ports = p.ports(key, se.Ports)
		declared := map[string]bool{}
		for _, port := range svc.Ports {
			declared[port.Name] = true
		}
		for j, ee := range se.Endpoints {
			var line int
			var epKey string
			if p.fast {
				line = epLines[j]
			} else {
				epKey = at(child(key, "endpoints"), j)
				line = p.line(epKey)
			}
			svc.Endpoints = append(svc.Endpoints, p.endpoint(epKey, line, ee, declared, c))
		}
		return svc
	}
}

func (p *parse) ports(svcKey string, entries []portEntry) []model.Port {
	if len(entries) == 0 {
		p.errorf(child(svcKey, "ports"), "at least one port is required")
		return nil
	}
	out := make([]model.Port, 0, len(entries))
	names := map[string]bool{}
	numbers := map[int64]bool{}
	for i, pe := range entries {
		key := at(child(svcKey, "ports"), i)
		port := model.Port{Name: pe.Name}
		switch {
		case pe.Name == "":
			p.errorf(child(key, "name"), "is required")
		case !validate.Label(pe.Name):
			p.errorf(child(key, "name"), "%q is not a DNS label (lowercase letters, digits and '-', at most 63)", pe.Name)
		case names[pe.Name]:
			p.errorf(child(key, "name"), "port name %q is declared twice", pe.Name)
		}
		names[pe.Name] = true
		switch {
		case pe.Port == nil:
			p.errorf(child(key, "port"), "is required")
		case *pe.Port < 1 || *pe.Port > 65535:
			p.errorf(child(key, "port"), "%d is not a port number (1-65535)", *pe.Port)
		case numbers[*pe.Port]:
			p.errorf(child(key, "port"), "port %d is declared twice", *pe.Port)
		default:
			numbers[*pe.Port] = true
			port.Number = uint32(*pe.Port)
		}
		if pe.Protocol == "" {
			p.errorf(child(key, "protocol"), "is required (HTTP, HTTP2, GRPC or TCP)")
		} else if proto, err := model.ParseProtocol(pe.Protocol); err != nil {
			p.errorf(child(key, "protocol"), "%v", err)
		} else {
			port.Protocol = proto
		}
		out = append(out, port)
	}
	return out
}

// endpoint converts the endpoint at key ("" on the fast path, which
// reports no problem itself), declared at line.
func (p *parse) endpoint(key string, line int, ee endpointEntry, declared map[string]bool, c registries.Common) model.Endpoint {
	ep := model.Endpoint{
		Address: ee.Address,
		Weight:  1,
		Source:  model.Source{Registry: c.Name, Cluster: c.Name},
		Origin:  p.file + ":" + strconv.Itoa(line),
	}
	if ee.Address == "" {
		p.errorf(child(key, "address"), "is required")
	}
	if len(ee.Ports) > 0 {
		ep.Ports = make(map[string]uint32, len(ee.Ports))
		for _, name := range sortedKeys(ee.Ports) {
			n := ee.Ports[name]
			pk := child(child(key, "ports"), name)
			switch {
			case !declared[name]:
				p.errorf(pk, "%q is not a port of this service", name)
			case n < 1 || n > 65535:
				p.errorf(pk, "%d is not a port number (1-65535)", n)
			default:
				ep.Ports[name] = uint32(n)
			}
		}
	}
	if len(ee.Labels) > 0 {
		for k := range ee.Labels {
			if k == "" {
				p.errorf(child(key, "labels"), "a label has an empty key")
			}
		}
		ep.Labels = ee.Labels
	}
	if l, err := model.ParseLocality(ee.Locality); err != nil {
		p.errorf(child(key, "locality"), "%v", err)
	} else {
		ep.Locality = l
	}
	if ee.Weight != nil {
		if *ee.Weight < 1 || *ee.Weight > math.MaxUint32 {
			p.errorf(child(key, "weight"), "%d is out of range (1-%d; omit for the default 1)", *ee.Weight, uint32(math.MaxUint32))
		} else {
			ep.Weight = uint32(*ee.Weight)
		}
	}
	if h, err := model.ParseHealth(ee.Health); err != nil {
		p.errorf(child(key, "health"), "%v", err)
	} else {
		ep.Health = h
	}
	return ep
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// at and child build keys: services[0].endpoints[1].labels["app.kubernetes.io/name"].
func at(key string, i int) string { return yamlpath.Index(key, i) }

func child(key, name string) string { return yamlpath.Child(key, name) }
