package eureka

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/meshfed/meshfed/aggregate/aggregatetest"
)

// fuzzPayload decodes an /apps answer with decode, converts it as a full
// update and checks that the result is servable: no panic, every resource
// valid, every quarantined instance listed.
func fuzzPayload(t *testing.T, body []byte, decode func([]byte) (*payload, error)) {
	p, err := decode(body)
	if err != nil {
		return // the whole answer is refused; the last good state stays
	}
	w := fixtureWatch(t, Config{})
	w.applyFull(p)
	services, rejected := w.state()
	aggregatetest.CheckServable(t, w.r.common, services, rejected)
}

func addSeeds(f *testing.F, names ...string) {
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join("testdata", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// FuzzEurekaJSON fuzzes the JSON form of /apps answers.
func FuzzEurekaJSON(f *testing.F) {
	addSeeds(f, "apps-netflix.json", "apps-polaris.json", "apps-single-element.json", "delta-netflix.json")
	f.Add([]byte(`{"applications":{"application":[{"name":"A","instance":[
		{"instanceId":"a-1","app":"A","ipAddr":"224.0.0.1","status":"UP","port":{"$":80,"@enabled":"true"}},
		{"instanceId":"a-2","app":"A","ipAddr":"127.0.0.2","status":"UP","port":{"$":80,"@enabled":"true"},"metadata":{"zone":"\udfff","k":"v"}}]}]}}`))
	f.Fuzz(func(t *testing.T, body []byte) { fuzzPayload(t, body, decodeJSON) })
}

// FuzzEurekaXML fuzzes the XML form of /apps answers.
func FuzzEurekaXML(f *testing.F) {
	addSeeds(f, "apps-netflix.xml", "delta-netflix.xml")
	f.Add([]byte(`<applications><application><name>A</name><instance><instanceId>a-1</instanceId><app>A</app>` +
		`<ipAddr>fe80::1</ipAddr><status>UP</status><port enabled="true">80</port><metadata><zone>` + "\xff" + `</zone></metadata></instance>` +
		`<instance><instanceId>a-2</instanceId><app>A</app><ipAddr>127.0.0.3</ipAddr><status>UP</status><port enabled="true">80</port></instance>` +
		`</application></applications>`))
	f.Fuzz(func(t *testing.T, body []byte) { fuzzPayload(t, body, decodeXML) })
}
