#!/usr/bin/env bash
# Install the Debian packages nvswap needs, when missing. As root: apt-get.
# Otherwise: print the exact command to run and fail.
# apt-get runs through scripts/apt-get.sh, which waits for a lock held by
# another apt or dpkg instead of failing.
set -euo pipefail
missing=()
for p in "$@"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
	echo "deps: missing Debian packages: ${missing[*]}" >&2
	echo "deps: run: sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
	exit 1
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"$(dirname "$0")"/apt-get.sh update -qq
"$(dirname "$0")"/apt-get.sh install -y -qq --no-install-recommends \
	"${missing[@]}"
