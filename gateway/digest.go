package gateway

import (
	"strconv"
	"sync"

	"github.com/meshfed/meshfed/admin"
	"github.com/meshfed/meshfed/model"
)

// digestCache keeps the digest of the last snapshot asked for: the admin
// endpoint and the metric share one computation per snapshot.
type digestCache struct {
	mu   sync.Mutex
	snap *model.Snapshot
	d    model.Digest
}

func (c *digestCache) of(s *model.Snapshot) model.Digest {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.snap != s || c.d.Registries == nil {
		c.snap, c.d = s, model.DigestOf(s)
	}
	return c.d
}

// Digest returns the digest of the snapshot served now, with an entry for
// every registry running (runtime ones included; one just removed is gone
// at once even while the snapshot still holds its services).
func (g *Gateway) Digest() admin.DigestInfo {
	snap := g.agg.Snapshot()
	d := g.digests.of(snap)
	out := admin.DigestInfo{Overall: d.Overall, Registries: make(map[string]string)}
	if snap != nil {
		out.Version = snap.Version
	}
	for _, st := range g.agg.Registries() {
		h, ok := d.Registries[st.Name]
		if !ok {
			h = model.EmptyDigest
		}
		out.Registries[st.Name] = h
	}
	return out
}

// digestValue maps a hex digest to a float64 gauge value: its first 48
// bits, exact in a float64, so equal digests are equal numbers.
func digestValue(hexDigest string) float64 {
	if len(hexDigest) < 12 {
		return 0
	}
	v, err := strconv.ParseUint(hexDigest[:12], 16, 64)
	if err != nil {
		return 0
	}
	return float64(v)
}
