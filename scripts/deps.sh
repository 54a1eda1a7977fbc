#!/usr/bin/env bash
# Install the Debian packages nvswap needs, when missing. As root: apt-get.
# Otherwise: print the exact command to run and fail.
set -euo pipefail
missing=()
for p in "$@"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
	echo "deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
	echo "deps: missing Debian packages: ${missing[*]}" >&2
	echo "deps: run: sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
	exit 1
fi
