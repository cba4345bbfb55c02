package eureka

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/hudl/fargo"
)

// This file reads Eureka's two wire formats into fargo's types. fargo
// decodes instances, data center info and metadata; what it lacks is
// written here:
//   - the actionType of delta entries (fargo.Instance has no field for it);
//   - JSON ports whose @enabled is a boolean (fargo only accepts the string
//     "true"/"false", and fails the whole document otherwise), whose "$" is a
//     number or a string;
//   - the apps__hashcode of a response (fargo's GetApps drops it);
//   - isolation: a malformed instance spoils only itself, not the document.

// payload is one decoded /apps or /apps/delta answer.
type payload struct {
	hashcode string
	apps     []appPayload
}

type appPayload struct {
	name string
	// instances are as decoded: their strings may point into the answer
	// and its decoding's garbage; the state keeps copies (settle).
	instances []instance
}

// instance is what the registry keeps of one Eureka instance: the fields
// the conversion, the hashcode and the instance's key read, not the whole
// record that came over the wire (URLs, lease, VIP addresses, AWS
// metadata...), which would be most of what the registry holds at
// 100,000 instances.
type instance struct {
	InstanceId, IPAddr, HostName string
	Status                       fargo.StatusType
	// Metadata is the metadata element as it came, or the metadata
	// object compacted (parseMetadata reads it).
	Metadata          string
	Port, SecurePort  int32 // as sent; validated by conversion
	PortEnabled       bool
	SecurePortEnabled bool
	// deleted: a delta's DELETED entry (its actionType; ADDED and
	// MODIFIED are alike, as for Netflix's client).
	deleted bool
	// rare holds what most instances lack (nil: all empty).
	rare *rareFields
}

// rareFields are an instance's fields that most instances leave empty.
type rareFields struct {
	// awsID is the AWS instance-id (dataCenterInfo Amazon), zone its
	// availability zone.
	awsID, zone string
	// problem says why the instance cannot be served as it came over the
	// wire ("" if it can); conversion quarantines it with this reason.
	problem string
}

// rareOf returns in's rare fields, empty ones if it has none.
func (i *instance) rareOf() rareFields {
	if i.rare == nil {
		return rareFields{}
	}
	return *i.rare
}

// setRare sets in's rare fields (nil when all are empty).
func (i *instance) setRare(r rareFields) {
	i.rare = nil
	if r != (rareFields{}) {
		i.rare = &r
	}
}

// id is the instance's key within its app: instanceId, else what Eureka
// itself falls back to (the AWS instance-id, or hostName), as fargo's
// Instance.Id.
func (i *instance) id() string {
	switch {
	case i.InstanceId != "":
		return i.InstanceId
	case i.rare != nil && i.rare.awsID != "":
		return i.rare.awsID
	}
	return i.HostName
}

// plainInstance has fargo.Instance's fields and tags but none of its
// methods, so that wireInstance decodes the ports itself.
type plainInstance fargo.Instance

type wireInstance struct {
	plainInstance
	WirePort       wirePort `xml:"port" json:"port"`
	WireSecurePort wirePort `xml:"securePort" json:"securePort"`
	ActionType     string   `xml:"actionType" json:"actionType"`
}

func (w *wireInstance) instance() instance {
	p := &w.plainInstance
	in := instance{
		InstanceId: p.InstanceId, IPAddr: p.IPAddr, HostName: p.HostName, Status: p.Status,
		Metadata: compactMetadata(p.Metadata.Raw),
		deleted:  strings.EqualFold(w.ActionType, "DELETED"),
	}
	var rare rareFields
	if p.DataCenterInfo.Name == fargo.Amazon {
		rare.awsID, rare.zone = p.DataCenterInfo.Metadata.InstanceID, p.DataCenterInfo.Metadata.AvailabilityZone
	}
	in.Port, in.PortEnabled = w.WirePort.number, w.WirePort.enabled
	in.SecurePort, in.SecurePortEnabled = w.WireSecurePort.number, w.WireSecurePort.enabled
	switch {
	case w.WirePort.enabled && w.WirePort.problem != "":
		rare.problem = "port: " + w.WirePort.problem
	case w.WireSecurePort.enabled && w.WireSecurePort.problem != "":
		rare.problem = "securePort: " + w.WireSecurePort.problem
	}
	in.setRare(rare)
	return in
}

