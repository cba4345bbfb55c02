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
# Names: consul, kube-apiserver, etcd, polaris; `all` builds every one.
# consul and polaris are built from this module (polaris needs the yaml.v2
# replace in go.mod); kube-apiserver from ./kube and etcd from
# ./etcd, separate modules because their dependency graphs conflict (kubernetes
# v1.37 pins the etcd 3.7 modules and replaces its staging modules).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${MESHFED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/meshfed}"
export GOTOOLCHAIN=local

names="consul kube-apiserver etcd polaris"
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
*)
	usage
	;;
esac
echo "$out"
