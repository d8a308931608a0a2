#!/usr/bin/env bash
# Issue 21's cost of encryption (package psp): `ibex perf write_bw -s 1M`
# and `ibex perf write_lat -s 8` between two udp devices on loopback
# (127.0.0.94 and .95), plain and encrypted (IBEX_PSP=required on both ends:
# a connection that were not encrypted would be refused), interleaved,
# ROUNDS times (alternating which goes first); prints every figure and the
# medians. Units: MiB/s (BW average), µs (write_lat's t_typical and t_min,
# half a round trip; on a loaded machine t_min is the steadier estimate of
# a fixed per-message cost).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
ITERS_BW=${ITERS_BW:-5000}
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/ibex" ./cmd/ibex
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' | sed 's/^/1:/' >"$tmp/key"
port=19700
median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

# run MODE TEST COLUMNS ARGS...: columns COLUMNS (awk field numbers,
# comma-separated) of the first result row (4 = BW average; 3 = t_min,
# 5 = t_typical).
run() {
	local mode=$1 test=$2 col=$3
	shift 3
	local env=(IBEX_UDP_XDP=off)
	if [ "$mode" = psp ]; then env+=(IBEX_PSP=required IBEX_PSP_KEY="$tmp/key"); fi
	port=$((port + 1))
	env "${env[@]}" IBEX_UDP_ADDR=127.0.0.94 "$tmp/ibex" perf "$test" -d udp0 -p $port "$@" >"$tmp/srv.out" 2>&1 &
	local srv=$!
	pids+=("$srv")
	sleep 0.3
	env "${env[@]}" IBEX_UDP_ADDR=127.0.0.95 "$tmp/ibex" perf "$test" -d udp0 -p $port "$@" 127.0.0.94 >"$tmp/cli.out" 2>&1 || {
		echo "$mode $test failed:" >&2
		cat "$tmp/cli.out" "$tmp/srv.out" >&2
		exit 1
	}
	wait "$srv" 2>/dev/null || true
	awk -v c="$col" '/#bytes/ {getline; n = split(c, f, ","); o = ""; for (i = 1; i <= n; i++) o = o (i > 1 ? " " : "") $f[i]; print o; exit}' "$tmp/cli.out"
}

for r in $(seq "$ROUNDS"); do
	order="plain psp"
	if [ $((r % 2)) = 0 ]; then order="psp plain"; fi
	for m in $order; do
		bw=$(run "$m" write_bw 4 -s 1M -n "$ITERS_BW")
		lat=$(run "$m" write_lat 5,3 -s 8)
		echo "$m $bw $lat" | tee -a "$tmp/all"
	done
done
echo
printf '%-6s %14s %18s %14s\n' mode "write_bw MiB/s" "write_lat typ µs" "t_min µs"
for m in plain psp; do
	bw=$(awk -v m=$m '$1==m {print $2}' "$tmp/all" | median)
	lat=$(awk -v m=$m '$1==m {print $3}' "$tmp/all" | median)
	lmin=$(awk -v m=$m '$1==m {print $4}' "$tmp/all" | median)
	printf '%-6s %14s %18s %14s\n' $m "$bw" "$lat" "$lmin"
	eval "${m}_bw=$bw ${m}_lat=$lat ${m}_min=$lmin"
done
awk -v pb="$plain_bw" -v eb="$psp_bw" -v pl="$plain_lat" -v el="$psp_lat" -v pm="$plain_min" -v em="$psp_min" \
	'BEGIN {printf "cost: bandwidth %.1f%% (goal <= 10%%), latency %+.2f us typical, %+.2f us t_min (goal <= 1 us)\n", 100*(pb-eb)/pb, el-pl, em-pm}'
