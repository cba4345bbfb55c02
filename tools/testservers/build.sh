#!/usr/bin/env bash
# build.sh NAME — build the real server NAME that meshfed's tests start, into
# the cache outside the clone, unless it is already there; print its path.
#
#   cache: ${MESHFED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/meshfed}/bin/<name>-<version>/<binary>
#
# The binary is built only if missing, so CI that keeps the cache between runs
# pays the build once. Builds use the local toolchain, -trimpath and a
# stripped binary, at low priority (the machine is shared).
#
# Names: consul, kube-apiserver, etcd, polaris, istiod; `all` builds every one.
# consul and polaris are built from this module (polaris needs the yaml.v2
# replace in go.mod); kube-apiserver from ./kube and etcd from
# ./etcd, separate modules because their dependency graphs conflict (kubernetes
# v1.37 pins the etcd 3.7 modules and replaces its staging modules).
# istiod (pilot-discovery) comes from ./istiod, a module of its own for the
# same reason, patched (see build_istiod).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${MESHFED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/meshfed}"
export GOTOOLCHAIN=local

names="consul kube-apiserver etcd polaris istiod"
usage() { echo "usage: $0 all|${names// /|}" >&2; exit 2; }

# gobuild OUT PKG [DIR]: build PKG (a main package required by the module in
# DIR, default this directory) to OUT.
# Builds into a temporary file next to OUT and renames it, so an interrupted
# build never leaves a half-written binary that a later run would trust.
gobuild() {
	local out="$1" pkg="$2" mod="${3:-$here}" dir tmp start
	dir="$(dirname "$out")"
	mkdir -p "$dir"
	tmp="$(mktemp "$dir/.build.XXXXXX")"
	trap 'rm -f "$tmp"' EXIT
	start=$(date +%s)
	echo "building $pkg -> $out (this takes a while)" >&2
	(cd "$mod" && nice -n 10 go build -trimpath -ldflags='-s -w' -o "$tmp" "$pkg")
	chmod 0755 "$tmp"
	mv -f "$tmp" "$out"
	trap - EXIT
	echo "built $out in $(( $(date +%s) - start ))s" >&2
}

# build_istiod OUT: build pilot-discovery from the istio.io/istio version
# that ./istiod/go.mod requires, with ./istiod/patches applied.
#
# Why patches: meshfed's tests run istiod without Kubernetes, from a
# meshConfig whose only configSource is meshfed (xds://). Unpatched, istiod
# then (1) dereferences the nil multicluster controller where the
# ServiceEntry controller reads Kubernetes namespaces, and (2) never passes
# /ready, which also waits for the injection and validation webhooks that
# only run with Kubernetes. The module cache is read-only, so the module is
# copied to a temporary directory, patched there, and built through a
# replace in a temporary copy of ./istiod/go.mod. When a patch changes, bump
# the cache directory's suffix below (and IstiodVersion in test/servers).
build_istiod() {
	local out="$1" src work
	src="$(cd "$here/istiod" && go mod download -json istio.io/istio | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
	[ -d "$src" ] || { echo "istio.io/istio module not found" >&2; exit 1; }
	work="$(mktemp -d)"
	cp -r "$src" "$work/istio"
	chmod -R u+w "$work/istio"
	for p in "$here"/istiod/patches/*.patch; do
		patch -s -d "$work/istio" -p1 <"$p"
	done
	mkdir "$work/mod"
	cp "$here/istiod/go.mod" "$here/istiod/go.sum" "$work/mod/"
	(cd "$work/mod" && go mod edit -replace "istio.io/istio=$work/istio")
	gobuild "$out" istio.io/istio/pilot/cmd/pilot-discovery "$work/mod"
	rm -rf "$work"
}

[ $# -eq 1 ] || usage
if [ "$1" = all ]; then
	for n in $names; do "$0" "$n" >/dev/null; done
	exit 0
fi
case "$1" in
consul)
	out="$cache/bin/consul-1.22.5/consul"
	[ -x "$out" ] || gobuild "$out" github.com/hashicorp/consul
	;;
kube-apiserver)
	out="$cache/bin/kube-apiserver-1.37.1/kube-apiserver"
	[ -x "$out" ] || gobuild "$out" k8s.io/kubernetes/cmd/kube-apiserver "$here/kube"
	;;
etcd)
	out="$cache/bin/etcd-3.6.9/etcd"
	[ -x "$out" ] || gobuild "$out" go.etcd.io/etcd/server/v3 "$here/etcd"
	;;
polaris)
	# Polaris serves the Eureka REST API for the eureka registry's tests.
	out="$cache/bin/polaris-1.18.1/polaris-server"
	[ -x "$out" ] || gobuild "$out" github.com/polarismesh/polaris
	;;
istiod)
	# The pseudo-version (Istio's tags are not semver) in ./istiod/go.mod,
	# plus -p<N>, the revision of ./istiod/patches.
	ver="$(cd "$here/istiod" && go list -m -f '{{.Version}}' istio.io/istio)"
	out="$cache/bin/istiod-$ver-p1/pilot-discovery"
	[ -x "$out" ] || build_istiod "$out"
	;;
*)
	usage
	;;
esac
echo "$out"
