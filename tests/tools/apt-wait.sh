#!/usr/bin/env bash
# scripts/apt-get.sh against a real dpkg lock held by another process
# (fcntl, as apt and dpkg take it): it says so, waits, and succeeds once
# the lock is free; with a short NVS_APT_LOCK_WAIT it gives up, naming
# the variable. apt-get "installs" only what is installed already
# (make), so nothing on the machine changes.
set -uo pipefail
apt=${1:?usage: apt-wait.sh PATH/TO/scripts/apt-get.sh}
if [ "$(id -u)" -ne 0 ]; then
	echo "SKIP: apt-get needs root to take the dpkg lock"
	exit 77
fi
fail() {
	echo "FAIL: $*"
	exit 1
}
# hold SECONDS: a child holds the dpkg frontend lock that long; returns
# once it is held
hold() {
	coproc HOLDER { exec python3 -c 'import fcntl, sys, time
f = open("/var/lib/dpkg/lock-frontend", "w")
fcntl.lockf(f, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(float(sys.argv[1]))' "$1"; }
	read -r line <&"${HOLDER[0]}"
	[ "$line" = held ] || fail "the lock holder did not start"
}

hold 5
start=$SECONDS
out=$("$apt" install -y -qq --no-install-recommends make 2>&1) ||
	fail "apt-get.sh failed while waiting: $out"
waited=$((SECONDS - start))
wait
grep -q 'holds its lock (held by process [0-9]*); waiting for it, up to 300 s' \
	<<<"$out" || fail "no waiting message: $out"
[ $waited -ge 3 ] || fail "returned after ${waited} s, before the lock was free"
echo "ok: waited ${waited} s for the lock, then installed: $out"

hold 30
out=$(NVS_APT_LOCK_WAIT=2 "$apt" install -y -qq make 2>&1)
rc=$?
kill "$HOLDER_PID" 2>/dev/null
wait
[ $rc -eq 100 ] || fail "rc $rc, not apt-get's 100: $out"
grep -q 'gave up after 2 s waiting for the apt lock (NVS_APT_LOCK_WAIT' \
	<<<"$out" || fail "no give-up message: $out"
echo "ok: gave up after NVS_APT_LOCK_WAIT=2 with apt-get's status 100"
