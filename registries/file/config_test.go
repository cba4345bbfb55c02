package file

import (
	"testing"
	"time"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/filewatch"
	"github.com/meshfed/meshfed/registries/registrytest"
)

func TestConfigGood(t *testing.T) {
	t.Parallel()
	abs := func(rel string) string { return registrytest.ConfigPath(t, rel) } // relative paths resolve against the file's directory
	registrytest.CheckGoodConfigs[Config](t, []registrytest.GoodConfig[Config]{
		{File: "good.yaml", Want: Config{Options: filewatch.Options{
			Path: abs("services.yaml"), Paths: []string{abs("conf.d/*.yaml"), "/etc/meshfed/more.yaml"},
			Settle: registries.Duration(2 * time.Second),
		}}},
		{File: "good-minimal.yaml", Want: Config{Options: filewatch.Options{
			Path: abs("services.yaml"), Settle: registries.Duration(DefaultSettle),
		}}},
	}, nil)
}

func TestConfigBad(t *testing.T) {
	t.Parallel()
	registrytest.BadConfigs[Config](t, []registrytest.BadConfig{
		{File: "bad-no-path.yaml", Key: "path", Err: "is required (or paths)"},
		{File: "bad-glob.yaml", Key: "path", Err: "not a valid glob"},
		{File: "bad-empty-path.yaml", Key: "paths[0]", Err: "is empty"},
		{File: "bad-unknown-key.yaml", Key: "paht", Err: `unknown key (did you mean "path"?)`},
		{File: "bad-duration.yaml", Key: "settle", Err: "bad duration"},
	})
}
