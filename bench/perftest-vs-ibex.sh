#!/usr/bin/env bash
# perftest-vs-ibex.sh: Debian's perftest programs (on libibexverbs.so, a
# libibverbs whose verbs are ibex's: internal/perftestrun) and ibex perf,
# side by side in one run over udp0 on loopback: ibex perf against ibex
# perf, perftest against perftest, and an ibex perf client against a
# perftest server. All three move the same RoCEv2 through the same ibex
# transport, so the ratios compare the two tools' loops, not transports.
# Needs: go, gcc, perftest, libibverbs-dev (apt-get install perftest libibverbs-dev gcc).
# Usage: bash bench/perftest-vs-ibex.sh [ITERS]   (default 20000; about 30 s)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
for c in go gcc ib_write_bw; do
	command -v "$c" >/dev/null || { echo "perftest-vs-ibex.sh: $c not found (apt-get install perftest libibverbs-dev gcc; Go 1.26)" >&2; exit 1; }
done
[[ -f /usr/include/infiniband/verbs.h ]] || { echo "perftest-vs-ibex.sh: no verbs headers (apt-get install libibverbs-dev)" >&2; exit 1; }
iters=${1:-20000}
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
go build -o "$d/ibex" ./cmd/ibex
CGO_LDFLAGS_ALLOW='-Wl,--version-script=.*' go build -buildmode=c-shared -o "$d/libibexverbs.so" ./internal/perftestrun/testdata/fakeverbs
port=$((20000 + RANDOM % 20000))
pair() { # NAME SERVER... -- CLIENT...: the client's last result line
	local name=$1; shift
	local srv=()
	while [[ $1 != -- ]]; do srv+=("$1"); shift; done; shift
	port=$((port + 1))
	env IBEX_UDP_ADDR=127.0.77.2 "${srv[@]}" -p "$port" >"$d/srv.out" 2>&1 &
	local pid=$!
	sleep 0.5
	env IBEX_UDP_ADDR=127.0.77.3 "$@" -p "$port" 127.0.0.1 >"$d/cli.out" 2>&1 || { cat "$d/cli.out" "$d/srv.out" >&2; exit 1; }
	wait "$pid"
	printf "%-28s %s\n" "$name" "$(grep -E '^ *[0-9]+ +[0-9]+ ' "$d/cli.out" | tail -1)"
}
L="LD_PRELOAD=$d/libibexverbs.so"
for t in "write_bw -s 65536" "write_lat -s 8"; do
	set -- $t
	echo "## $t -n $iters (bw: #bytes #iterations peak avg[MiB/s] Mpps; lat: #bytes #iterations t_min t_max t_typical t_avg ...)"
	pair "ibex perf <-> ibex perf" "$d/ibex" perf "$@" -n "$iters" -d udp0 -- "$d/ibex" perf "$@" -n "$iters" -d udp0
	pair "perftest <-> perftest" env "$L" "ib_$1" "${@:2}" -n "$iters" -F -d udp0 -- env "$L" "ib_$1" "${@:2}" -n "$iters" -F -d udp0
	pair "ibex perf -> perftest" env "$L" "ib_$1" "${@:2}" -n "$iters" -F -d udp0 -- "$d/ibex" perf "$@" -n "$iters" -d udp0
done
