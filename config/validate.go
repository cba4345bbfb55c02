package config

// The validators of clusters.yaml: each type's Validate (run by
// package yamlconf after the type is decoded and defaulted, see
// load.go) and the checks they share. The types and their defaults are in
// config.go.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/idna"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/validate"
)

// Validate checks the name and that exactly one of dir and kubernetes is
// set. The clusters of a kubernetes block are checked against the
// registries by Config.Validate.
func (c *ConfigSource) Validate() error {
	var errs []error
	if err := checkName(c.Name); err != nil {
		errs = append(errs, registries.FieldErr("name", "%v", err))
	}
	switch {
	case c.Dir != "" && c.Kubernetes != nil:
		errs = append(errs, registries.FieldErr("kubernetes", "dir and kubernetes exclude each other: one source reads one of them"))
	case c.Dir == "" && c.Kubernetes == nil:
		errs = append(errs, registries.FieldErr("dir", "missing required key: a config source needs dir or kubernetes"))
	}
	return errors.Join(errs...)
}

// Validate checks that clusters are listed once each and the namespaces
// are namespace names.
func (k *KubernetesConfigSource) Validate() error {
	var errs []error
	if len(k.Clusters) == 0 {
		errs = append(errs, registries.FieldErr("clusters", "want at least one registry name"))
	}
	seen := map[string]bool{}
	for i, c := range k.Clusters {
		if seen[c] {
			errs = append(errs, registries.FieldErr(fmt.Sprintf("clusters[%d]", i), "%q is listed twice", c))
		}
		seen[c] = true
	}
	seen = map[string]bool{}
	for i, ns := range k.Namespaces {
		key := fmt.Sprintf("namespaces[%d]", i)
		if err := checkName(ns); err != nil {
			errs = append(errs, registries.FieldErr(key, "%v", err))
		} else if seen[ns] {
			errs = append(errs, registries.FieldErr(key, "%q is listed twice", ns))
		}
		seen[ns] = true
	}
	return errors.Join(errs...)
}

// Validate checks the address.
func (x *XDS) Validate() error {
	var errs []error
	if err := checkAddress(x.Address); err != nil {
		errs = append(errs, registries.FieldErr("address", "%v", err))
	}
	if !validate.Label(x.RootNamespace) {
		errs = append(errs, registries.FieldErr("rootNamespace", "%q: want a namespace (DNS-1123 label)", x.RootNamespace))
	}
	return errors.Join(errs...)
}

// Validate checks the address and that the token file holds a token.
func (a *Admin) Validate() error {
	var errs []error
	if err := checkAddress(a.Address); err != nil {
		errs = append(errs, registries.FieldErr("address", "%v", err))
	}
	if a.TokenFile != "" {
		if _, err := ReadToken(a.TokenFile); err != nil {
			errs = append(errs, registries.FieldErr("tokenFile", "%v", err))
		}
	}
	return errors.Join(errs...)
}

// Validate checks that no path is empty.
func (t *TLS) Validate() error {
	var errs []error
	for key, p := range map[string]string{"cert": t.Cert, "key": t.Key} {
		if p == "" {
			errs = append(errs, registries.FieldErr(key, "must not be empty"))
		}
	}
	return errors.Join(errs...)
}

// Validate checks max >= quiet.
func (d *Debounce) Validate() error {
	if d.Max < d.Quiet {
		return registries.FieldErrAlso("max", "quiet", "debounce.max (%s) must not be less than debounce.quiet (%s)", d.Max, d.Quiet)
	}
	return nil
}

// Validate checks the entry's own keys; the kind block validates itself.
func (r *Registry) Validate() error {
	var errs []error
	if err := checkName(r.Name); err != nil {
		errs = append(errs, registries.FieldErr("name", "%v", err))
	}
	if _, ok := registries.LookupKind(r.Kind); !ok {
		errs = append(errs, registries.FieldErr("kind", "unknown kind %q (supported by this build: %s)", r.Kind, strings.Join(Kinds(), ", ")))
	}
	if err := checkDomain(r.Domain); err != nil {
		errs = append(errs, registries.FieldErr("domain", "%v", err))
	}
	if r.Locality != "" {
		if _, err := model.ParseLocality(r.Locality); err != nil {
			errs = append(errs, registries.FieldErr("locality", "%v", err))
		}
	}
	if err := validate.ExportTo(r.ExportTo); err != nil {
		errs = append(errs, registries.FieldErr("exportTo", "%v", err))
	}
	if m := r.MaxDeleteRatio; m != nil && (*m < 0 || *m > 1) {
		errs = append(errs, registries.FieldErr("maxDeleteRatio", "want a number between 0 (off) and 1, got %v", *m))
	}
	return errors.Join(errs...)
}

