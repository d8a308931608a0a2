#!/usr/bin/env bash
# ibexd-vs-inprocess.sh: udp0 through the per-host daemon (ibex daemon,
# provider ibexd: work requests and completions in shared-memory rings, the
# daemon runs the RC transport) against udp0 in-process (provider udp),
# side by side in one run on this machine:
#
#   bandwidth: ibex perf write_bw -s 1M -n $BW_ITERS, the client busy-polling
#              and with -e (it sleeps on the completion channel, CQ.Wait),
#              in-process vs through a daemon, and iperf3 TCP (one stream,
#              -t $SECS). Per row: MiB/s and Gbit/s; CPU-seconds per GB
#              (10^9 B) of the client and of the server (ibex perf's own
#              CPU[s/GB] lines, getrusage over the run; iperf3: -J
#              cpu_utilization_percent host_total and remote_total x seconds);
#              the daemon's (utime+stime from /proc/PID/stat, from before the
#              server starts to after both ends exit, so setup is in it) per
#              GB moved; and the total, app + daemon, against the in-process
#              row of the same mode;
#   latency:   ibex perf write_lat -s 8 -n $LAT_ITERS, median (t_typical) and
#              99th percentile, in-process vs through a daemon;
#   netns:     (root, ip netns) both again between two network namespaces
#              joined by a veth pair (10.77.0.1/24, 10.77.0.2/24), each
#              namespace with its own daemon on its own address, vs
#              in-process between the namespaces (and iperf3 between them).
#
# Then the ratios: daemon/in-process throughput, the applications' CPU per GB
# through the daemon, total CPU per GB daemon/in-process, and the latency
# difference in µs. A run that fails (an end's non-zero exit, a daemon row
# whose traffic did not cross the daemon's device) is reported and the
# script exits 1 after the tables. About a minute with the defaults.
#
# Knobs (environment):
#   BW_ITERS   write_bw iterations of 1 MiB (2000); -D cannot be used: perftest
#              refuses -e with -D ("Duration mode doesn't work with events")
#   LAT_ITERS  write_lat iterations (10000)
#   SECS       iperf3 seconds (3)
#   CORES      --cores of the loopback daemon (default: the last CPU with
#              four or more, else "": unpinned). Pinned to one CPU the daemon
#              runs with GOMAXPROCS 1 (Go follows the affinity mask), and
#              write_lat through it then crawls (~10 ms a hop: an engine
#              spinning on a request in flight yields the thread, not the
#              goroutine, so the rest wait for the scheduler's preemption)
#   NS_CORES_A, NS_CORES_B   --cores of the namespaces' daemons (default:
#              the last two CPUs with four or more, else unpinned)
#   PARTS      "lo ns" (default): loopback, namespaces
#   VETH_MTU   4200 (IB MTU 4096's largest RoCEv2 datagram fits)
#   PORT       base TCP port of the perftest exchanges (19700)
# Needs iperf3 and jq (installed with apt-get if missing).
# Usage: bench/ibexd-vs-inprocess.sh   (from anywhere in the repository)
set -euo pipefail
cd "$(dirname "$0")/.."
bw_iters=${BW_ITERS:-2000}
lat_iters=${LAT_ITERS:-10000}
secs=${SECS:-3}
ncpu=$(nproc)
if ((ncpu >= 4)); then
	cores=${CORES-$((ncpu - 1))}
	cores_a=${NS_CORES_A-$((ncpu - 1))} cores_b=${NS_CORES_B-$((ncpu - 2))}
else
	cores=${CORES-} cores_a=${NS_CORES_A-} cores_b=${NS_CORES_B-}
fi
parts=${PARTS:-lo ns}
mtu=${VETH_MTU:-4200}
port=${PORT:-19700}
want() { [[ " $parts " == *" $1 "* ]]; }

if ! command -v iperf3 >/dev/null || ! command -v jq >/dev/null; then
	echo "installing iperf3 and jq" >&2
	apt-get update >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y iperf3 jq >/dev/null
fi

