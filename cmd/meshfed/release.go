package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshfed/meshfed/federation"
)

func releaseCmd() *cobra.Command {
	var config, admin string
	c := &cobra.Command{
		Use:   "release NAME",
		Short: "Apply the update a registry's hold-down (maxDeleteRatio) holds back, now",
		Long: "Apply the update held back by a registry's hold-down (maxDeleteRatio) now, instead of\n" +
			"waiting for it to be seen again or for the hold-down time, by POSTing to\n" +
			"/debug/registries/NAME/release on a running meshfed's admin address.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			base, err := adminURL(cmd, config, admin)
			if err != nil {
				return err
			}
			client := &http.Client{Timeout: 15 * time.Second}
			u := base + "/debug/registries/" + url.PathEscape(args[0]) + "/release"
			resp, err := client.Post(u, "application/json", nil)
			if err != nil {
				return fmt.Errorf("is meshfed running? %w", err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			if resp.StatusCode != http.StatusOK {
				var e struct{ Error string }
				if json.Unmarshal(body, &e) == nil && e.Error != "" {
					fmt.Fprintf(cmd.ErrOrStderr(), "meshfed release %s: %s\n", args[0], e.Error)
				} else {
					fmt.Fprintf(cmd.ErrOrStderr(), "meshfed release %s: %s: %s\n", args[0], resp.Status, strings.TrimSpace(string(body)))
				}
				return exitError{1}
			}
			var h federation.RegistryHealth
			if err := json.Unmarshal(body, &h); err != nil {
				return fmt.Errorf("POST %s: %w", u, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "released %s: %s, serving %d services, %d endpoints\n", h.Name, h.State, h.Services, h.Endpoints)
			return nil
		},
	}
	c.Flags().StringVar(&config, "config", "clusters.yaml", "cluster registry file (for the admin address)")
	c.Flags().StringVar(&admin, "admin", "", "admin address (overrides --config)")
	return c
}

// adminURL returns the admin API's base URL: --admin, else admin.address
// of --config.
func adminURL(cmd *cobra.Command, config, admin string) (string, error) {
	if admin == "" {
		cfg, err := federation.Load(config)
		if err != nil {
			fmt.Fprintln(cmd.ErrOrStderr(), err)
			return "", exitError{1}
		}
		admin = cfg.Admin.Address
	}
	return adminBase(admin), nil
}
