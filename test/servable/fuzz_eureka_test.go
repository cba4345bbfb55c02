package servable

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/eureka"
)

// fuzzEureka converts an /apps answer as a full fetch (eureka.Convert)
// and checks that the result is servable: no panic, every resource valid,
// every quarantined instance listed.
func fuzzEureka(t *testing.T, body []byte) {
	c := registries.Common{Name: "legacy", Kind: "eureka", Domain: "eureka"}
	var cfg eureka.Config
	cfg.ApplyDefaults()
	services, rejected, err := eureka.Convert(c, cfg, body)
	if err != nil {
		return // the whole answer is refused; the last good state stays
	}
	CheckServable(t, c, services, rejected)
}

// addEurekaSeeds adds answers of the eureka package's test data.
func addEurekaSeeds(f *testing.F, names ...string) {
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join("..", "..", "registries", "eureka", "testdata", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// FuzzEurekaJSON fuzzes the JSON form of /apps answers.
func FuzzEurekaJSON(f *testing.F) {
	addEurekaSeeds(f, "apps-netflix.json", "apps-polaris.json", "apps-single-element.json", "delta-netflix.json")
	f.Add([]byte(`{"applications":{"application":[{"name":"A","instance":[
		{"instanceId":"a-1","app":"A","ipAddr":"224.0.0.1","status":"UP","port":{"$":80,"@enabled":"true"}},
		{"instanceId":"a-2","app":"A","ipAddr":"127.0.0.2","status":"UP","port":{"$":80,"@enabled":"true"},"metadata":{"zone":"\udfff","k":"v"}}]}]}}`))
	f.Fuzz(fuzzEureka)
}

// FuzzEurekaXML fuzzes the XML form of /apps answers.
func FuzzEurekaXML(f *testing.F) {
	addEurekaSeeds(f, "apps-netflix.xml", "delta-netflix.xml")
	f.Add([]byte(`<applications><application><name>A</name><instance><instanceId>a-1</instanceId><app>A</app>` +
		`<ipAddr>fe80::1</ipAddr><status>UP</status><port enabled="true">80</port><metadata><zone>` + "\xff" + `</zone></metadata></instance>` +
		`<instance><instanceId>a-2</instanceId><app>A</app><ipAddr>127.0.0.3</ipAddr><status>UP</status><port enabled="true">80</port></instance>` +
		`</application></applications>`))
	f.Fuzz(fuzzEureka)
}
