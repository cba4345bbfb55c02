package nacos

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/meshfed/meshfed/test/servers"
)

// The Nacos SDK that the tests register instances with leaves its UDP
// push receiver running after CloseClient (one reason the registry does
// not use the SDK); the registry itself must leave nothing.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, servers.IgnoreNacosSDK())
}
