#!/usr/bin/env bash
# Runs ibex's shm provider and UCX (ucx_perftest, UCX_TLS=posix,self) side by
# side on this host, alternating them ROUNDS times, and prints the medians and
# their ratios: 8-byte RDMA WRITE latency (median half round trip, as
# ib_write_lat and ucp_put_lat report it) and 1 MiB RDMA WRITE bandwidth.
# Needs ucx-utils (apt-get install ucx-utils).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
command -v ucx_perftest >/dev/null || { echo "ucx_perftest not found: apt-get install ucx-utils" >&2; exit 1; }
go test -c -o /tmp/shm.test ./provider/shm
export UCX_TLS=posix,self
port=13400
ucx() { # test size iters -> the "Final:" line
	port=$((port + 1))
	ucx_perftest -p $port >/dev/null 2>&1 &
	local srv=$!
	sleep 0.5
	ucx_perftest -p $port 127.0.0.1 -t "$1" -s "$2" -n "$3" 2>/dev/null | grep '^Final:'
	wait $srv || true
}
lat_ibex=() lat_ucx=() bw_ibex=() bw_ucx=()
for r in $(seq "$ROUNDS"); do
	# Final: iters  lat50%  lat_avg  lat_overall  bw_avg(MB/s) bw_overall msgrate...
	lat_ucx+=("$(ucx ucp_put_lat 8 200000 | awk '{print $3}')")
	lat_ibex+=("$(/tmp/shm.test -test.run '^$' -test.bench 'WriteLat/pool' -test.benchtime 200000x | awk '/p50-lat-us/{for(i=1;i<=NF;i++) if($i=="p50-lat-us") print $(i-1)}')")
	bw_ucx+=("$(ucx ucp_put_bw 1048576 5000 | awk '{print $6}')")
	bw_ibex+=("$(/tmp/shm.test -test.run '^$' -test.bench 'WriteBW/pool' -test.benchtime 5000x | awk '/MB\/s/{for(i=1;i<=NF;i++) if($i=="MB/s") print $(i-1)}')")
	echo "round $r: lat us ibex ${lat_ibex[-1]} ucx ${lat_ucx[-1]}; bw MB/s ibex ${bw_ibex[-1]} ucx ${bw_ucx[-1]}"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'; }
li=$(median "${lat_ibex[@]}") lu=$(median "${lat_ucx[@]}") bi=$(median "${bw_ibex[@]}") bu=$(median "${bw_ucx[@]}")
echo
echo "8 B WRITE latency, median half round trip: ibex shm $li us, UCX posix $lu us, ratio ibex/UCX $(awk -v a="$li" -v b="$lu" 'BEGIN{printf "%.2f", a/b}') (target <= 1.5)"
echo "1 MiB WRITE bandwidth: ibex shm $bi MB/s, UCX posix $bu MB/s, ratio ibex/UCX $(awk -v a="$bi" -v b="$bu" 'BEGIN{printf "%.2f", a/b}') (target >= 1)"
