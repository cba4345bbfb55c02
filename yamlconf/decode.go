package yamlconf

import (
	"encoding"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/yamlconf/yamlpath"
)

var (
	unmarshalerType     = reflect.TypeFor[Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	durationType        = reflect.TypeFor[time.Duration]()
)

// Defaulter and Validator are the optional methods Decode calls on a
// decoded struct (pointer receiver).
type (
	Defaulter interface{ ApplyDefaults() }
	Validator interface{ Validate() error }
)

// value decodes n (at path; owner is where to point when n is null) into v.
func (d *Decoder) value(path string, owner, n *yaml.Node, v reflect.Value) {
	d.values++
	if d.budget--; d.budget < 0 {
		if !d.over {
			d.over = true
			d.Addf(n, path, "the file expands to too many values (aliases nested too deep?)")
		}
		return
	}
	if n != nil && n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			d.Addf(n, path, "unknown alias %q", n.Value)
			return
		}
		d.value(path, owner, yamlpath.Resolve(n), v)
		return
	}
	if n != nil && n.Kind == yaml.DocumentNode {
		d.value(path, owner, yamlpath.Resolve(n), v)
		return
	}
	if n != nil && yamlpath.IsNull(n) {
		n = nil
	}
	if v.CanAddr() && v.Addr().Type().Implements(unmarshalerType) {
		if n == nil {
			d.Addf(owner, path, "missing value")
			return
		}
		v.Addr().Interface().(Unmarshaler).UnmarshalYAMLNode(d, path, n)
		return
	}
	if v.Kind() == reflect.Pointer && v.Type().Elem().Kind() == reflect.Struct && !v.Type().Implements(textUnmarshalerType) {
		if n == nil {
			return
		}
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.value(path, owner, n, v.Elem())
		return
	}
	if v.Kind() == reflect.Struct && !v.Addr().Type().Implements(textUnmarshalerType) {
		d.structValue(path, owner, n, v)
		return
	}
	if n == nil {
		return // null: zero value, defaults apply
	}
	switch {
	case v.Type() == durationType:
		if s, ok := d.scalar(path, n); ok {
			dur, err := registries.ParseDuration(s)
			if err != nil {
				d.Addf(n, path, "%v", err)
				return
			}
			v.SetInt(int64(dur))
		}
		return
	case v.CanAddr() && v.Addr().Type().Implements(textUnmarshalerType):
		if s, ok := d.scalar(path, n); ok {
			if err := v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
				d.Addf(n, path, "%v", err)
			}
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.value(path, owner, n, v.Elem())
	case reflect.String:
		if s, ok := d.scalar(path, n); ok {
			v.SetString(s)
		}
	case reflect.Bool:
		if s, ok := d.scalar(path, n); ok {
			b, err := parseBool(n.Tag, s)
			if err != nil {
				d.Addf(n, path, "want true or false, got %q", s)
				return
			}
			v.SetBool(b)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if s, ok := d.scalar(path, n); ok {
			i, err := parseInt(n.Tag, s, v.Type().Bits())
			if err != nil {
				d.Addf(n, path, "%s", numErr(err, "an integer", s))
				return
			}
			v.SetInt(i)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if s, ok := d.scalar(path, n); ok {
			i, err := parseInt(n.Tag, s, 64)
			if err == nil && (i < 0 || v.OverflowUint(uint64(i))) {
				err = strconv.ErrRange
			}
			if err != nil {
				d.Addf(n, path, "%s", numErr(err, "a non-negative integer", s))
				return
			}
			v.SetUint(uint64(i))
		}
	case reflect.Float32, reflect.Float64:
		if s, ok := d.scalar(path, n); ok {
			f, err := parseFloat(n.Tag, s)
			if err == nil && v.OverflowFloat(f) {
				err = strconv.ErrRange
			}
			if err != nil {
				d.Addf(n, path, "%s", numErr(err, "a number", s))
				return
			}
			v.SetFloat(f)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.Addf(n, path, "want a list, got %s", yamlpath.Describe(n))
			return
		}
		out := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.value(yamlpath.Index(path, i), item, item, out.Index(i))
		}
		v.Set(out)
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String {
			d.Addf(n, path, "cannot decode into %s", v.Type())
			return
		}
		if n.Kind != yaml.MappingNode {
			d.Addf(n, path, "want a mapping, got %s", yamlpath.Describe(n))
			return
		}
		m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
		d.entries(path, n, func(key string, k, val *yaml.Node) {
			p := yamlpath.Child(path, key)
			e := reflect.New(v.Type().Elem()).Elem()
			d.value(p, k, val, e)
			m.SetMapIndex(reflect.ValueOf(key).Convert(v.Type().Key()), e)
		})
		v.Set(m)
	default:
		d.Addf(n, path, "cannot decode into %s", v.Type())
	}
}

