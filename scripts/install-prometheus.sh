#!/usr/bin/env bash
# Installs the Prometheus server from Debian's package into .tools/prometheus, without root and
# without starting anything: modelcd starts it itself, on loopback, with its own scrape config.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.tools/prometheus
bin="$dest/usr/bin/prometheus"
if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
  exit 0
fi
command -v apt-get >/dev/null || { echo "install-prometheus: apt-get not found; install Prometheus 2.x yourself and set MODELCD_PROMETHEUS_BIN" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1); then
  # A fresh machine may have no package lists yet.
  apt-get update -qq >/dev/null 2>&1 || true
  (cd "$tmp" && apt-get download prometheus >/dev/null) || { echo "install-prometheus: 'apt-get download prometheus' failed; set MODELCD_PROMETHEUS_BIN to a Prometheus 2.x binary" >&2; exit 1; }
fi
rm -rf "$dest"
mkdir -p "$dest"
dpkg-deb -x "$tmp"/prometheus_*.deb "$dest"
"$bin" --version 2>&1 | head -1
