#!/usr/bin/env bash
# Installs what `make test` needs on a fresh Debian machine: the Debian
# packages the tests start for real, and the servers that tools/testservers
# builds from source (skipped when the cached binary exists).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
dpkg -s zookeeper >/dev/null 2>&1 || need+=(zookeeper)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
command -v node >/dev/null 2>&1 || need+=(nodejs npm)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
# The status page is tested in a real headless Chromium (test/e2e, chromedp).
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v patch >/dev/null 2>&1 || need+=(patch) # tools/testservers/build.sh istiod
# systemd-analyze verify and dpkg-deb for the systemd unit and Debian package
# tests (tools/dist); systemd need not run as PID 1.
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
command -v dpkg-deb >/dev/null 2>&1 || need+=(dpkg)
if ((${#need[@]})); then
	sudo=""
	[ "$(id -u)" = 0 ] || sudo="sudo"
	echo "installing Debian packages: ${need[*]}"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if [ -x tools/testservers/build.sh ]; then
	tools/testservers/build.sh all
fi

# Prometheus's PromQL parser for TestObservabilityPack (a module of its own).
(cd tools/promcheck && go mod download)

# grpc-js-xds for the proxyless Node.js client in the end-to-end tests.
js=test/e2e/jsclient
if [ ! -d "$js/node_modules/@grpc/grpc-js-xds" ] || [ "$js/package-lock.json" -nt "$js/node_modules/.package-lock.json" ]; then
	command -v npm >/dev/null 2>&1 || { echo "npm is required (Debian package npm)"; exit 1; }
	npm ci --prefix "$js" --no-audit --no-fund --loglevel=error
fi