func numErr(err error, want, s string) string {
	if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange || err == strconv.ErrRange {
		return "number " + s + " is out of range"
	}
	return "want " + want + ", got " + strconv.Quote(s)
}

// parseBool reads a YAML 1.2 core schema bool.
func parseBool(tag, s string) (bool, error) {
	if tag == "!!bool" || tag == "!!str" || tag == "" {
		switch s {
		case "true", "True", "TRUE":
			return true, nil
		case "false", "False", "FALSE":
			return false, nil
		}
	}
	return false, strconv.ErrSyntax
}

// parseInt reads a YAML 1.2 core schema integer: decimal, 0o octal, 0x hex.
func parseInt(tag, s string, bits int) (int64, error) {
	if tag != "!!int" {
		return 0, strconv.ErrSyntax
	}
	t := strings.TrimPrefix(strings.TrimPrefix(s, "+"), "-")
	base := 10
	switch {
	case strings.HasPrefix(t, "0o"):
		base, t = 8, t[2:]
	case strings.HasPrefix(t, "0x"):
		base, t = 16, t[2:]
	}
	u, err := strconv.ParseUint(t, base, 64)
	if err != nil {
		return 0, err
	}
	if strings.HasPrefix(s, "-") {
		if u > 1<<(bits-1) {
			return 0, strconv.ErrRange
		}
		return -int64(u), nil
	}
	if u > 1<<(bits-1)-1 {
		return 0, strconv.ErrRange
	}
	return int64(u), nil
}

// parseFloat reads a finite YAML 1.2 number (int or float tag).
func parseFloat(tag, s string) (float64, error) {
	switch tag {
	case "!!int":
		i, err := parseInt(tag, s, 64)
		return float64(i), err
	case "!!float":
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return 0, strconv.ErrSyntax
		}
		return f, nil
	}
	return 0, strconv.ErrSyntax
}

// scalar returns the text of scalar n; collections are problems.
func (d *Decoder) scalar(path string, n *yaml.Node) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.Addf(n, path, "want a single value, got %s", yamlpath.Describe(n))
		return "", false
	}
	return n.Value, true
}

// entries calls fn for each key of mapping n, in file order. Keys must be
// scalars and unique; merge keys (<<) are not YAML 1.2 and are refused.
func (d *Decoder) entries(path string, n *yaml.Node, fn func(key string, k, v *yaml.Node)) {
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.AliasNode {
			k = yamlpath.Resolve(k)
			if k == nil {
				d.Addf(n.Content[i], path, "a key must be a single value")
				continue
			}
		}
		if k.Kind != yaml.ScalarNode {
			d.Addf(k, path, "a key must be a single value, got %s", yamlpath.Describe(k))
			continue
		}
		if k.Tag == "!!merge" || k.Value == "<<" && k.Style == 0 {
			d.Addf(k, path, "merge keys (<<) are not supported")
			continue
		}
		if line, dup := seen[k.Value]; dup {
			d.Addf(k, yamlpath.Child(path, k.Value), "mapping key %q already defined at line %d", k.Value, line)
			continue
		}
		seen[k.Value] = k.Line
		fn(k.Value, k, val)
	}
}

// field is a struct field decoded from a key.
type field struct {
	key      string
	index    []int
	required bool
	positive bool
}

type structInfo struct {
	fields []field
	keys   []string
}

var structInfos sync.Map // reflect.Type → *structInfo

