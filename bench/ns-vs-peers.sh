#!/usr/bin/env bash
# Issue 17's goals, side by side in one run, between two network namespaces
# joined by a veth pair (server in namespace a, client in b):
#   latency:   ibex perf write_lat -s 8 (t_typical = median, 99% percentile)
#              vs sockperf UDP ping-pong (-m $SOCKPERF_SIZE, half round trip,
#              p50 and p99) in its default mode (blocking epoll) and its
#              fastest here ($SOCKPERF_FAST: non-blocking sockets, recvfrom
#              spun in user space);
#   bandwidth: ibex perf write_bw -s 1M vs iperf3 TCP, one stream, MiB/s and
#              CPU per GB: each tool's user+sys CPU time of both ends over the
#              run (ibex: the CPU[s/GB] lines of client and server; iperf3:
#              --json cpu_utilization_percent host_total + remote_total, x the
#              duration, / GB received; GB = 10^9 B);
#   all_reduce: bench/peers.sh's udp table (ibex coll, 2 ranks, one per
#              namespace, 8 B to $ALLREDUCE_MAX) vs Open MPI TCP, which runs
#              on loopback in one namespace (mpirun cannot span namespaces
#              without ssh);
#   loss:      provider/udp's BenchmarkRoutedLossGoodput: a 256 MiB WRITE
#              between two namespaces of its own through a router namespace
#              whose nftables forward hook drops 1% of the RoCEv2 datagrams
#              each way (netimpair.Routed), which AF_XDP traffic crosses too;
#              lossless, then lossy, checked intact; the goal row's figure.
#              Beside it, once, BenchmarkNetnsLossGoodput: the direct veth
#              with drops in each sender's output hook (netimpair.Impair:
#              netem, or nftables drops and a tbf queue, kept in its lossless
#              baseline), on the UDP socket whatever the mode, since AF_XDP's
#              transmit skips that hook. Their veths get the same MTU.
# Then the goals with the ratios as issue 17 states them.
#
# Knobs (environment):
#   IBEX_UDP_XDP   passed to every ibex process (off, on, auto; unset: the
#                  provider's default); "both" runs each ibex row with on and
#                  with off
#   VETH_MTU       the veth's MTU, default 4200: the largest RoCEv2 datagram
#                  of IB MTU 4096 is 4,188 B (IPv6 header, UDP, BTH, the
#                  largest extension, ICRC; provider/udp/attr.go pathMTU)
#   ALLREDUCE_MAX  largest all_reduce size, default 134217728 (128 MiB)
#   LAT_ITERS, BW_ITERS, SECS   ibex -n for write_lat (20000) and write_bw
#                  (3000 x 1 MiB), seconds of sockperf and iperf3 runs (4)
#   SOCKPERF_SIZE (64; its minimum is 14), SOCKPERF_FAST ("--nonblocked")
#   PARTS          which parts, default "lat bw coll loss"
#   ROUNDS         rounds of the latency and bandwidth rows, alternating
#                  ibex and its peers; the tables show medians (default 3)
# Needs root (namespaces), sockperf, iperf3, jq (apt-get install sockperf
# iperf3 jq) and Open MPI (bench/peers.sh installs it through
# ../shared/bench/run-openmpi.sh). About 4 to 6 minutes with the defaults.
# Usage: bench/ns-vs-peers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
mtu=${VETH_MTU:-4200}
max=${ALLREDUCE_MAX:-134217728}
lat_iters=${LAT_ITERS:-20000}
bw_iters=${BW_ITERS:-3000}
secs=${SECS:-4}
sp_size=${SOCKPERF_SIZE:-64}
sp_fast=${SOCKPERF_FAST:---nonblocked}
parts=${PARTS:-lat bw coll loss}
rounds=${ROUNDS:-3}
case ${IBEX_UDP_XDP-} in
both) modes=(on off) ;;
*) modes=("${IBEX_UDP_XDP-}") ;;
esac
want() { [[ " $parts " == *" $1 "* ]]; }
for c in sockperf iperf3 jq; do
	command -v $c >/dev/null || { echo "$c not found: apt-get install sockperf iperf3 jq" >&2; exit 1; }
done
tmp=$(mktemp -d)
ns=ibexnvp$$
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	ip netns del ${ns}a 2>/dev/null || true
	ip netns del ${ns}b 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
