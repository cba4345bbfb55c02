package validate

import (
	"errors"
	"strings"
	"testing"
)

func TestNames(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 63)
	for _, tt := range []struct {
		s                                 string
		label, name, hostname, resolvable bool
	}{
		{"orders", true, true, true, true},
		{"a-1", true, true, true, true},
		{long, true, true, true, true},
		{long + "a", false, false, false, false},
		{"Orders", false, false, true, true},
		{"-a", false, false, false, false},
		{"a-", false, false, false, false},
		{"", false, false, false, false},
		{"a.b.c", false, true, true, true},
		{"a..b", false, false, false, false},
		{"db.internal.", false, false, true, true},
		{"DB.Internal", false, false, true, true},
		{"my_host.lan", false, false, false, true},
		{long + "." + long + "." + long + "." + long, false, false, false, false}, // 255 > 253
		{"10.0.0.1", false, true, true, true},
		{"a b", false, false, false, false},
	} {
		if got := Label(tt.s); got != tt.label {
			t.Errorf("Label(%q) = %v", tt.s, got)
		}
		if got := Name(tt.s); got != tt.name {
			t.Errorf("Name(%q) = %v", tt.s, got)
		}
		if got := Hostname(tt.s); got != tt.hostname {
			t.Errorf("Hostname(%q) = %v", tt.s, got)
		}
		if got := Resolvable(tt.s); got != tt.resolvable {
			t.Errorf("Resolvable(%q) = %v", tt.s, got)
		}
	}
}

func TestHostPort(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		s    string
		host string
		port uint16
		err  error
	}{
		{"127.0.0.1:8500", "127.0.0.1", 8500, nil},
		{"[::1]:2181", "::1", 2181, nil},
		{"zk-0.zk:2181", "zk-0.zk", 2181, nil},
		{"host:065535", "host", 65535, nil},
		{"host", "", 0, ErrNotHostPort},
		{"host:", "host", 0, ErrPort},
		{"host:0", "host", 0, ErrPort},
		{"host:65536", "host", 0, ErrPort},
		{"host:+80", "host", 0, ErrPort},
		{"host:http", "host", 0, ErrPort},
		{":80", "", 80, ErrNoHost},
	} {
		host, port, err := HostPort(tt.s)
		if !errors.Is(err, tt.err) || (err == nil && (host != tt.host || port != tt.port)) {
			t.Errorf("HostPort(%q) = %q, %d, %v; want %q, %d, %v", tt.s, host, port, err, tt.host, tt.port, tt.err)
		}
	}
}
