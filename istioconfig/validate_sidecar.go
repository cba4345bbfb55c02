package istioconfig

import (
	"errors"
	"fmt"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	checks "github.com/meshfed/meshfed/validate"
)

// Checks of Sidecar objects and of exportTo, the structural part of
// Istio's validation (pkg/config/validation: ValidateSidecar,
// validateExportTo) that scoping relies on (docs/architecture.md §3.7).

// validateSidecar checks a Sidecar: its workloadSelector, and every egress
// host of the form namespace/dnsName as Istio reads it. Every problem is
// reported (joined).
func validateSidecar(sc *networking.Sidecar) error {
	var errs []error
	if ws := sc.GetWorkloadSelector(); ws != nil {
		if len(ws.GetLabels()) == 0 {
			errs = append(errs, errors.New("spec.workloadSelector.labels: at least one label is required"))
		}
		for k := range ws.GetLabels() {
			if k == "" {
				errs = append(errs, errors.New("spec.workloadSelector.labels: empty label key"))
			}
		}
	}
	catchAll := 0
	for i, e := range sc.GetEgress() {
		p := fmt.Sprintf("spec.egress[%d]", i)
		if e.GetPort() == nil {
			if catchAll++; catchAll == 2 {
				errs = append(errs, fmt.Errorf("%s: only one egress listener may omit the port (the catch-all)", p))
			}
		} else if n := e.GetPort().GetNumber(); n == 0 || n > 65535 {
			errs = append(errs, fmt.Errorf("%s.port.number %d: want 1-65535", p, n))
		}
		if len(e.GetHosts()) == 0 {
			errs = append(errs, fmt.Errorf("%s.hosts: at least one host is required", p))
		}
		for j, h := range e.GetHosts() {
			if err := checkSidecarHost(h); err != nil {
				errs = append(errs, fmt.Errorf("%s.hosts[%d] %q: %v", p, j, h, err))
			}
		}
	}
	return errors.Join(errs...)
}

// checkSidecarHost checks an egress host "namespace/dnsName": namespace
// "*" (any), "." (the proxy's), a namespace name, or one of those after
// "~" (excluded; "~" alone: every namespace); dnsName "*", "*.suffix" or a
// DNS name.
func checkSidecarHost(h string) error {
	ns, name, ok := strings.Cut(h, "/")
	if !ok || strings.Contains(name, "/") {
		return errors.New("want namespace/dnsName")
	}
	ns = strings.TrimPrefix(ns, "~")
	switch {
	case ns == "" && !strings.HasPrefix(h, "~"):
		return errors.New("the namespace part is empty (want *, ., ~ or a namespace)")
	case ns != "" && ns != "*" && ns != "." && !dns1123Label(ns):
		return fmt.Errorf("namespace %q: want *, ., ~ or a DNS-1123 label", ns)
	}
	if !validHost(name) {
		return fmt.Errorf("dnsName %q: want *, *.domain or a DNS name", name)
	}
	return nil
}

// validateExportTo checks an exportTo list (validate.ExportTo).
func validateExportTo(path string, to []string) error {
	if err := checks.ExportTo(to); err != nil {
		return fmt.Errorf("%s%v", path, err)
	}
	return nil
}