if ! ip netns add ${ns}a 2>/dev/null; then
	echo "cannot create network namespaces here (ip netns add failed; needs root)" >&2
	exit 1
fi
ip netns add ${ns}b
ip link add ${ns}x type veth peer name ${ns}y
ip link set ${ns}x netns ${ns}a
ip link set ${ns}y netns ${ns}b
ipA=10.83.0.1 ipB=10.83.0.2
ip -n ${ns}a addr add $ipA/24 dev ${ns}x
ip -n ${ns}b addr add $ipB/24 dev ${ns}y
ip -n ${ns}a link set ${ns}x mtu "$mtu" up
ip -n ${ns}b link set ${ns}y mtu "$mtu" up
ip -n ${ns}a link set lo up
ip -n ${ns}b link set lo up
go build -o "$tmp/ibex" ./cmd/ibex
port=19600
label() { echo "${1:-default}"; }

# ibexpair MODE NAME TEST ARGS...: an ibex perf server in a, the client in b;
# the reports in $tmp/NAME.srv and $tmp/NAME.cli.
ibexpair() {
	local mode=$1 name=$2 test=$3
	shift 3
	port=$((port + 1))
	ip netns exec ${ns}a env ${mode:+IBEX_UDP_XDP=$mode} IBEX_UDP_ADDR=$ipA "$tmp/ibex" perf "$test" -d udp0 -p $port "$@" >"$tmp/$name.srv" 2>&1 &
	local srv=$!
	pids+=("$srv")
	sleep 0.3
	ip netns exec ${ns}b env ${mode:+IBEX_UDP_XDP=$mode} IBEX_UDP_ADDR=$ipB "$tmp/ibex" perf "$test" -d udp0 -p $port "$@" $ipA >"$tmp/$name.cli" 2>&1 ||
		{ echo "ibex perf $test ($name) failed:" >&2; cat "$tmp/$name.cli" >&2; }
	# A server ends its report (the rule after the table, then the CPU
	# line) when the client leaves: the header has three rules.
	for _ in $(seq 100); do (($(grep -c '^-----' "$tmp/$name.srv") >= 4)) && break; sleep 0.05; done
	sleep 0.05
	kill "$srv" 2>/dev/null || true
	wait "$srv" 2>/dev/null || true
}
row() { awk '/#bytes/ {getline; print; exit}' "$1"; }               # first result row
cpu() { awk '/^ CPU\[s\/GB\]/ {print $3; exit}' "$1"; }            # s/GB
core() { awk '/^ CPU\[s\/GB\]/ {sub("%", "", $4); print $4; exit}' "$1"; } # % of one core
num() { [[ -n ${1-} ]] && echo "$1" || echo nan; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "nan" || b == "nan" || b + 0 == 0) print "nan"; else printf "%.2f", a / b }'; }
sum() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "nan" || b == "nan") print "nan"; else printf "%.4f", a + b }'; }
verdict() { # value op target
	awk -v v="$1" -v op="$2" -v t="$3" 'BEGIN { if (v == "nan") { print "n/a"; exit }
		ok = (op == "<=") ? (v + 0 <= t + 0) : (v + 0 >= t + 0); print ok ? "met" : "NOT met" }'
}

# sockperf_pp NAME PORT FLAGS: p50 and p99 half round trips (µs) of a
# ping-pong.
sockperf_pp() {
	local name=$1 port=$2 flags=$3
	# shellcheck disable=SC2086
	ip netns exec ${ns}a sockperf sr -i $ipA -p $port $flags >/dev/null 2>&1 &
	local srv=$!
	pids+=("$srv")
	sleep 0.3
	# shellcheck disable=SC2086
	ip netns exec ${ns}b sockperf pp -i $ipA -p $port -m "$sp_size" -t "$secs" $flags >"$tmp/$name" 2>&1 || true
	kill "$srv" 2>/dev/null || true
	wait "$srv" 2>/dev/null || true
	echo "$(num "$(awk '/percentile 50.000/ {print $NF; exit}' "$tmp/$name")") $(num "$(awk '/percentile 99.000/ {print $NF; exit}' "$tmp/$name")")"
}

