package registries

import "github.com/meshfed/meshfed/model"

// Metadata keys that set an endpoint's locality in the registries that
// carry free-form instance metadata (consul node meta, eureka and nacos
// instance metadata); zone is also what Spring Cloud's
// eureka.instance.metadata-map.zone uses.
const (
	MetaRegion  = "region"
	MetaZone    = "zone"
	MetaSubZone = "subzone"
)

// MetaLocality returns l with the parts that meta sets (MetaRegion,
// MetaZone, MetaSubZone; empty values set nothing) overridden.
func MetaLocality(l model.Locality, meta map[string]string) model.Locality {
	if v := meta[MetaRegion]; v != "" {
		l.Region = v
	}
	if v := meta[MetaZone]; v != "" {
		l.Zone = v
	}
	if v := meta[MetaSubZone]; v != "" {
		l.SubZone = v
	}
	return l
}
