package gateway

import (
	"testing"

	"github.com/meshfed/meshfed/config"
)

// TestMaxDeleteRatioZeroIsOff: the hold-down is on by default (0.5) and an
// explicit 0 turns it off.
func TestMaxDeleteRatioZeroIsOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line string
		want float64
	}{{"", config.DefaultMaxDeleteRatio}, {"    maxDeleteRatio: 0\n", 0}, {"    maxDeleteRatio: 0.9\n", 0.9}} {
		src := "registries:\n  - name: vms\n    kind: file\n    domain: vm\n" + tc.line + "    file: {path: s.yaml}\n"
		cfg, err := config.Parse("c.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		if got := aggregateOptions(cfg.Registries[0]).MaxDeleteRatio; got != tc.want {
			t.Errorf("%q: maxDeleteRatio %v, want %v", tc.line, got, tc.want)
		}
	}
}
