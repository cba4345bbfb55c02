// Package seam tests the registry → aggregate seam end to end: real
// registries, built from their config block (Config.New) and run with a
// real aggregator as their Sink. Registry packages test what they publish
// (with registrytest.Sink) and import nothing of aggregate; the policy
// applied to it (the hold-down, a partial first state held while a
// restored state is served) is the aggregator's, and its effect on what is
// served is checked here. The package holds tests only.
package seam