// Validate checks what involves more than one key: at least one registry,
// unique names, domains that do not overlap, distinct listeners.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Registries) == 0 {
		errs = append(errs, registries.FieldErr("registries", "want at least one registry"))
	}
	if listenersCollide(c.XDS.Address, c.Admin.Address) {
		errs = append(errs, registries.FieldErrAlso("admin.address", "xds.address", "xds (%s) and admin (%s) listen on the same port", c.XDS.Address, c.Admin.Address))
	}
	first := make(map[string]int, len(c.Registries))
	for i, r := range c.Registries {
		if r.Name == "" {
			continue
		}
		if j, dup := first[r.Name]; dup {
			errs = append(errs, registries.FieldErrAlso(fmt.Sprintf("registries[%d].name", i), fmt.Sprintf("registries[%d].name", j), "duplicate name %q", r.Name))
			continue
		}
		first[r.Name] = i
	}
	firstSource := make(map[string]int, len(c.ConfigSources))
	for i, cs := range c.ConfigSources {
		if j, dup := firstSource[cs.Name]; dup && cs.Name != "" {
			errs = append(errs, registries.FieldErrAlso(fmt.Sprintf("configSources[%d].name", i), fmt.Sprintf("configSources[%d].name", j), "duplicate config source name %q", cs.Name))
			continue
		}
		firstSource[cs.Name] = i
	}
	errs = append(errs, configSourceClusterErrs(c)...)
	for _, pair := range domainConflicts(c.Registries) {
		i, j := pair[0], pair[1]
		a, b := c.Registries[i], c.Registries[j]
		errs = append(errs, registries.FieldErrAlso(fmt.Sprintf("registries[%d].domain", j), fmt.Sprintf("registries[%d].domain", i),
			"domain %q of registry %q overlaps domain %q of registry %q: domains must not be equal or nested, except kubernetes registries sharing one",
			b.Domain, b.Name, a.Domain, a.Name))
	}
	return errors.Join(errs...)
}

// domainConflicts returns the index pairs (i < j) of registries whose
// domains overlap where docs/architecture.md forbids it: equal, or one a
// suffix of the other at a label boundary — except two kubernetes
// registries with an equal domain, which form one multicluster set.
// Registries without a domain are skipped. It looks up each domain's
// suffixes in a map, so its time grows with the number of registries
// times their labels, plus the pairs it returns.
func domainConflicts(regs []Registry) [][2]int {
	byDomain := map[string][]int{}
	for i, r := range regs {
		if r.Domain != "" {
			byDomain[r.Domain] = append(byDomain[r.Domain], i)
		}
	}
	var out [][2]int
	for j, b := range regs {
		if b.Domain == "" {
			continue
		}
		// Equal domains declared earlier.
		for _, i := range byDomain[b.Domain] {
			if i >= j {
				break
			}
			if regs[i].Kind == b.Kind && Multicluster(b.Kind) {
				continue
			}
			out = append(out, [2]int{i, j})
		}
		// Earlier registries whose domain is a proper suffix of b's, or
		// which b's domain is a proper suffix of.
		for d := b.Domain; ; {
			k := strings.IndexByte(d, '.')
			if k < 0 {
				break
			}
			d = d[k+1:]
			for _, i := range byDomain[d] {
				out = append(out, [2]int{min(i, j), max(i, j)})
			}
		}
	}
	slices.SortFunc(out, func(a, b [2]int) int {
		if a[1] != b[1] {
			return a[1] - b[1]
		}
		return a[0] - b[0]
	})
	return slices.Compact(out)
}

// checkName checks an RFC 1123 label.
func checkName(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	if !validate.Label(s) {
		return fmt.Errorf("bad name %q: want a DNS label (at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit)", s)
	}
	return nil
}

// checkDomain checks a normalized domain: ASCII (an internationalized
// name is written in punycode, and the error gives it), a DNS name.
func checkDomain(d string) error {
	if d == "" {
		return errors.New("must not be empty")
	}
	if strings.ContainsFunc(d, func(r rune) bool { return r > 0x7f }) {
		if ascii, err := idna.Lookup.ToASCII(d); err == nil && validate.Name(ascii) {
			return fmt.Errorf("bad domain %q: domains must be ASCII; write the IDNA form %q", d, ascii)
		}
		return fmt.Errorf("bad domain %q: domains must be ASCII (an internationalized name in its IDNA punycode form, xn--...)", d)
	}
	if !validate.Name(d) {
		return fmt.Errorf("bad domain %q: want a DNS name like vm.internal", d)
	}
	return nil
}

// checkAddress checks host:port with a port 1..65535 and a host that is an
// IP address or a hostname.
func checkAddress(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("bad address %q: want host:port, like 127.0.0.1:15010", s)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || strings.TrimLeft(port, "0123456789") != "" {
		return fmt.Errorf("bad address %q: port %q is not in 1-65535", s, port)
	}
	if host == "" {
		return fmt.Errorf("bad address %q: no host; write 0.0.0.0:%s to listen on every interface", s, port)
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	if !validate.Name(strings.ToLower(host)) {
		return fmt.Errorf("bad address %q: host %q is neither an IP address nor a hostname", s, host)
	}
	return nil
}

// listenersCollide reports whether two listen addresses (valid for
// checkAddress) would take the same port: equal port numbers (026110 is
// 26110) and hosts that are equal, the same IP written differently
// (::ffff:127.0.0.1), both loopback names (localhost, 127.0.0.1, ::1) or
// either one every interface (0.0.0.0, ::).
func listenersCollide(a, b string) bool {
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil {
		return false
	}
	na, err1 := strconv.Atoi(pa)
	nb, err2 := strconv.Atoi(pb)
	if err1 != nil || err2 != nil || na != nb {
		return false
	}
	type host struct {
		ip       netip.Addr
		name     string
		loopback bool
	}
	parse := func(h string) host {
		if ip, err := netip.ParseAddr(h); err == nil {
			ip = ip.Unmap().WithZone("")
			return host{ip: ip, loopback: ip == netip.AddrFrom4([4]byte{127, 0, 0, 1}) || ip == netip.IPv6Loopback()}
		}
		h = strings.TrimSuffix(strings.ToLower(h), ".")
		return host{name: h, loopback: h == "localhost"}
	}
	x, y := parse(ha), parse(hb)
	switch {
	case x.ip.IsUnspecified() || y.ip.IsUnspecified():
		return true
	case x.ip.IsValid() && y.ip.IsValid():
		return x.ip == y.ip
	case x.loopback && y.loopback: // localhost and 127.0.0.1 or ::1
		return true
	}
	return x.name != "" && x.name == y.name
}
