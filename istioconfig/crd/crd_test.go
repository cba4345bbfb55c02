package crd

import (
	"testing"

	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/kubeclient"
)

// TestKindsAreIstioconfigs: the kinds kubeclient names its objects with
// are the ones istioconfig reads, so Parts passes them on unchanged.
func TestKindsAreIstioconfigs(t *testing.T) {
	t.Parallel()
	if kubeclient.KindVirtualService != istioconfig.KindVirtualService || kubeclient.KindDestinationRule != istioconfig.KindDestinationRule {
		t.Errorf("kubeclient kinds %q, %q; istioconfig reads %q, %q", kubeclient.KindVirtualService, kubeclient.KindDestinationRule,
			istioconfig.KindVirtualService, istioconfig.KindDestinationRule)
	}
}
