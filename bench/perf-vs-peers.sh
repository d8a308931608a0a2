#!/usr/bin/env bash
# `ibex perf` on each provider, side by side with the peers on this host, in
# one run, ROUNDS times, alternating; prints the medians and one table of
# ratios. Peers: ucx_perftest (UCX_TLS=posix,self) for shared memory,
# iperf3 (TCP, one stream) and sockperf (UDP ping-pong) for the UDP provider
# on loopback. Needs ucx-utils, iperf3 and sockperf (apt-get install ...).
#
# Units: ibex perf and ucx_perftest print MiB/s (2^20 bytes); iperf3's bits
# are converted to MiB/s. Latency: ib_write_lat's and ucp_put_lat's
# half round trip (median, t_typical), sockperf's half round trip (p50).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
for c in ucx_perftest iperf3 sockperf; do
	command -v $c >/dev/null || { echo "$c not found: apt-get install ucx-utils iperf3 sockperf" >&2; exit 1; }
done
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/ibex" ./cmd/ibex
port=19500
median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) {print "nan"; exit} if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

# ibex TEST DEVICE COLUMN ARGS...: the report's value in column COLUMN
# (4 = BW average, 5 = t_typical) of the first result row.
ibex() {
	local test=$1 dev=$2 col=$3
	shift 3
	port=$((port + 1))
	IBEX_UDP_ADDR=127.0.77.1 "$tmp/ibex" perf "$test" -d "$dev" -p $port "$@" >/dev/null 2>&1 &
	local srv=$!
	pids+=("$srv")
	sleep 0.3
	IBEX_UDP_ADDR=127.0.77.2 "$tmp/ibex" perf "$test" -d "$dev" -p $port "$@" 127.0.0.1 |
		awk -v c="$col" '/#bytes/ {getline; print $c; exit}'
	kill "$srv" 2>/dev/null || true
	wait "$srv" 2>/dev/null || true
}
ucx() { # TEST SIZE ITERS COLUMN (3 = latency median, 6 = MB/s average)
	port=$((port + 1))
	UCX_TLS=posix,self ucx_perftest -p $port >/dev/null 2>&1 &
	local srv=$!
	pids+=("$srv")
	sleep 0.5
	UCX_TLS=posix,self ucx_perftest -p $port 127.0.0.1 -t "$1" -s "$2" -n "$3" 2>/dev/null | awk -v c="$4" '/^Final:/ {print $c}'
	wait "$srv" 2>/dev/null || true
}
iperf() {
	port=$((port + 1))
	iperf3 -s -1 -B 127.0.0.1 -p $port >/dev/null 2>&1 &
	local srv=$!
	pids+=("$srv")
	sleep 0.3
	iperf3 -c 127.0.0.1 -p $port -P 1 -t 3 -J >"$tmp/iperf.json"
	wait "$srv" 2>/dev/null || true
	awk '/"sum_received"/ {s=1} s && /"bits_per_second"/ {gsub(/[^0-9.e+]/, "", $2); printf "%.1f\n", $2/8/1048576; exit}' "$tmp/iperf.json"
}
sockperf_pp() {
	port=$((port + 1))
	sockperf sr -i 127.0.0.1 -p $port >/dev/null 2>&1 &
	local srv=$!
	pids+=("$srv")
	sleep 0.3
	sockperf pp -i 127.0.0.1 -p $port -m 64 -t 3 2>&1 | awk '/percentile 50.000/ {print $NF; exit}'
	kill "$srv" 2>/dev/null || true
	wait "$srv" 2>/dev/null || true
}

rows=(
	"shm0 write_bw 1 MiB (MiB/s)|ibex write_bw shm0 4 -s 1048576 -n 5000|ucx ucp_put_bw 1048576 5000 6|UCX ucp_put_bw|bw"
	"shm0 write_lat 8 B (us)|ibex write_lat shm0 5 -s 8 -n 100000|ucx ucp_put_lat 8 100000 3|UCX ucp_put_lat|lat"
	"shm0 send_bw 64 KiB (MiB/s)|ibex send_bw shm0 4 -s 65536 -n 20000|ucx tag_bw 65536 20000 6|UCX tag_bw|bw"
	"shm0 send_lat 8 B (us)|ibex send_lat shm0 5 -s 8 -n 100000|ucx tag_lat 8 100000 3|UCX tag_lat|lat"
	"udp0 write_bw 1 MiB (MiB/s)|ibex write_bw udp0 4 -s 1048576 -n 2000|iperf|iperf3 TCP|bw"
	"udp0 write_lat 64 B (us)|ibex write_lat udp0 5 -s 64 -n 20000|sockperf_pp|sockperf UDP|lat"
)
declare -A got
for r in $(seq "$ROUNDS"); do
	for i in "${!rows[@]}"; do
		IFS='|' read -r name mine theirs _ _ <<<"${rows[$i]}"
		a=$($mine || true)
		b=$($theirs || true)
		got[$i.ibex]+="${a:-nan} "
		got[$i.peer]+="${b:-nan} "
		echo "round $r: $name: ibex ${a:-nan}, peer ${b:-nan}" >&2
	done
done
echo
printf '%-30s %14s %14s  %-16s %s\n' "measure" "ibex" "peer" "peer tool" "ratio ibex/peer"
for i in "${!rows[@]}"; do
	IFS='|' read -r name _ _ tool kind <<<"${rows[$i]}"
	a=$(tr ' ' '\n' <<<"${got[$i.ibex]}" | grep -v '^$' | median)
	b=$(tr ' ' '\n' <<<"${got[$i.peer]}" | grep -v '^$' | median)
	ratio=$(awk -v a="$a" -v b="$b" 'BEGIN{ if (b+0 > 0) printf "%.2f", a/b; else print "nan" }')
	note="(higher is better)"
	[[ $kind == lat ]] && note="(lower is better)"
	printf '%-30s %14s %14s  %-16s %s %s\n' "$name" "$a" "$b" "$tool" "$ratio" "$note"
done
