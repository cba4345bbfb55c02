package xds

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"
)

func TestIstioMeshConfig(t *testing.T) {
	t.Parallel()
	type source struct {
		Address     string `yaml:"address"`
		TLSSettings *struct {
			Mode           string `yaml:"mode"`
			SNI            string `yaml:"sni"`
			CaCertificates string `yaml:"caCertificates"`
		} `yaml:"tlsSettings"`
	}
	parse := func(b []byte) []source {
		t.Helper()
		var mc struct {
			ConfigSources []source `yaml:"configSources"`
		}
		if err := yaml.Unmarshal(b, &mc); err != nil {
			t.Fatalf("not YAML: %v\n%s", err, b)
		}
		return mc.ConfigSources
	}
	out, err := IstioMeshConfig("10.1.2.3:15010", nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := parse(out); len(s) != 1 || s[0].Address != "xds://10.1.2.3:15010" || s[0].TLSSettings != nil {
		t.Errorf("plain: %+v", s)
	}
	const pem = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
	out, err = IstioMeshConfig("meshfed.meshfed.svc:15010", &IstioTLS{CAPEM: pem})
	if err != nil {
		t.Fatal(err)
	}
	s := parse(out)
	if len(s) != 1 || s[0].TLSSettings == nil || s[0].TLSSettings.Mode != "SIMPLE" ||
		s[0].TLSSettings.SNI != "meshfed.meshfed.svc" || s[0].TLSSettings.CaCertificates != pem {
		t.Errorf("TLS: %+v\n%s", s, out)
	}
	for _, bad := range []string{"0.0.0.0:15010", "[::]:15010", "nohost", ":15010"} {
		if _, err := IstioMeshConfig(bad, nil); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	if _, err := IstioMeshConfig("h:1", &IstioTLS{}); err == nil || !strings.Contains(err.Error(), "CA") {
		t.Errorf("TLS without CA: %v", err)
	}
}
