#!/usr/bin/env bash
# check-make-help.sh fails when `make help` does not run, or leaves out a
# target of the Makefile's .PHONY list (each needs a "## description" on
# its rule line).
set -euo pipefail
cd "$(dirname "$0")/.."
help=$(make --no-print-directory help)
missing=()
for t in $(sed -n 's/^\.PHONY: *//p' Makefile); do
	grep -qE "^  $t +[^ ]" <<<"$help" || missing+=("$t")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "make help lacks: ${missing[*]} (add \"## description\" to the rule line)" >&2
	exit 1
fi
