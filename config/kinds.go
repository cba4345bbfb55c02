package config

import (
	"github.com/meshfed/meshfed/registries"
	_ "github.com/meshfed/meshfed/registries/install" // every registry kind of this build registers itself
)

// Kinds returns the registry kinds this build supports, sorted. Each
// platform package registers its kind (registries.Register); the kinds of
// this build are those registries/install imports.
func Kinds() []string { return registries.KindNames() }

// Multicluster reports whether registries of kind that share a domain form
// one multicluster set (registries.Kind.Multicluster).
func Multicluster(kind string) bool {
	k, ok := registries.LookupKind(kind)
	return ok && k.Multicluster
}
