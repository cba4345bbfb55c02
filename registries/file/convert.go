package file

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
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

// Error is one problem in a services file, at a line and key when known:
// "services.yaml:12: services[0].endpoints[1].health: unknown health ...".
type Error struct {
	File string // base name of the file
	Line int    // 1-based; 0 if unknown
	Key  string // e.g. services[0].ports[1].port; "" if unknown
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
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

// Parse reads a services file's content. name is the file's base name, used
// in errors and in each endpoint's Origin ("services.yaml:LINE"). It returns
// the services under c (hostnames <name>.<c.Domain>, sources c.Name), never a
// nil slice, or an Errors listing every problem (at most 20) when any part
// of the file is invalid. Endpoint addresses are not checked: the
// aggregator quarantines bad ones individually.
func Parse(name string, data []byte, c registries.Common) ([]model.Service, error) {
	p := &parse{file: name}
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil, p.yamlError(err)
	}
	var body ast.Node
	for i, doc := range f.Docs {
		if doc.Body == nil {
			continue
		}
		if body != nil {
			return nil, Errors{{File: name, Line: doc.Body.GetToken().Position.Line, Msg: fmt.Sprintf("holds more than one YAML document (document %d)", i+1)}}
		}
		body = doc.Body
	}
	p.index = newIndex(body)

	var sf servicesFile
	if body != nil {
		if err := yaml.NodeToValue(body, &sf, yaml.Strict()); err != nil {
			return nil, p.yamlError(err)
		}
	}
	if sf.Services == nil {
		p.errorf("services", "is required (write `services: []` for none)")
		return nil, p.errs
	}
	services := p.convert(*sf.Services, c)
	if len(p.errs) > 0 {
		sort.SliceStable(p.errs, func(i, j int) bool { return p.errs[i].Line < p.errs[j].Line })
		if len(p.errs) > maxErrors {
			n := len(p.errs) - maxErrors
			p.errs = append(p.errs[:maxErrors], &Error{File: name, Msg: fmt.Sprintf("and %d more errors", n)})
		}
		return nil, p.errs
	}
	return services, nil
}

type parse struct {
	file  string
	index *index
	errs  Errors
}

// errorf records a problem at key (a path built with at/child).
func (p *parse) errorf(key, format string, args ...any) {
	p.errs = append(p.errs, &Error{File: p.file, Line: p.index.line(key), Key: key, Msg: fmt.Sprintf(format, args...)})
}

// yamlError turns a go-yaml error into an Errors with our key names and
// wording (go-yaml's own messages name Go types).
func (p *parse) yamlError(err error) error {
	var ye yaml.Error
	if !errors.As(err, &ye) {
		return Errors{{File: p.file, Msg: err.Error()}}
	}
	e := &Error{File: p.file, Msg: ye.GetMessage()}
	tk := ye.GetToken()
	if tk != nil {
		e.Line = tk.Position.Line
		if p.index != nil {
			e.Key = p.index.keyAt(tk.Position.Line, tk.Position.Column)
		}
	}
	var (
		unknown  *yaml.UnknownFieldError
		typeErr  *yaml.TypeError
		overflow *yaml.OverflowError
		nodeType *yaml.UnexpectedNodeTypeError
	)
	switch {
	case errors.As(err, &unknown):
		e.Msg = "unknown key"
		if e.Key == "" {
			e.Msg = unknown.Message
		}
	case errors.As(err, &typeErr):
		e.Msg = "must be " + kindName(typeErr.DstType)
	case errors.As(err, &overflow):
		e.Msg = "number out of range"
	case errors.As(err, &nodeType):
		switch nodeType.Expected {
		case ast.SequenceType:
			e.Msg = "must be a list"
		case ast.MappingType:
			e.Msg = "must be a mapping"
		}
	}
	return Errors{e}
}

func kindName(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "of another type"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64, reflect.Uint32:
		return "an integer"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return "a " + t.Kind().String()
}

