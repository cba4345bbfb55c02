package nacos

import (
	"testing"

	"go.uber.org/goleak"
)

// The Nacos SDK that the tests register instances with leaves goroutines
// behind after CloseClient; the registry itself must leave none.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/nacos-group/nacos-sdk-go/v2/common/logger.(*NacosLogger).Sync"),
	)
}
