package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshfed/meshfed/federation"
)

func statusCmd() *cobra.Command {
	var config string
	var admins []string
	c := &cobra.Command{
		Use:   "status",
		Short: "Show every registry and connected proxy with its sync state, read from a running meshfed's admin API",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(admins) > 1 {
				return runDrift(cmd.OutOrStdout(), admins) // drift.go
			}
			admin := ""
			if len(admins) == 1 {
				admin = admins[0]
			}
			if admin == "" {
				cfg, err := federation.Load(config)
				if err != nil {
					fmt.Fprintln(cmd.ErrOrStderr(), err)
					return exitError{1}
				}
				admin = cfg.Admin.Address
			}
			base := admin
			if !strings.Contains(base, "://") {
				base = "http://" + base
			}
			client := &http.Client{Timeout: 5 * time.Second}
			var regs []federation.RegistryHealth
			if err := getJSON(client, base+"/healthz/registries", &regs); err != nil {
				return err
			}
			var proxies []federation.ProxySync
			if err := getJSON(client, base+"/debug/syncz", &proxies); err != nil {
				return err
			}
			writeStatus(cmd.OutOrStdout(), regs, proxies, time.Now())
			return nil
		},
	}
	c.Flags().StringVar(&config, "config", "clusters.yaml", "cluster registry file (for the admin address)")
	c.Flags().StringArrayVar(&admins, "admin", nil, "admin address (overrides --config); repeat it to compare replicas' snapshot digests (exit 2 on drift)")
	return c
}

func getJSON(c *http.Client, url string, v any) error {
	resp, err := c.Get(url)
	if err != nil {
		return fmt.Errorf("is meshfed running? %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}

func writeStatus(w io.Writer, regs []federation.RegistryHealth, proxies []federation.ProxySync, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REGISTRY\tKIND\tSTATE\tSERVICES\tENDPOINTS\tRESTARTS\tLAST SYNC\tLAST ERROR")
	var held []federation.RegistryHealth
	for _, r := range regs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", r.Name, r.Kind, r.State, r.Services, r.Endpoints,
			r.Restarts, ago(now, r.LastSync), oneLine(r.LastError))
		if r.Hold != nil {
			held = append(held, r)
		}
	}
	tw.Flush()
	for _, r := range held {
		fmt.Fprintf(w, "\nHELD %s since %s: serving %d endpoints, holding an update with %d: %s\n  release it: meshfed release %s\n",
			r.Name, ago(now, r.Hold.Since), r.Hold.Served, r.Hold.Pending, oneLine(r.Hold.Reason), r.Name)
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROXY\tCLASS\tSTREAM\tTYPE\tSENT\tACKED\tSTATE\tLAST NACK")
	if len(proxies) == 0 {
		fmt.Fprintln(tw, "(none connected)\t\t\t\t\t\t\t")
	}
	for _, p := range proxies {
		for _, t := range p.Types {
			state := "SYNCED"
			switch {
			case t.SentNonce == "":
				state = "NOT SENT"
			case t.LastNack != nil && t.LastNack.Nonce == t.SentNonce:
				state = "NACKED"
			case t.AckedNonce != t.SentNonce:
				state = "STALE"
			}
			nack := ""
			if t.LastNack != nil {
				nack = oneLine(t.LastNack.Error)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.Class, p.Stream, shortType(t.TypeURL),
				t.SentVersion, t.AckedVersion, state, nack)
		}
	}
	tw.Flush()
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return now.Sub(t).Truncate(time.Second).String() + " ago"
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

// shortType shortens a type URL: Envoy's to the message name (Cluster),
// Istio's MCP collections to <version>/<Kind> (v1/ServiceEntry).
func shortType(u string) string {
	if g, rest, ok := strings.Cut(u, "/"); ok && !strings.Contains(g, "googleapis") {
		return rest
	}
	if i := strings.LastIndex(u, "."); i >= 0 {
		return u[i+1:]
	}
	return u
}
