package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/meshfed/meshfed/admin"
)

// exitDrift is the exit code of `meshfed status` with several --admin
// addresses whose replicas serve different content.
const exitDrift = 2

// overallRow names the whole-snapshot digest in the drift table; registry
// names are DNS labels, so it cannot collide with one.
const overallRow = "(overall)"

// runDrift reads /debug/digestz from every replica and prints, per
// registry, each replica's digest (12 hex digits) and DRIFT where they
// differ. It returns exitError{exitDrift} when any registry differs, and an
// error when a replica cannot be read.
func runDrift(w io.Writer, clients []*adminClient) error {
	admins := make([]string, len(clients))
	digests := make([]admin.DigestInfo, len(clients))
	for i, c := range clients {
		admins[i] = c.base
		if err := c.get("/debug/digestz", &digests[i]); err != nil {
			return fmt.Errorf("--admin %s: %w", c.base, err)
		}
	}
	drifted := writeDrift(w, admins, digests)
	if len(drifted) > 0 {
		fmt.Fprintf(w, "\ndrift: %d replicas differ on %s\n", len(admins), strings.Join(drifted, ", "))
		return exitError{exitDrift}
	}
	fmt.Fprintf(w, "\nno drift: %d replicas serve the same content\n", len(admins))
	return nil
}

// writeDrift prints the table and returns the rows (registries, or
// overallRow) whose digests differ between replicas.
func writeDrift(w io.Writer, admins []string, digests []admin.DigestInfo) []string {
	var names []string
	for _, d := range digests {
		for n := range d.Registries {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REGISTRY\t"+strings.Join(admins, "\t")+"\t")
	var drifted []string
	row := func(name string, get func(admin.DigestInfo) (string, bool)) {
		cells := make([]string, len(digests))
		same := true
		for i, d := range digests {
			h, ok := get(d)
			cells[i] = "-"
			if ok {
				cells[i] = h[:min(12, len(h))]
			}
			first, ok0 := get(digests[0])
			if h != first || ok != ok0 {
				same = false
			}
		}
		mark := ""
		if !same {
			mark = "DRIFT"
			drifted = append(drifted, name)
		}
		fmt.Fprintln(tw, name+"\t"+strings.Join(cells, "\t")+"\t"+mark)
	}
	row(overallRow, func(d admin.DigestInfo) (string, bool) { return d.Overall, true })
	for _, n := range names {
		row(n, func(d admin.DigestInfo) (string, bool) { h, ok := d.Registries[n]; return h, ok })
	}
	tw.Flush()
	return drifted
}