func infoOf(t reflect.Type) *structInfo {
	if si, ok := structInfos.Load(t); ok {
		return si.(*structInfo)
	}
	si := &structInfo{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		name, tagOpts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && f.Type.Kind() == reflect.Struct && slices.Contains(strings.Split(tagOpts, ","), "inline") {
			// `yaml:",inline"`: the embedded struct's keys are this one's.
			in := infoOf(f.Type)
			for _, g := range in.fields {
				g.index = append(slices.Clone(f.Index), g.index...)
				si.fields = append(si.fields, g)
			}
			si.keys = append(si.keys, in.keys...)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		opts := strings.Split(f.Tag.Get("yamlconf"), ",")
		si.fields = append(si.fields, field{key: name, index: f.Index,
			required: slices.Contains(opts, "required"), positive: slices.Contains(opts, "positive")})
		si.keys = append(si.keys, name)
	}
	structInfos.Store(t, si)
	return si
}

// Extra handles keys that a struct has no field for (kind blocks). It
// returns false for a key it does not know either.
type Extra func(key string, k, v *yaml.Node) bool

// Struct decodes mapping n at path into the struct v points to, like
// Decode, and passes keys without a field to extra (nil: none), whose
// known keys are extraKeys (for "did you mean"). Defaults, paths and
// validation apply as for Decode.
func (d *Decoder) Struct(path string, owner, n *yaml.Node, v any, extra Extra, extraKeys []string) {
	d.structFields(path, owner, yamlpath.Resolve(n), reflect.ValueOf(v).Elem(), extra, extraKeys)
}

func (d *Decoder) structValue(path string, owner, n *yaml.Node, v reflect.Value) {
	d.structFields(path, owner, n, v, nil, nil)
}

func (d *Decoder) structFields(path string, owner, n *yaml.Node, v reflect.Value, extra Extra, extraKeys []string) {
	if n != nil && n.Kind != yaml.MappingNode {
		d.Addf(n, path, "want a mapping, got %s", yamlpath.Describe(n))
		return
	}
	si := infoOf(v.Type())
	if n != nil {
		seen := make([]bool, len(si.fields))
		d.entries(path, n, func(key string, k, val *yaml.Node) {
			for i, f := range si.fields {
				if f.key != key {
					continue
				}
				seen[i] = true
				p := yamlpath.JoinPath(path, key)
				if f.required && yamlpath.Resolve(val) == nil {
					d.Addf(k, p, "missing value")
					return
				}
				if f.positive {
					d.positive(p, val, v.FieldByIndex(f.index))
					return
				}
				d.value(p, k, val, v.FieldByIndex(f.index))
				return
			}
			if extra != nil && extra(key, k, val) {
				return
			}
			d.Addf(k, yamlpath.JoinPath(path, key), "unknown key%s", yamlpath.Suggest(key, append(si.keys, extraKeys...)))
		})
		for i, f := range si.fields {
			if seen[i] {
				continue
			}
			if f.required {
				d.Addf(n, yamlpath.JoinPath(path, f.key), "missing required key")
				continue
			}
			d.absent(yamlpath.JoinPath(path, f.key), n, v.FieldByIndex(f.index))
		}
	} else {
		for _, f := range si.fields {
			if f.required {
				d.Addf(owner, yamlpath.JoinPath(path, f.key), "missing required key")
				continue
			}
			d.absent(yamlpath.JoinPath(path, f.key), owner, v.FieldByIndex(f.index))
		}
	}
	p := v.Addr().Interface()
	if df, ok := p.(Defaulter); ok {
		df.ApplyDefaults()
	}
	if pr, ok := p.(registries.PathResolver); ok {
		pr.ResolvePaths(d.dir)
	}
	if vd, ok := p.(Validator); ok {
		d.Report(path, owner, n, vd.Validate())
	}
}

// positive decodes a number field tagged `yamlconf:"positive"`: a value
// that is given must be at least 1 (an integer) or above 0.
func (d *Decoder) positive(path string, n *yaml.Node, v reflect.Value) {
	n = yamlpath.Resolve(n)
	if n == nil {
		return
	}
	isInt := v.Kind() >= reflect.Int && v.Kind() <= reflect.Uint64
	bad := func() {
		if isInt {
			d.Addf(n, path, "want a whole number of at least 1, got %s", describePlain(n))
		} else {
			d.Addf(n, path, "want a number above 0, got %s", describePlain(n))
		}
	}
	if n.Kind != yaml.ScalarNode {
		bad()
		return
	}
	f, err := parseFloat(n.Tag, n.Value)
	if err != nil || f <= 0 || isInt && (n.Tag != "!!int" || f < 1) {
		bad()
		return
	}
	d.value(path, n, n, v)
}

// describePlain is Describe with numbers unquoted.
func describePlain(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float") {
		return n.Value
	}
	return yamlpath.Describe(n)
}

// absent gives a struct-valued field whose key is absent its defaults and
// validation, as if its key held an empty mapping.
func (d *Decoder) absent(path string, owner *yaml.Node, v reflect.Value) {
	if v.Kind() == reflect.Struct && !v.Addr().Type().Implements(textUnmarshalerType) && !v.Addr().Type().Implements(unmarshalerType) {
		d.structFields(path, owner, nil, v, nil, nil)
	}
}