// dnsLabel is an RFC 1123 label, as Kubernetes names are.
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

func (p *parse) convert(entries []serviceEntry, c registries.Common) []model.Service {
	out := make([]model.Service, 0, len(entries))
	names := map[string]string{} // service name → key of first declaration
	for i, se := range entries {
		key := at("services", i)
		switch {
		case se.Name == "":
			p.errorf(child(key, "name"), "is required")
		case !dnsLabel.MatchString(se.Name):
			p.errorf(child(key, "name"), "%q is not a DNS label (lowercase letters, digits and '-', at most 63)", se.Name)
		case names[se.Name] != "":
			p.errorf(child(key, "name"), "service %q is already declared at line %d", se.Name, p.index.line(names[se.Name]))
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
			svc.Endpoints = append(svc.Endpoints, p.endpoint(at(child(key, "endpoints"), j), ee, declared, c))
		}
		out = append(out, svc)
	}
	return out
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
		case !dnsLabel.MatchString(pe.Name):
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

func (p *parse) endpoint(key string, ee endpointEntry, declared map[string]bool, c registries.Common) model.Endpoint {
	ep := model.Endpoint{
		Address: ee.Address,
		Weight:  1,
		Source:  model.Source{Registry: c.Name, Cluster: c.Name},
		Origin:  p.file + ":" + strconv.Itoa(p.index.line(key)),
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
func at(key string, i int) string { return key + "[" + strconv.Itoa(i) + "]" }

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func child(key, name string) string {
	if !plainKey.MatchString(name) {
		return key + "[" + strconv.Quote(name) + "]"
	}
	if key == "" {
		return name
	}
	return key + "." + name
}

// index maps keys to the YAML nodes they name and token positions back to
// keys, to give every error a line.
type index struct {
	nodes map[string]ast.Node
	byPos map[[2]int]string
}

func newIndex(body ast.Node) *index {
	ix := &index{nodes: map[string]ast.Node{}, byPos: map[[2]int]string{}}
	if body != nil {
		ix.walk("", body)
	}
	return ix
}

func pos(n ast.Node) [2]int {
	tk := n.GetToken()
	if tk == nil {
		return [2]int{}
	}
	return [2]int{tk.Position.Line, tk.Position.Column}
}

func (ix *index) remember(key string, n ast.Node) {
	if _, ok := ix.byPos[pos(n)]; !ok {
		ix.byPos[pos(n)] = key
	}
}

func (ix *index) walk(key string, n ast.Node) {
	for {
		switch v := n.(type) {
		case *ast.AnchorNode:
			ix.remember(key, n)
			n = v.Value
			continue
		case *ast.TagNode:
			ix.remember(key, n)
			n = v.Value
			continue
		}
		break
	}
	if n == nil {
		return
	}
	ix.nodes[key] = n
	ix.remember(key, n)
	switch v := n.(type) {
	case *ast.MappingNode:
		for _, mv := range v.Values {
			ix.mappingValue(key, mv)
		}
	case *ast.MappingValueNode:
		ix.mappingValue(key, v)
	case *ast.SequenceNode:
		for i, item := range v.Values {
			ix.walk(at(key, i), item)
		}
	}
}

func (ix *index) mappingValue(key string, mv *ast.MappingValueNode) {
	k := child(key, mv.Key.GetToken().Value)
	ix.remember(k, mv.Key)
	if mv.Value != nil {
		ix.walk(k, mv.Value)
	}
}

// line returns the line of key, or of its closest ancestor present in the
// file (a missing key is reported on the line of its parent).
func (ix *index) line(key string) int {
	for {
		if n, ok := ix.nodes[key]; ok && n.GetToken() != nil {
			return n.GetToken().Position.Line
		}
		i := strings.LastIndexAny(key, ".[")
		if i <= 0 {
			return 0
		}
		key = key[:i]
	}
}

// keyAt returns the key whose node or map key is at line:column.
func (ix *index) keyAt(line, column int) string { return ix.byPos[[2]int{line, column}] }
