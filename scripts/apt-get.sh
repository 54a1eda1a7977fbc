#!/usr/bin/env bash
# apt-get ARGS..., waiting for a lock held by another apt or dpkg
# (unattended-upgrades, a second make, a package manager window) instead
# of failing at once with "Could not get lock": it says so, and waits up
# to NVS_APT_LOCK_WAIT seconds (300), trying again every 2 s (one loop
# for the dpkg, lists and archive locks alike; apt-get's own
# DPkg::Lock::Timeout covers only the first, and silently under -qq).
# Any other failure is apt-get's, as is.
set -euo pipefail
wait_s=${NVS_APT_LOCK_WAIT:-300}
deadline=$((SECONDS + wait_s))
# apt_locked CMD...: run it; while it fails on a lock held by another
# process, say so once and try again until the deadline.
apt_locked() {
	local err said=0 rc locked
	err=$(mktemp)
	while :; do
		rc=0 locked=0
		"$@" 2>"$err" || rc=$?
		[ $rc -ne 0 ] &&
			grep -qE 'Could not get lock|Unable to (lock|acquire)' "$err" &&
			locked=1
		if [ $locked -eq 0 ] || [ $SECONDS -ge $deadline ]; then
			cat "$err" >&2
			rm -f "$err"
			[ $locked -eq 1 ] &&
				echo "deps: gave up after ${wait_s} s waiting for the" \
					"apt lock (NVS_APT_LOCK_WAIT=seconds waits longer)" >&2
			return $rc
		fi
		if [ $said -eq 0 ]; then
			echo "deps: another apt or dpkg holds its lock" \
				"($(grep -m1 -oE 'held by process [0-9]+' "$err" ||
					echo busy)); waiting for it, up to ${wait_s} s" >&2
			said=1
		fi
		sleep 2
	done
}
apt_locked apt-get "$@"
