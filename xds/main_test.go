package xds

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(grpcChild())
	}
	goleak.VerifyTestMain(m)
}
