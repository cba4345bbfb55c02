package model

import "testing"

func TestSelects(t *testing.T) {
	t.Parallel()
	labels := map[string]string{"version": "v1", "zone": "a"}
	for _, tt := range []struct {
		name     string
		selector map[string]string
		want     bool
	}{
		{"empty selects everything", nil, true},
		{"one matching label", map[string]string{"version": "v1"}, true},
		{"every label matching", map[string]string{"version": "v1", "zone": "a"}, true},
		{"a value differs", map[string]string{"version": "v2"}, false},
		{"a key missing", map[string]string{"track": "canary"}, false},
		{"a missing key reads as empty", map[string]string{"track": ""}, true},
	} {
		if got := Selects(tt.selector, labels); got != tt.want {
			t.Errorf("%s: Selects(%v, %v) = %v, want %v", tt.name, tt.selector, labels, got, tt.want)
		}
	}
}
