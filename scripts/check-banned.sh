#!/usr/bin/env bash
# The library (and the Python extension) never exits, aborts or prints, uses the thread-safe
# nvs_strerror rather than strerror, and includes uthash only through
# src/internal/hash.h.
set -uo pipefail
cd "$(dirname "$0")/.."
bad=0
hits=$(grep -rnE '(^|[^_a-zA-Z])(exit|_exit|abort|printf|puts|putchar|perror)\(' src python/_nvswap \
	--include='*.c' --include='*.h' | grep -vE 'snprintf|vsnprintf|nvs__errfmt')
if [ -n "$hits" ]; then
	echo "banned call in src/ (the library must not exit, abort or print):"
	echo "$hits"
	bad=1
fi
hits=$(grep -rn '#include <uthash.h>' src | grep -v '^src/internal/hash.h:')
if [ -n "$hits" ]; then
	echo "uthash included outside src/internal/hash.h:"
	echo "$hits"
	bad=1
fi
hits=$(grep -rnE '(^|[^_a-zA-Z])strerror\(' src python/_nvswap --include='*.c' --include='*.h')
if [ -n "$hits" ]; then
	echo "strerror in src/ (not thread-safe; use nvs_strerror):"
	echo "$hits"
	bad=1
fi
hits=$(grep -rnE 'fprintf\(' src --include='*.c' --include='*.h')
if [ -n "$hits" ]; then
	echo "fprintf in src/:"
	echo "$hits"
	bad=1
fi
[ $bad -eq 0 ] && echo "banned-call check: clean"
exit $bad
