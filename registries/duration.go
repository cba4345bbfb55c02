package registries

import (
	"fmt"
	"time"
)

// Duration is a time.Duration written in clusters.yaml as "20ms", "30s" or
// "10m". Reading one accepts positive durations only: a key that is left
// out gets its default, so "0s" or "-1s" is always a mistake. Ranges
// beyond that (a poll interval of at least 100ms...) are each Config's
// Validate's to check.
type Duration time.Duration

// ParseDuration reads a positive duration like "20ms" or "10m". Its errors
// quote s, so that a loader can point at the value.
func ParseDuration(s string) (Duration, error) {
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("bad duration %q: want a number with a unit, like 20ms, 30s or 10m", s)
	}
	if v <= 0 {
		return 0, fmt.Errorf("bad duration %q: must be positive", s)
	}
	return Duration(v), nil
}

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes d like "20ms" or "1m30s".
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads what ParseDuration reads.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}