echo "# ibex vs the kernel's peers between two network namespaces (veth MTU $mtu)"
echo "# $(date -u +%FT%TZ), $(nproc) cores, kernel $(uname -r), ibex $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo '+changes')"
declare -A G # goal figures per mode
declare -A V # every round's figures, by name
add() { V[$1]+="$2 "; }
# med NAME: the median of NAME's rounds (nan when none measured)
med() { tr ' ' '\n' <<<"${V[$1]-}" | grep -v '^$' | grep -v nan | sort -g |
	awk '{v[NR] = $1} END {if (NR == 0) print "nan"; else printf "%.5g\n", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
# perGB PERCENT SECONDS BYTES: iperf3's CPU utilisation as CPU-seconds per GB
perGB() { awk -v p="$1" -v s="$2" -v b="$3" 'BEGIN { if (b + 0 > 0 && p != "nan") printf "%.4f", p / 100 * s / (b / 1e9); else print "nan" }'; }

# Rounds alternate ibex and its peers, so that the machine's load hits both
# alike; the tables show medians.
for r in $(seq "$rounds"); do
	if want lat; then
		read -r a b <<<"$(sockperf_pp sp-default 19590 "")"
		add sp50 "$a"
		add sp99 "$b"
		for m in "${modes[@]}"; do
			n=lat-$(label "$m")
			ibexpair "$m" "$n" write_lat -s 8 -n "$lat_iters"
			read -r _ _ _ _ typ _ _ p99 p999 <<<"$(row "$tmp/$n.cli")"
			add "$m.lat" "$(num "${typ-}")"
			add "$m.p99" "$(num "${p99-}")"
			add "$m.p999" "$(num "${p999-}")"
			G[$m.mtu]=$(awk '/Mtu  / {sub(/\[B\]/, "", $3); print $3; exit}' "$tmp/$n.cli")
			echo "round $r: write_lat ($(label "$m")): median $(num "${typ-}") us" >&2
		done
		read -r a b <<<"$(sockperf_pp sp-fast 19591 "$sp_fast")"
		add sf50 "$a"
		add sf99 "$b"
		echo "round $r: sockperf median $(tail -c 40 <<<"${V[sp50]}" | awk '{print $NF}') us, $sp_fast $a us" >&2
	fi
	if want bw; then
		port=$((port + 1))
		ip netns exec ${ns}a iperf3 -s -1 -B $ipA -p $port >/dev/null 2>&1 &
		srv=$!
		pids+=("$srv")
		sleep 0.3
		ip netns exec ${ns}b iperf3 -c $ipA -p $port -P 1 -t "$secs" -J >"$tmp/iperf.json" || true
		wait "$srv" 2>/dev/null || true
		read -r ib is ih ir < <(jq -r '[.end.sum_received.bytes, .end.sum_received.seconds,
			.end.cpu_utilization_percent.host_total, .end.cpu_utilization_percent.remote_total] | map(tostring) | join(" ")' \
			"$tmp/iperf.json" 2>/dev/null || echo "nan nan nan nan")
		add ip.mib "$(awk -v b="$ib" -v s="$is" 'BEGIN { if (s + 0 > 0) printf "%.1f", b / s / 1048576; else print "nan" }')"
		add ip.cc "$(perGB "$ih" "$is" "$ib")"
		add ip.sc "$(perGB "$ir" "$is" "$ib")"
		add ip.cpu "$(awk -v h="$ih" -v r="$ir" -v s="$is" -v b="$ib" 'BEGIN { if (b + 0 > 0) printf "%.4f", (h + r) / 100 * s / (b / 1e9); else print "nan" }')"
		add ip.ch "$ih"
		add ip.sh "$ir"
		for m in "${modes[@]}"; do
			n=bw-$(label "$m")
			ibexpair "$m" "$n" write_bw -s 1048576 -n "$bw_iters"
			read -r _ _ _ avg _ <<<"$(row "$tmp/$n.cli")"
			cc=$(num "$(cpu "$tmp/$n.cli")") sc=$(num "$(cpu "$tmp/$n.srv")")
			add "$m.bw" "$(num "${avg-}")"
			add "$m.cc" "$cc"
			add "$m.sc" "$sc"
			add "$m.cpu" "$(sum "$cc" "$sc")"
			add "$m.ch" "$(num "$(core "$tmp/$n.cli")")"
			add "$m.sh" "$(num "$(core "$tmp/$n.srv")")"
			echo "round $r: write_bw ($(label "$m")): $(num "${avg-}") MiB/s, $(sum "$cc" "$sc") CPU s/GB" >&2
		done
		echo "round $r: iperf3 $(tail -c 40 <<<"${V[ip.mib]}" | awk '{print $NF}') MiB/s, $(tail -c 40 <<<"${V[ip.cpu]}" | awk '{print $NF}') CPU s/GB" >&2
	fi
done

if want lat; then
	echo
	echo "## latency, half round trip (us), median of $rounds rounds: ibex write_lat -s 8 -n $lat_iters, sockperf UDP ping-pong -m $sp_size -t $secs"
	printf '%-34s %10s %10s %10s\n' "" median p99 p99.9
	for m in "${modes[@]}"; do
		printf '%-34s %10s %10s %10s\n' "ibex udp0 ($(label "$m"))" "$(med "$m.lat")" "$(med "$m.p99")" "$(med "$m.p999")"
		G[$m.lat]=$(med "$m.lat")
	done
	sp50=$(med sp50) sf50=$(med sf50)
	printf '%-34s %10s %10s %10s\n' "sockperf UDP (default)" "$sp50" "$(med sp99)" ""
	printf '%-34s %10s %10s %10s\n' "sockperf UDP ($sp_fast)" "$sf50" "$(med sf99)" ""
fi

if want bw; then
	echo
	echo "## bandwidth, one stream, median of $rounds rounds: ibex write_bw -s 1M -n $bw_iters vs iperf3 TCP -P 1 -t $secs"
	echo "## CPU: user+sys of the process at each end over the run, per GB (10^9 B) moved; % of one core"
	printf '%-34s %10s %12s %12s %12s %10s %10s\n' "" MiB/s "CPU s/GB" "client s/GB" "server s/GB" "client %" "server %"
	for m in "${modes[@]}"; do
		printf '%-34s %10s %12s %12s %12s %10s %10s\n' "ibex udp0 ($(label "$m"))" "$(med "$m.bw")" "$(med "$m.cpu")" \
			"$(med "$m.cc")" "$(med "$m.sc")" "$(med "$m.ch")" "$(med "$m.sh")"
		G[$m.bw]=$(med "$m.bw")
		G[$m.cpu]=$(med "$m.cpu")
	done
	ip_mib=$(med ip.mib) ip_cpu=$(med ip.cpu)
	printf '%-34s %10s %12s %12s %12s %10s %10s\n' "iperf3 TCP" "$ip_mib" "$ip_cpu" "$(med ip.cc)" "$(med ip.sc)" "$(med ip.ch)" "$(med ip.sh)"
fi

if want coll; then
	for m in "${modes[@]}"; do
		echo
		echo "## all_reduce, ibex udp0 ($(label "$m")), bench/peers.sh $max udp; Open MPI TCP runs on loopback in one namespace (mpirun cannot span namespaces without ssh)"
		env ${m:+IBEX_UDP_XDP=$m} VETH_MTU="$mtu" bash bench/peers.sh "$max" udp | tee "$tmp/coll-$(label "$m")"
		# t_ratio = ompi/ibex time: the goal is >= 1 at every size; 8 B <= 10 us.
		G[$m.coll]=$(awk '$1 ~ /^[0-9]+$/ { if (min == "" || $7 < min) min = $7 } END { print (min == "") ? "nan" : min }' "$tmp/coll-$(label "$m")")
		G[$m.coll8]=$(awk '$1 == 8 { print $2; exit }' "$tmp/coll-$(label "$m")")
		G[$m.coll8]=$(num "${G[$m.coll8]}")
	done
fi

if want loss; then
	for m in "${modes[@]}"; do
		echo
		# The benchmark runs the mode IBEX_UDP_XDP names (unset: off and
		# on), so the provider's default is asked for by name: auto.
		echo "## 1% loss both ways through a router namespace, 256 MiB WRITE ($(label "$m")): IBEX_UDP_XDP=${m:-auto} go test -run '^\$' -bench RoutedLossGoodput -benchtime 1x ./provider/udp/ (its own namespaces, veth MTU $mtu)"
		env IBEX_UDP_XDP="${m:-auto}" IBEX_TEST_VETH_MTU="$mtu" go test -run '^$' -bench RoutedLossGoodput -benchtime 1x -timeout 12m ./provider/udp/ >"$tmp/loss" 2>&1 || true
		grep -E '^Benchmark|SKIP|FAIL|lossless_MBps' "$tmp/loss" | sed 's/^ *//' || cat "$tmp/loss"
		G[$m.loss]=$(awk '/^BenchmarkRoutedLossGoodput/ { for (i = 2; i <= NF; i++) if ($i == "lossy/lossless") print $(i - 1) }' "$tmp/loss")
		G[$m.loss]=$(num "${G[$m.loss]}")
	done
	echo
	echo "## 1% loss both ways on the direct veth, drops in the senders' output hooks, 256 MiB WRITE (UDP socket: AF_XDP skips those hooks): go test -run '^\$' -bench NetnsLossGoodput -benchtime 1x ./provider/udp/"
	IBEX_TEST_VETH_MTU="$mtu" go test -run '^$' -bench NetnsLossGoodput -benchtime 1x -timeout 10m ./provider/udp/ >"$tmp/loss" 2>&1 || true
	grep -E '^Benchmark|goodput|impairment|SKIP|FAIL|lossless_MBps' "$tmp/loss" | sed 's/^ *//' || cat "$tmp/loss"
	lossdirect=$(num "$(awk '/^BenchmarkNetnsLossGoodput/ { for (i = 2; i <= NF; i++) if ($i == "lossy/lossless") print $(i - 1) }' "$tmp/loss")")
fi

echo
echo "## goals (issue 17), veth MTU $mtu"
printf '%-66s %10s %10s %7s %7s  %s\n' goal ibex peer ratio target verdict
for m in "${modes[@]}"; do
	l=$(label "$m")
	if want lat; then
		r=$(ratio "${G[$m.lat]}" "$sp50")
		printf '%-66s %10s %10s %7s %7s  %s\n' "write_lat -s 8 median / sockperf default ($l, IB MTU ${G[$m.mtu]})" "${G[$m.lat]}" "$sp50" "$r" "<= 0.5" "$(verdict "$r" "<=" 0.5)"
		r=$(ratio "${G[$m.lat]}" "$sf50")
		printf '%-66s %10s %10s %7s %7s  %s\n' "write_lat -s 8 median / sockperf $sp_fast ($l)" "${G[$m.lat]}" "$sf50" "$r" "<= 0.5" "$(verdict "$r" "<=" 0.5)"
	fi
	if want bw; then
		r=$(ratio "${G[$m.bw]}" "$ip_mib")
		printf '%-66s %10s %10s %7s %7s  %s\n' "write_bw 1M MiB/s / iperf3 TCP ($l)" "${G[$m.bw]}" "$ip_mib" "$r" ">= 1.5" "$(verdict "$r" ">=" 1.5)"
		r=$(ratio "${G[$m.cpu]}" "$ip_cpu")
		printf '%-66s %10s %10s %7s %7s  %s\n' "CPU s/GB, both ends / iperf3's ($l)" "${G[$m.cpu]}" "$ip_cpu" "$r" "<= 1" "$(verdict "$r" "<=" 1)"
	fi
	if want coll; then
		printf '%-66s %10s %10s %7s %7s  %s\n' "all_reduce min over sizes of ompi_us/ibex_us ($l)" "" "" "${G[$m.coll]}" ">= 1" "$(verdict "${G[$m.coll]}" ">=" 1)"
		printf '%-66s %10s %10s %7s %7s  %s\n' "all_reduce 8 B, us ($l)" "${G[$m.coll8]}" "" "" "<= 10" "$(verdict "${G[$m.coll8]}" "<=" 10)"
	fi
	if want loss; then
		printf '%-66s %10s %10s %7s %7s  %s\n' "256 MiB WRITE goodput, 1% loss / lossless, routed ($l)" "" "" "${G[$m.loss]}" ">= 0.5" "$(verdict "${G[$m.loss]}" ">=" 0.5)"
	fi
done
if want loss; then
	printf '%-66s %10s %10s %7s %7s  %s\n' "  the same on the direct veth, output-hook drops (UDP socket)" "" "" "$lossdirect" ">= 0.5" "$(verdict "$lossdirect" ">=" 0.5)"
fi
