package servable

import (
	"encoding/json"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/consul"
)

// FuzzConsulCatalog feeds a /v1/health/service/<name> answer (and the
// service name) through consul.Convert, the gate and translation: no
// panic, every resource valid, every quarantined instance listed.
func FuzzConsulCatalog(f *testing.F) {
	f.Add("orders", []byte(`[{"Node":{"Node":"n1","Address":"127.0.0.1","Datacenter":"dc1","Meta":{"zone":"z1"}},`+
		`"Service":{"ID":"o1","Service":"orders","Port":8080,"Tags":["v1","env=prod"],"Meta":{"meshfed.protocol":"grpc"},"Weights":{"Passing":4294967295,"Warning":1}},`+
		`"Checks":[{"Status":"passing"}]},`+
		`{"Node":{"Node":"n2","Address":"127.0.0.2"},"Service":{"ID":"o2","Service":"orders","Port":8080,"Weights":{"Passing":4294967295,"Warning":1}},"Checks":[]}]`))
	f.Add("orders", []byte(`[{"Node":{"Node":"n1","Address":"224.0.0.1"},"Service":{"ID":"m","Port":80,"Meta":{"k":"\udfff"}}},`+
		`{"Node":{"Node":"n2","Address":"127.0.0.3"},"Service":{"ID":"ok","Port":80,"Tags":["\u00ff=\u0000"]}}]`))
	f.Add("ext", []byte(`[{"Node":{"Node":"n1","Address":"127.0.0.1"},"Service":{"ID":"x","Address":"db.example.com","Port":5432}}]`))
	f.Add("under_score", []byte(`[{"Node":{"Node":"n1","Address":"127.0.0.1"},"Service":{"ID":"x","Port":80}}]`))
	common := registries.Common{Name: "consul", Kind: "consul", Domain: "consul", Locality: model.Locality{Region: "r1"}}
	f.Fuzz(func(t *testing.T, name string, body []byte) {
		var entries []*api.ServiceEntry
		if err := json.Unmarshal(body, &entries); err != nil {
			return // the API client refuses the answer
		}
		c := consul.Convert(common, "dc1", name, entries)
		var services []model.Service
		if c.OK() {
			services = append(services, c.Service())
		}
		CheckServable(t, common, services, c.Rejected)
	})
}
