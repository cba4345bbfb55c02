#!/usr/bin/env bash
# fuzz.sh runs every Fuzz* target in the module for FUZZTIME each (default
# 30s). Targets are discovered with `go test -list`, so new ones are picked
# up without editing this file. A crash stops the run; go test writes the
# input under the package's testdata/fuzz/FuzzXxx, where plain `go test`
# (and so `make test`) replays it from then on.
set -euo pipefail
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-30s}
targets=$($GO test -list '^Fuzz' ./... | awk '
	/^Fuzz/ { names[n++] = $1; next }
	/^(ok|---|FAIL)/ { if ($1 == "ok") for (i = 0; i < n; i++) print $2, names[i]; n = 0 }')
if [ -z "$targets" ]; then
	echo "no fuzz targets found" >&2
	exit 1
fi
count=$(wc -l <<<"$targets")
echo "fuzz: $count targets, $FUZZTIME each"
while read -r pkg name; do
	echo "== $pkg $name"
	$GO test "$pkg" -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME"
done <<<"$targets"
