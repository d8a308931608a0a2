#!/usr/bin/env bash
# udp-vs-peers.sh: ibex's RoCEv2-over-UDP provider against its loopback
# peers, measured side by side in one run on this machine:
#
#   throughput: 1 MiB RDMA WRITE (BenchmarkWrite1MiB, MB/s) vs iperf3 TCP,
#               one stream, loopback, -t $T;
#   latency:    8-byte RDMA WRITE half round trip, median
#               (BenchmarkWriteLatency8B) vs sockperf UDP ping-pong, 64 B,
#               50th percentile (sockperf reports half the round trip).
#
# and prints the two ratios the performance targets are stated in:
# ibex/iperf3 throughput (target >= 0.5) and ibex/sockperf latency
# (target <= 2). Figures are medians of COUNT runs for ibex and of ROUNDS
# runs for the peers, which alternate with ibex's so that a co-tenant's load
# hits all of them alike.
#
# Usage: bench/udp-vs-peers.sh            (from anywhere in the repository)
# Environment: T (peer seconds, 5), COUNT (go test -count, 5), ROUNDS (peer
# runs, 3), PORT (base port, 15201); GOFLAGS reaches go test -c, and the
# provider's switches (IBEX_UDP_GSO=0, IBEX_UDP_GRO=0) the benchmarks.
# The ibex figures are go test -run XXX -bench 'Write1MiB|WriteLatency8B'
# -count COUNT ./provider/udp, run as a compiled test binary in slices.
set -euo pipefail

T=${T:-5}
COUNT=${COUNT:-5}
ROUNDS=${ROUNDS:-3}
PORT=${PORT:-15201}
cd "$(dirname "$0")/.."

if ! command -v iperf3 >/dev/null || ! command -v sockperf >/dev/null; then
	echo "installing iperf3 and sockperf" >&2
	apt-get update >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y iperf3 sockperf >/dev/null
fi

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT

median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) {print "nan"; exit} if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

# iperf3_once prints the receiver's TCP goodput in MB/s (10^6 bytes/s, go
# test's unit).
iperf3_once() {
	local port=$1
	iperf3 -s -1 -B 127.0.0.1 -p "$port" >/dev/null 2>&1 &
	local srv=$!
	pids+=("$srv")
	sleep 0.3
	iperf3 -c 127.0.0.1 -p "$port" -P 1 -t "$T" -J >"$tmp/iperf.json"
	wait "$srv" 2>/dev/null || true
	awk '/"sum_received"/ {in_sum=1} in_sum && /"bits_per_second"/ {gsub(/[^0-9.e+]/, "", $2); printf "%.0f\n", $2/8/1e6; exit}' "$tmp/iperf.json"
}

# sockperf_once prints the median half round trip in µs.
sockperf_once() {
	local port=$1
	sockperf sr -i 127.0.0.1 -p "$port" >/dev/null 2>&1 &
	local srv=$!
	pids+=("$srv")
	sleep 0.3
	sockperf pp -i 127.0.0.1 -p "$port" -m 64 -t "$T" >"$tmp/sockperf.txt" 2>&1
	kill "$srv" 2>/dev/null || true
	wait "$srv" 2>/dev/null || true
	awk '/percentile 50.000/ {print $NF; exit}' "$tmp/sockperf.txt"
}

echo "# $(date -u +%FT%TZ) $(uname -r) $(nproc) cpus, $(go version | awk '{print $3}'), load $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$tmp/iperf"
: >"$tmp/sock"
: >"$tmp/go"
go test -c -o "$tmp/udp.test" ./provider/udp
per=$(( (COUNT + ROUNDS - 1) / ROUNDS ))
left=$COUNT
for r in $(seq 1 "$ROUNDS"); do
	i=$(iperf3_once $((PORT + 2*r)))
	s=$(sockperf_once $((PORT + 2*r + 1)))
	echo "iperf3 TCP 1 stream: $i MB/s    sockperf UDP 64 B pp: $s µs half-rtt (p50)"
	echo "$i" >>"$tmp/iperf"
	echo "$s" >>"$tmp/sock"
	n=$(( left < per ? left : per ))
	if [ "$n" -gt 0 ]; then
		(cd provider/udp && "$tmp/udp.test" -test.run XXX -test.bench 'Write1MiB|WriteLatency8B' -test.count "$n" || true) | tee -a "$tmp/go" | grep -E "^Benchmark|FAIL|_test.go:" || true
		left=$((left - n))
	fi
done

ibw=$(awk '/^BenchmarkWrite1MiB/ {for (i=1;i<=NF;i++) if ($(i+1)=="MB/s") print $i}' "$tmp/go" | median)
ilat=$(awk '/^BenchmarkWriteLatency8B/ {for (i=1;i<=NF;i++) if ($(i+1)=="µs-half-rtt-median") print $i}' "$tmp/go" | median)
pbw=$(median <"$tmp/iperf")
plat=$(median <"$tmp/sock")
echo
printf "%-44s %10s\n" "median of runs" "figure"
printf "%-44s %10s MB/s\n" "ibex RDMA WRITE 1 MiB (udp provider)" "$ibw"
printf "%-44s %10s MB/s\n" "iperf3 TCP loopback, one stream" "$pbw"
printf "%-44s %10s µs\n" "ibex RDMA WRITE 8 B, half-rtt median" "$ilat"
printf "%-44s %10s µs\n" "sockperf UDP 64 B ping-pong, half-rtt p50" "$plat"
awk -v a="$ibw" -v b="$pbw" 'BEGIN {printf "throughput ratio ibex/iperf3   = %.3f  (target >= 0.5)\n", a/b}'
awk -v a="$ilat" -v b="$plat" 'BEGIN {printf "latency ratio    ibex/sockperf = %.2f  (target <= 2)\n", a/b}'
