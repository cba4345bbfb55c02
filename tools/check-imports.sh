#!/usr/bin/env bash
# check-imports.sh fails when a package imports against the data flow of
# docs/architecture.md §1 (registries → aggregate → xds; config sources →
# aggregate). It reads `go list`: production imports are checked
# transitively (.Deps), test imports directly.
#
#   model            the standard library only
#   registries/...   nothing of aggregate, xds, the istioconfig sources
#                    (istioconfig/crd), config, gateway, admin, federation
#   aggregate/...    nothing of xds
#   istioconfig/...  no registry
#   kubeclient       no registry, nothing of istioconfig
#   explain          nothing of admin, gateway or cmd: the admin server
#                    and the CLI use it, it reads only what it is given
set -euo pipefail
cd "$(dirname "$0")/.."
mod=$(go list -m)

# rules: package pattern (regexp on the path below the module) and the
# forbidden import prefixes below the module.
declare -A forbid=(
	['^registries(/|$)']='aggregate xds istioconfig/crd config gateway admin federation'
	['^aggregate(/|$)']='xds'
	['^istioconfig(/|$)']='registries'
	['^kubeclient(/|$)']='registries istioconfig'
	['^explain(/|$)']='admin gateway cmd'
)

fail=0
while IFS='|' read -r pkg deps timports; do
	rel=${pkg#"$mod"}
	rel=${rel#/}
	if [ "$rel" = model ]; then
		for d in $deps; do
			case $d in *.*/*) echo "model imports $d: model imports only the standard library"; fail=1 ;; esac
		done
	fi
	for pat in "${!forbid[@]}"; do
		[[ $rel =~ $pat ]] || continue
		for f in ${forbid[$pat]}; do
			for d in $deps; do
				case $d in "$mod/$f" | "$mod/$f"/*) echo "$rel imports $d (through its dependencies): against the flow (docs/architecture.md §1)"; fail=1 ;; esac
			done
			for d in $timports; do
				case $d in "$mod/$f" | "$mod/$f"/*) echo "$rel's tests import $d: against the flow (docs/architecture.md §1)"; fail=1 ;; esac
			done
		done
	done
done < <(go list -f '{{.ImportPath}}|{{join .Deps " "}}|{{join .TestImports " "}} {{join .XTestImports " "}}' ./...)
exit $fail
