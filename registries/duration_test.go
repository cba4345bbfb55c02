package registries

import (
	"testing"
	"time"
)

func TestDurationText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string // "" for success
	}{
		{in: "20ms", want: 20 * time.Millisecond},
		{in: "1m30s", want: 90 * time.Second},
		{in: "20", wantErr: `bad duration "20": want a number with a unit, like 20ms, 30s or 10m`},
		{in: "soon", wantErr: `bad duration "soon": want a number with a unit, like 20ms, 30s or 10m`},
		{in: "", wantErr: `bad duration "": want a number with a unit, like 20ms, 30s or 10m`},
		{in: "0s", wantErr: `bad duration "0s": must be positive`},
		{in: "-1s", wantErr: `bad duration "-1s": must be positive`},
	}
	for _, tc := range tests {
		var d Duration
		err := d.UnmarshalText([]byte(tc.in))
		switch {
		case tc.wantErr != "":
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("UnmarshalText(%q) = %v, want error %q", tc.in, err, tc.wantErr)
			}
		case err != nil || d.Std() != tc.want:
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", tc.in, d, err, tc.want)
		default:
			if b, _ := d.MarshalText(); string(b) != tc.want.String() {
				t.Errorf("MarshalText(%v) = %q, want %q", d, b, tc.want.String())
			}
		}
	}
}
