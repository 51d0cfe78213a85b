#!/usr/bin/env bash
# Installs the Debian packages sandboxd and its build need (idempotent; root). With a list file as
# argument, the packages it names instead (scripts/test-packages.txt: what only the tests need).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
list="${1:-$here/system-packages.txt}"
mapfile -t pkgs < <(grep -v '^#' "$list" | grep -v '^$')
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "sandboxd needs these Debian packages: ${missing[*]}" >&2
  echo "run as root, or: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing system packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
