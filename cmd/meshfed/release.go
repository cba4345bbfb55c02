package main

import (
	"errors"
	"fmt"
	"net/url"

	"github.com/spf13/cobra"

	"github.com/meshfed/meshfed/admin"
)

func releaseCmd() *cobra.Command {
	var af adminFlags
	c := &cobra.Command{
		Use:   "release NAME",
		Short: "Apply the update a registry's hold-down (maxDeleteRatio) holds back, now",
		Long: "Apply the update held back by a registry's hold-down (maxDeleteRatio) now, instead of\n" +
			"waiting for it to be seen again or for the hold-down time, by POSTing to\n" +
			"/debug/registries/NAME/release on a running meshfed's admin address (with the\n" +
			"admin token when one is configured).",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := af.one(cmd)
			if err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), err)
				return exitError{1}
			}
			var h admin.RegistryReport
			if err := c.post("/debug/registries/"+url.PathEscape(args[0])+"/release", &h); err != nil {
				msg := err.Error()
				var ae apiError
				if errors.As(err, &ae) {
					msg = string(ae) // the API's own words
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "meshfed release %s: %s\n", args[0], msg)
				return exitError{1}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "released %s: %s, serving %d services, %d endpoints\n", h.Name, h.State, h.Services, h.Endpoints)
			return nil
		},
	}
	af.register(c)
	return c
}