// compactMetadata returns a JSON metadata object without its
// insignificant spaces (servers such as Polaris indent their answers:
// most of the metadata's bytes), anything else as it came. It copies:
// fargo's JSON metadata aliases the answer.
func compactMetadata(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '{' {
		var b bytes.Buffer
		if json.Compact(&b, raw) == nil {
			return b.String()
		}
	}
	return string(raw)
}

// wirePort is `<port enabled="true">8080</port>` in XML and
// `"port": {"$": 8080, "@enabled": "true"}` in JSON, where "$" may be a
// number or a string and "@enabled" a string or a boolean. It never fails
// the document: a value it cannot read is kept as a problem.
type wirePort struct {
	number  int32
	enabled bool
	problem string
}

func (p *wirePort) UnmarshalXML(d *xml.Decoder, start xml.StartElement) error {
	var raw struct {
		Number  string `xml:",chardata"`
		Enabled string `xml:"enabled,attr"`
	}
	if err := d.DecodeElement(&raw, &start); err != nil {
		return err
	}
	p.set(raw.Number, raw.Enabled)
	return nil
}

func (p *wirePort) UnmarshalJSON(b []byte) error {
	var raw struct {
		Number  json.RawMessage `json:"$"`
		Enabled json.RawMessage `json:"@enabled"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		p.problem = fmt.Sprintf("%s is not a port object", b)
		return nil
	}
	p.set(jsonScalar(raw.Number), jsonScalar(raw.Enabled))
	return nil
}

// jsonScalar returns a JSON string's content or another literal's text.
func jsonScalar(b json.RawMessage) string {
	var s string
	if json.Unmarshal(b, &s) == nil {
		return s
	}
	return string(bytes.TrimSpace(b))
}

func (p *wirePort) set(number, enabled string) {
	number, enabled = strings.TrimSpace(number), strings.TrimSpace(enabled)
	if enabled != "" && enabled != "null" {
		e, err := strconv.ParseBool(enabled)
		if err != nil {
			p.problem = fmt.Sprintf("enabled %q is not a boolean", enabled)
		}
		p.enabled = e
	}
	if number != "" && number != "null" {
		n, err := strconv.ParseInt(number, 10, 32)
		if err != nil {
			p.problem = fmt.Sprintf("%q is not a port number", number)
			// An unreadable port marked enabled is still enabled: the
			// instance is quarantined rather than silently losing a port.
			if enabled == "" {
				p.enabled = true
			}
			return
		}
		p.number = int32(n)
	}
}

// decodePayload reads an /apps or /apps/delta answer in either format,
// chosen by its first byte.
func decodePayload(b []byte) (*payload, error) {
	trimmed := bytes.TrimLeft(b, " \t\r\n\ufeff")
	switch {
	case len(trimmed) == 0:
		return nil, errors.New("empty answer")
	case trimmed[0] == '{':
		return decodeJSON(trimmed)
	case trimmed[0] == '<':
		return decodeXML(trimmed)
	}
	return nil, fmt.Errorf("answer is neither JSON nor XML (starts with %q)", trimmed[:min(len(trimmed), 16)])
}

// XML: <applications><apps__hashcode/><application><name/><instance/>...

type xmlApps struct {
	XMLName      xml.Name `xml:"applications"`
	AppsHashcode string   `xml:"apps__hashcode"`
	Applications []struct {
		Name      string         `xml:"name"`
		Instances []wireInstance `xml:"instance"`
	} `xml:"application"`
}

func decodeXML(b []byte) (*payload, error) {
	var doc xmlApps
	if err := xml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("decode XML: %w", err)
	}
	p := &payload{hashcode: strings.TrimSpace(doc.AppsHashcode), apps: make([]appPayload, 0, len(doc.Applications))}
	for _, a := range doc.Applications {
		ap := appPayload{name: strings.TrimSpace(a.Name), instances: make([]instance, 0, len(a.Instances))}
		for i := range a.Instances {
			ap.instances = append(ap.instances, a.Instances[i].instance())
		}
		p.apps = append(p.apps, ap)
	}
	return p, nil
}

// JSON: {"applications": {"apps__hashcode": "", "application": [...]}}.
// Eureka's older codecs write a list of one as the element itself, so
// "application" and "instance" may each be an object or a list.

type jsonApps struct {
	Applications *struct {
		AppsHashcode string             `json:"apps__hashcode"`
		Application  oneOrMany[jsonApp] `json:"application"`
	} `json:"applications"`
}

type jsonApp struct {
	Name     string                     `json:"name"`
	Instance oneOrMany[json.RawMessage] `json:"instance"`
}

// oneOrMany decodes a JSON list, a single element, or null.
type oneOrMany[T any] []T

func (o *oneOrMany[T]) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*o = nil
		return nil
	case len(b) > 0 && b[0] == '[':
		var s []T
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*o = s
		return nil
	}
	var one T
	if err := json.Unmarshal(b, &one); err != nil {
		return err
	}
	*o = []T{one}
	return nil
}

func decodeJSON(b []byte) (*payload, error) {
	var doc jsonApps
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("decode JSON: %w", err)
	}
	if doc.Applications == nil {
		return nil, errors.New(`decode JSON: no "applications" object`)
	}
	p := &payload{hashcode: strings.TrimSpace(doc.Applications.AppsHashcode)}
	p.apps = make([]appPayload, 0, len(doc.Applications.Application))
	for _, a := range doc.Applications.Application {
		ap := appPayload{name: strings.TrimSpace(a.Name), instances: make([]instance, 0, len(a.Instance))}
		for _, raw := range a.Instance {
			ap.instances = append(ap.instances, decodeJSONInstance(raw))
		}
		p.apps = append(p.apps, ap)
	}
	return p, nil
}

// decodeJSONInstance decodes one instance. One that does not decode keeps
// what identifies it (so that deltas and the hashcode still account for
// it) and carries the decode error as its problem.
func decodeJSONInstance(raw json.RawMessage) instance {
	var w wireInstance
	err := json.Unmarshal(raw, &w)
	if err == nil {
		return w.instance()
	}
	var id struct {
		InstanceID string           `json:"instanceId"`
		HostName   string           `json:"hostName"`
		App        string           `json:"app"`
		Status     fargo.StatusType `json:"status"`
		ActionType string           `json:"actionType"`
	}
	_ = json.Unmarshal(raw, &id) // best effort: the problem below is what counts
	in := instance{deleted: strings.EqualFold(id.ActionType, "DELETED")}
	in.InstanceId, in.HostName, in.Status = id.InstanceID, id.HostName, id.Status
	in.setRare(rareFields{problem: "instance does not decode: " + shortErr(err)})
	return in
}

func shortErr(err error) string {
	s := err.Error()
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// parseMetadata reads an instance's metadata without loss: every value is
// kept as the string it was registered with (fargo's own parser turns
// "1.10" into the number 1.1). JSON values that are numbers or booleans
// keep their literal text; Jackson's "@class" marker is dropped.
func parseMetadata(raw []byte) (map[string]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	out := map[string]string{}
	if raw[0] == '{' {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("metadata is not a JSON object: %w", err)
		}
		for k, v := range m {
			if k == "@class" {
				continue
			}
			v = bytes.TrimSpace(v)
			if len(v) == 0 || v[0] == '{' || v[0] == '[' || bytes.Equal(v, []byte("null")) {
				continue // not a metadata value Eureka clients write
			}
			out[k] = jsonScalar(v)
		}
		return out, nil
	}
	d := xml.NewDecoder(io.MultiReader(strings.NewReader("<m>"), bytes.NewReader(raw), strings.NewReader("</m>")))
	depth := 0
	var key string
	var val strings.Builder
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("metadata is not XML: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			depth++
			if depth == 2 {
				key = t.Name.Local
				val.Reset()
			}
		case xml.CharData:
			if depth == 2 {
				val.Write(t)
			}
		case xml.EndElement:
			if depth == 2 {
				out[key] = strings.TrimSpace(val.String())
			}
			depth--
		}
	}
}
