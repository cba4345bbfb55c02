package nacos

import (
	"testing"

	"go.uber.org/goleak"
)

// The Nacos SDK that the tests register instances with leaves its UDP
// push receiver running after CloseClient (one reason the registry does
// not use the SDK); the registry itself must leave nothing.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/nacos-group/nacos-sdk-go/v2/clients/naming_client/naming_http.(*PushReceiver).handleClient"),
	)
}