tmp=$(mktemp -d)
ns=ibexdvi$$
pids=()  # servers
dpids=() # daemons
netns=false
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${dpids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${dpids[@]}"; do
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
	done
	if $netns; then
		ip netns del "${ns}a" 2>/dev/null || true
		ip netns del "${ns}b" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ibex=$tmp/ibex
go build -o "$ibex" ./cmd/ibex
clk=$(getconf CLK_TCK)
failed=0
fail() {
	echo "FAILED: $*" >&2
	failed=1
}

# ticks PID...: utime+stime of the processes, in clock ticks (fields 14 and
# 15 of /proc/PID/stat, counted after the command name's closing paren).
ticks() {
	local t=0 p v
	for p in "$@"; do
		v=$(awk '{sub(/^.*\) /, ""); print $12 + $13}' "/proc/$p/stat" 2>/dev/null) || v=0
		t=$((t + ${v:-0}))
	done
	echo $t
}

# daemon NAME NETNS ADDR CORES: starts ibex daemon on $tmp/NAME.sock with udp0
# on ADDR (in network namespace NETNS unless ""), waits until it answers,
# and sets dpid to its pid.
daemon() {
	local name=$1 nsx=$2 addr=$3 c=$4 x=()
	[[ -n $nsx ]] && x=(ip netns exec "$nsx")
	"${x[@]}" env -u IBEX_DAEMON IBEX_UDP_ADDR="$addr" "$ibex" daemon --socket "$tmp/$name.sock" ${c:+--cores "$c"} >"$tmp/$name.dlog" 2>&1 &
	dpids+=($!)
	for _ in $(seq 100); do
		if dpid=$("$ibex" daemon status --socket "$tmp/$name.sock" --json 2>/dev/null | jq -r .pid); then
			dpids+=("$dpid")
			local pin=unpinned
			[[ -n $c ]] && pin="--cores $c"
			echo "# daemon $name: $(grep -h 'udp0 on' "$tmp/$name.dlog" | sed 's/^ibexd: //'), $pin${nsx:+, in namespace $nsx}"
			return 0
		fi
		sleep 0.05
	done
	echo "ibex daemon ($name) did not start:" >&2
	cat "$tmp/$name.dlog" >&2
	exit 1
}

# xmit SOCK: the daemon's udp0 PortXmitData (0 if it does not answer).
xmit() {
	"$ibex" daemon status --socket "$1" --json 2>/dev/null |
		jq -r '[.devices[0].counters[] | select(.Name == "PortXmitData") | .Value][0] // 0' 2>/dev/null || echo 0
}

# pair NAME SRV_NS CLI_NS SRV_ENV CLI_ENV PEER CLI_FLAGS TEST ARGS...: an ibex
# perf server (in SRV_NS unless "", environment SRV_ENV) and its client;
# the reports in $tmp/NAME.srv and $tmp/NAME.cli. Returns 1 if either end
# fails.
pair() {
	local name=$1 sns=$2 cns=$3 senv=$4 cenv=$5 peer=$6 cflags=$7 test=$8
	shift 8
	local sx=() cx=() rc=0 src=0 limit=60
	[[ $test == *_lat ]] && limit=40
	[[ -n $sns ]] && sx=(ip netns exec "$sns")
	[[ -n $cns ]] && cx=(ip netns exec "$cns")
	port=$((port + 1))
	# shellcheck disable=SC2086 # the environments and flags are word lists
	"${sx[@]}" env $senv timeout $limit "$ibex" perf "$test" -d udp0 -p $port "$@" >"$tmp/$name.srv" 2>&1 &
	local srv=$!
	pids+=("$srv")
	sleep 0.3
	# shellcheck disable=SC2086
	"${cx[@]}" env $cenv timeout $limit "$ibex" perf "$test" -d udp0 -p $port $cflags "$@" "$peer" >"$tmp/$name.cli" 2>&1 || rc=$?
	wait "$srv" || src=$?
	if ((rc != 0 || src != 0)); then
		fail "ibex perf $test ($name): client exit $rc, server exit $src"
		{ echo "--- client:"; tail -5 "$tmp/$name.cli"; echo "--- server:"; tail -5 "$tmp/$name.srv"; } >&2
		return 1
	fi
}

row() { awk '/#bytes/ {getline; print; exit}' "$1"; }    # the first result row
cpu() { awk '/^ CPU\[s\/GB\]/ {print $3; exit}' "$1"; } # s/GB
num() { [[ -n ${1-} ]] && echo "$1" || echo nan; }
calc() { awk "BEGIN { $1 }" </dev/null; }

declare -A V # figures by key: KEY.mib KEY.gbit KEY.cc KEY.sc KEY.app KEY.d KEY.tot KEY.lat KEY.p99

# bw KEY LABEL SRV_NS CLI_NS SRV_ENV CLI_ENV PEER CLI_FLAGS SOCKS PIDS: one
# write_bw row; with daemons (SOCKS and PIDS, space-separated), their CPU
# over the run and a check that their devices carried it.
bw() {
	local key=$1 label=$2 sns=$3 cns=$4 senv=$5 cenv=$6 peer=$7 cflags=$8 socks=$9 dp=${10}
	local t0 t1 x0=() s
	# shellcheck disable=SC2086
	t0=$(ticks $dp)
	for s in $socks; do x0+=("$(xmit "$s")"); done
	V[$key.label]=$label
	if ! pair "$key" "$sns" "$cns" "$senv" "$cenv" "$peer" "$cflags" write_bw -s 1M -n "$bw_iters"; then
		return 0
	fi
	# shellcheck disable=SC2086
	t1=$(ticks $dp)
	local i=0
	for s in $socks; do
		if (($(xmit "$s") <= ${x0[$i]})); then
			fail "write_bw ($label): the daemon on $s sent nothing: the run did not go through it"
		fi
		i=$((i + 1))
	done
	local b it avg cc sc gb
	read -r b it _ avg _ <<<"$(row "$tmp/$key.cli")"
	cc=$(num "$(cpu "$tmp/$key.cli")") sc=$(num "$(cpu "$tmp/$key.srv")")
	gb=$(calc "printf \"%.6f\", $b * $it / 1e9")
	V[$key.mib]=$avg
	V[$key.gbit]=$(calc "printf \"%.2f\", $avg * 1048576 * 8 / 1e9")
	V[$key.cc]=$cc V[$key.sc]=$sc
	V[$key.app]=$(calc "if (\"$cc\" == \"nan\" || \"$sc\" == \"nan\") print \"nan\"; else printf \"%.4f\", $cc + $sc")
	if [[ -n $dp ]]; then
		V[$key.d]=$(calc "printf \"%.4f\", ($t1 - $t0) / $clk / $gb")
	else
		V[$key.d]=0
	fi
	V[$key.tot]=$(calc "if (\"${V[$key.app]}\" == \"nan\") print \"nan\"; else printf \"%.4f\", ${V[$key.app]} + ${V[$key.d]}")
	echo "$label: ${V[$key.mib]} MiB/s, app ${V[$key.app]} + daemon ${V[$key.d]} CPU s/GB" >&2
}

# lat KEY LABEL SRV_NS CLI_NS SRV_ENV CLI_ENV PEER: one write_lat row.
lat() {
	local key=$1 label=$2
	V[$key.label]=$label
	pair "$key" "$3" "$4" "$5" "$6" "$7" "" write_lat -s 8 -n "$lat_iters" || return 0
	local typ p99
	read -r _ _ _ _ typ _ _ p99 _ <<<"$(row "$tmp/$key.cli")"
	V[$key.lat]=$(num "${typ-}") V[$key.p99]=$(num "${p99-}")
	echo "$label: write_lat median ${V[$key.lat]} us" >&2
}

# iperf KEY LABEL SRV_NS CLI_NS ADDR: iperf3 TCP, one stream.
iperf() {
	local key=$1 label=$2 sns=$3 cns=$4 addr=$5 sx=() cx=()
	[[ -n $sns ]] && sx=(ip netns exec "$sns")
	[[ -n $cns ]] && cx=(ip netns exec "$cns")
	port=$((port + 1))
	V[$key.label]=$label
	"${sx[@]}" iperf3 -s -1 -B "$addr" -p $port >/dev/null 2>&1 &
	local srv=$!
	pids+=("$srv")
	sleep 0.3
	if ! "${cx[@]}" iperf3 -c "$addr" -p $port -P 1 -t "$secs" -J >"$tmp/$key.json"; then
		fail "iperf3 ($label)"
		wait "$srv" 2>/dev/null || true
		return 0
	fi
	wait "$srv" 2>/dev/null || true
	local b s h r
	read -r b s h r < <(jq -r '[.end.sum_received.bytes, .end.sum_received.seconds,
		.end.cpu_utilization_percent.host_total, .end.cpu_utilization_percent.remote_total] | map(tostring) | join(" ")' "$tmp/$key.json")
	V[$key.mib]=$(calc "printf \"%.2f\", $b / $s / 1048576")
	V[$key.gbit]=$(calc "printf \"%.2f\", $b * 8 / $s / 1e9")
	V[$key.cc]=$(calc "printf \"%.4f\", $h / 100 * $s / ($b / 1e9)")
	V[$key.sc]=$(calc "printf \"%.4f\", $r / 100 * $s / ($b / 1e9)")
	V[$key.app]=$(calc "printf \"%.4f\", ($h + $r) / 100 * $s / ($b / 1e9)")
	V[$key.d]=- V[$key.tot]=${V[$key.app]}
	echo "$label: ${V[$key.mib]} MiB/s, ${V[$key.app]} CPU s/GB" >&2
}

g() { echo "${V[$1]-nan}"; }
ratio() { calc "a = \"$1\"; b = \"$2\"; if (a == \"nan\" || b == \"nan\" || b + 0 == 0) print \"nan\"; else printf \"%.2f\", a / b"; }
diff_us() { calc "a = \"$1\"; b = \"$2\"; if (a == \"nan\" || b == \"nan\") print \"nan\"; else printf \"%+.2f\", a - b"; }

# report P TITLE: the tables and ratios of part P (keys P.ip, P.ie, P.dp,
# P.de, P.tcp, P.lip, P.ldp).
report() {
	local p=$1
	echo
	echo "## $2"
	echo "## write_bw -s 1M -n $bw_iters (client polls, or -e: sleeps on CQ events); iperf3 TCP -P 1 -t $secs"
	echo "## CPU: CPU-seconds per GB (10^9 B) moved; client and server: each process's own (ibex perf's CPU[s/GB] line; iperf3 -J);"
	echo "## daemon: utime+stime of the daemon(s) over the run (/proc/PID/stat); total = client + server + daemon"
	printf '%-34s %9s %7s %9s %9s %9s %9s %9s %9s\n' "" MiB/s Gbit/s "client" "server" "app" "daemon" "total" "total/in"
	local k base
	for k in ip ie dp de tcp; do
		base=$p.ip
		[[ $k == ie || $k == de ]] && base=$p.ie
		[[ -n ${V[$p.$k.label]-} ]] || continue
		printf '%-34s %9s %7s %9s %9s %9s %9s %9s %9s\n' "$(g "$p.$k.label")" "$(g "$p.$k.mib")" "$(g "$p.$k.gbit")" "$(g "$p.$k.cc")" \
			"$(g "$p.$k.sc")" "$(g "$p.$k.app")" "$(g "$p.$k.d")" "$(g "$p.$k.tot")" "$(ratio "$(g "$p.$k.tot")" "$(g "$base.tot")")"
	done
	echo
	echo "## write_lat -s 8 -n $lat_iters, half round trip (us)"
	printf '%-34s %9s %9s\n' "" median p99
	for k in lip ldp; do
		[[ -n ${V[$p.$k.label]-} ]] || continue
		printf '%-34s %9s %9s\n' "$(g "$p.$k.label")" "$(g "$p.$k.lat")" "$(g "$p.$k.p99")"
	done
	echo
	echo "## ratios ($p)"
	printf '%-62s %9s\n' "throughput daemon/in-process, client polls" "$(ratio "$(g "$p.dp.mib")" "$(g "$p.ip.mib")")"
	printf '%-62s %9s\n' "throughput daemon/in-process, client -e" "$(ratio "$(g "$p.de.mib")" "$(g "$p.ie.mib")")"
	printf '%-62s %9s\n' "app CPU s/GB through the daemon (client+server), polls" "$(g "$p.dp.app")"
	printf '%-62s %9s\n' "app CPU s/GB through the daemon (client+server), -e" "$(g "$p.de.app")"
	printf '%-62s %9s\n' "app CPU s/GB in-process (client+server), polls / -e" "$(g "$p.ip.app") / $(g "$p.ie.app")"
	printf '%-62s %9s\n' "total CPU/GB daemon/in-process (app + daemon), polls" "$(ratio "$(g "$p.dp.tot")" "$(g "$p.ip.tot")")"
	printf '%-62s %9s\n' "total CPU/GB daemon/in-process (app + daemon), -e" "$(ratio "$(g "$p.de.tot")" "$(g "$p.ie.tot")")"
	printf '%-62s %9s\n' "total CPU/GB daemon -e / iperf3 TCP" "$(ratio "$(g "$p.de.tot")" "$(g "$p.tcp.tot")")"
	printf '%-62s %9s\n' "write_lat -s 8 median, daemon - in-process (us)" "$(diff_us "$(g "$p.ldp.lat")" "$(g "$p.lip.lat")")"
}

echo "# ibexd vs in-process udp0, $(date -u +%FT%TZ), $ncpu cpus, kernel $(uname -r), $(go version | awk '{print $3}'), ibex $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD -- . 2>/dev/null || echo '+changes'), load $(cut -d' ' -f1-3 /proc/loadavg)"
start=$SECONDS

if want lo; then
	# In-process: two loopback addresses; the daemon has a third (its
	# udp0), and serves both ends.
	inS="IBEX_DAEMON=off IBEX_UDP_ADDR=127.77.0.2" inC="IBEX_DAEMON=off IBEX_UDP_ADDR=127.77.0.3"
	daemon lo "" 127.77.0.1 "$cores"
	lo_pid=$dpid
	dS="-u IBEX_DAEMON IBEX_DAEMON_SOCKET=$tmp/lo.sock"
	bw lo.ip "in-process" "" "" "$inS" "$inC" 127.77.0.2 "" "" ""
	bw lo.ie "in-process, client -e" "" "" "$inS" "$inC" 127.77.0.2 "-e" "" ""
	bw lo.dp "daemon" "" "" "$dS" "$dS" 127.0.0.1 "" "$tmp/lo.sock" "$lo_pid"
	bw lo.de "daemon, client -e" "" "" "$dS" "$dS" 127.0.0.1 "-e" "$tmp/lo.sock" "$lo_pid"
	iperf lo.tcp "iperf3 TCP" "" "" 127.0.0.1
	lat lo.lip "in-process" "" "" "$inS" "$inC" 127.77.0.2
	lat lo.ldp "daemon" "" "" "$dS" "$dS" 127.0.0.1
	kill -0 "$lo_pid" 2>/dev/null || fail "the loopback daemon exited: $(tail -3 "$tmp/lo.dlog")"
fi

if want ns; then
	if [[ $EUID -ne 0 ]] || ! ip netns add "${ns}a" 2>/dev/null; then
		echo "# namespaces skipped: ip netns add failed (needs root)" >&2
		parts=${parts/ns/}
	else
		netns=true
		ip netns add "${ns}b"
		ip link add ${ns}x type veth peer name ${ns}y
		ip link set ${ns}x netns "${ns}a"
		ip link set ${ns}y netns "${ns}b"
		ipA=10.77.0.1 ipB=10.77.0.2
		ip -n "${ns}a" addr add $ipA/24 dev ${ns}x
		ip -n "${ns}b" addr add $ipB/24 dev ${ns}y
		ip -n "${ns}a" link set ${ns}x mtu "$mtu" up
		ip -n "${ns}b" link set ${ns}y mtu "$mtu" up
		ip -n "${ns}a" link set lo up
		ip -n "${ns}b" link set lo up
		# In-process first: a namespace's daemon takes its address's
		# RoCEv2 port.
		inS="IBEX_DAEMON=off IBEX_UDP_ADDR=$ipA" inC="IBEX_DAEMON=off IBEX_UDP_ADDR=$ipB"
		bw ns.ip "in-process" "${ns}a" "${ns}b" "$inS" "$inC" $ipA "" "" ""
		bw ns.ie "in-process, client -e" "${ns}a" "${ns}b" "$inS" "$inC" $ipA "-e" "" ""
		lat ns.lip "in-process" "${ns}a" "${ns}b" "$inS" "$inC" $ipA
		daemon nsa "${ns}a" $ipA "$cores_a"
		pa=$dpid
		daemon nsb "${ns}b" $ipB "$cores_b"
		pb=$dpid
		dS="-u IBEX_DAEMON IBEX_DAEMON_SOCKET=$tmp/nsa.sock" dC="-u IBEX_DAEMON IBEX_DAEMON_SOCKET=$tmp/nsb.sock"
		bw ns.dp "daemons" "${ns}a" "${ns}b" "$dS" "$dC" $ipA "" "$tmp/nsa.sock $tmp/nsb.sock" "$pa $pb"
		bw ns.de "daemons, client -e" "${ns}a" "${ns}b" "$dS" "$dC" $ipA "-e" "$tmp/nsa.sock $tmp/nsb.sock" "$pa $pb"
		lat ns.ldp "daemons" "${ns}a" "${ns}b" "$dS" "$dC" $ipA
		for p in $pa $pb; do kill -0 "$p" 2>/dev/null || fail "a namespace's daemon (pid $p) exited"; done
		iperf ns.tcp "iperf3 TCP" "${ns}a" "${ns}b" $ipA
	fi
fi

want lo && report lo "loopback: in-process 127.77.0.2 <-> 127.77.0.3; one daemon (udp0 on 127.77.0.1) serves both ends"
want ns && report ns "two network namespaces on a veth (MTU $mtu): $ipA <-> $ipB; daemons: one per namespace, udp0 on its address"
echo
echo "# $((SECONDS - start)) s"
exit $failed
