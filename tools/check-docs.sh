#!/usr/bin/env bash
# check-docs.sh fails when a page of docs/ does not start with a table of
# contents ("Contents:" within its first 12 lines, issue 24), or when a
# relative link of docs/ or README.md names a file that does not exist.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=()
for f in docs/*.md docs/registries/*.md; do
	head -n 12 "$f" | grep -q '^Contents:' || bad+=("$f: no \"Contents:\" in its first 12 lines")
done
for f in README.md docs/*.md docs/registries/*.md; do
	dir=$(dirname "$f")
	while IFS= read -r link; do
		target=${link%%#*}
		[ -z "$target" ] && continue
		case $target in http://* | https://* | mailto:*) continue ;; esac
		[ -e "$dir/$target" ] || bad+=("$f: link to $target, which does not exist")
	done < <(grep -o '\](\([^)# ]*\)\(#[^) ]*\)\?)' "$f" | sed 's/^](\(.*\))$/\1/')
done
if [ ${#bad[@]} -gt 0 ]; then
	printf '%s\n' "${bad[@]}" >&2
	exit 1
fi
