#!/usr/bin/env bash
# Issue 22's key-value store, whose GETs are one-sided RDMA READs, against
# redis and memcached, side by side: values of each of SIZES bytes, with
# pipelines of each of PIPELINES ops, CONNS connections,
#   ibex:      `ibex kv serve --listen ADDR --device D`, loaded by
#              `ibex kv bench --target ibex://ADDR` (internal/kvload: closed
#              loop, GET_RATIO GETs, the rest SETs, KEYS keys, SECS seconds);
#   redis:     redis-server (--save '' --appendonly no --protected-mode no:
#              it listens on the test's address only; REDIS_ARGS), loaded by
#              redis-benchmark (the real tool: -t set, then -t get, -d SIZE
#              -c CONNS -P PIPE -r KEYS -n REQUESTS|REQUESTS_PIPELINED,
#              --csv: ops/s, p50 and p99) and by the same `ibex kv bench
#              --target redis://ADDR` load as ibex;
#   memcached: memcached (MEMCACHED_ARGS), loaded by `ibex kv bench --target
#              memcached://ADDR`.
# Each on one host (ibex: shm0; the peers on loopback 127.0.0.160-169) and
# between two network namespaces kvb-PID-a (servers, 10.22.2.1) and kvb-PID-b
# (clients, 10.22.2.2) joined by a veth pair (ibex: udp0, IBEX_UDP_ADDR set
# to each namespace's address).
#
# Latency: kvload's is a Do's (a pipelined op's latency is its whole
# pipeline's, first byte sent to last reply read); redis-benchmark's is each
# request's, from its pipeline's send to its own reply. Server CPU: the
# server process's utime+stime (/proc/PID/stat, all threads) over one load
# run, per million GETs of that run (a kv bench run's SETs cost included; a
# redis-benchmark GET run is GETs only). Medians of ROUNDS rounds, in which
# the servers alternate so that the machine's load hits all alike. Then the
# ratios ibex / redis: ops/s, p99, CPU per million GETs.
#
# Knobs (environment):
#   SIZES ("100 4096"), PIPELINES ("1 16"), CONNS (16), WHERE ("host ns")
#   SECS          kv bench seconds per run (5); ROUNDS (3)
#   GET_RATIO     kv bench's fraction of GETs (0.9; memtier's 1:10 is 0.909)
#   KEYS          key space (10000): kv bench --keys if it has the flag,
#                 redis-benchmark -r
#   REQUESTS, REQUESTS_PIPELINED   redis-benchmark -n per test, pipeline 1
#                 (100000) and deeper (1000000)
#   REDIS_ARGS    more redis-server arguments ("")
#   MEMCACHED_ARGS  memcached's ("-t 2 -m 1024 -c 4096"; -u nobody is added
#                 as root)
#   VETH_MTU      the veth's MTU, default 4200: the largest RoCEv2 datagram
#                 of IB MTU 4096 is 4,188 B (see ns-vs-peers.sh)
#   IBEX          1 (default): the ibex rows, failing at once if this build's
#                 ibex has no `kv serve` and `kv bench`; 0: peers only (the
#                 kv bench rows then need KV_BENCH or this build's ibex kv
#                 bench, else only redis-benchmark's rows are measured)
#   KV_BENCH      a command that takes ibex kv bench's flags and prints its
#                 JSON, used instead of this build's `ibex kv bench`
#   IBEX_UDP_XDP  passed to the ibex processes if set
#   KV_SERVE_ARGS, KV_BENCH_ARGS   more arguments of ibex kv serve and of
#                 every kv bench run
# kv bench's JSON: ops_per_sec, p50_us, p99_us, p999_us, ops, gets, sets,
# misses; with --preload in its --help, every run preloads the keys (else
# the miss column shows what the run's own SETs left unwritten: a miss is
# cheaper than a hit); with --keys, KEYS is passed; with --device, ibex's
# runs get --device shm0|udp0.
# Needs root (namespaces), redis-server, redis-tools, memcached, jq
# (apt-get install redis-server redis-tools memcached jq); never touches the
# packaged services.
# Usage: bench/kv-vs-redis.sh
# shellcheck disable=SC2059 # the tables' formats are in $fmt
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=${SIZES:-100 4096}
pipes=${PIPELINES:-1 16}
conns=${CONNS:-16}
where=${WHERE:-host ns}
secs=${SECS:-5}
rounds=${ROUNDS:-3}
ratio_get=${GET_RATIO:-0.9}
keys=${KEYS:-10000}
req1=${REQUESTS:-100000}
reqp=${REQUESTS_PIPELINED:-1000000}
redis_args=${REDIS_ARGS:-}
mc_args=${MEMCACHED_ARGS:--t 2 -m 1024 -c 4096}
mtu=${VETH_MTU:-4200}
ibex_rows=${IBEX:-1}
read -r -a serve_args <<<"${KV_SERVE_ARGS-}"
read -r -a bench_args <<<"${KV_BENCH_ARGS-}"
for c in redis-server redis-benchmark memcached jq; do
	command -v $c >/dev/null || { echo "$c not found: apt-get install redis-server redis-tools memcached jq" >&2; exit 1; }
done
redis=$(command -v redis-server) memcached=$(command -v memcached)
((EUID != 0)) || mc_args+=" -u nobody" # memcached refuses root otherwise

tmp=$(mktemp -d /tmp/kvb.XXXXXX)
ns=kvb-$$
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	ip netns del $ns-a 2>/dev/null || true
	ip netns del $ns-b 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

# The load command for kv bench rows, and whether ibex's server is there.
kvbench=()
if [[ $ibex_rows == 1 || -z ${KV_BENCH-} ]]; then
	go build -o "$tmp/ibex" ./cmd/ibex
	# cobra answers --help of an unknown command with the root's help.
	hs=$("$tmp/ibex" kv serve --help 2>&1 || true) hb=$("$tmp/ibex" kv bench --help 2>&1 || true)
	if [[ $hb == *"ibex kv bench"* ]]; then kvbench=("$tmp/ibex" kv bench); fi
	if [[ $ibex_rows == 1 && ($hs != *"ibex kv serve"* || $hb != *"ibex kv bench"*) ]]; then
		echo "ibex kv serve / ibex kv bench: not in this build of cmd/ibex ($(git rev-parse --short HEAD)); run with IBEX=0 for the peers only" >&2
		exit 1
	fi
fi
if [[ -n ${KV_BENCH-} ]]; then
	read -r -a kvbench <<<"$KV_BENCH"
	hb=$("${kvbench[@]}" --help 2>&1 || true)
fi
kvflags=()
kvdevice=0
if ((${#kvbench[@]})); then
	# -preload: cobra's help says --preload, the flag package's -preload.
	if [[ $hb == *-preload* ]]; then kvflags+=(--preload); fi
	if [[ $hb == *-keys* ]]; then kvflags+=(--keys "$keys"); fi
	if [[ $hb == *-device* ]]; then kvdevice=1; fi
else
	echo "no kv bench (this build of ibex has no kv bench, KV_BENCH unset): redis-benchmark's rows only" >&2
fi

if [[ " $where " == *" ns "* ]]; then
	if ! ip netns add $ns-a 2>/dev/null; then
		echo "cannot create network namespaces here (ip netns add failed; needs root)" >&2
		exit 1
	fi
	ip netns add $ns-b
	ip link add kvb$$a type veth peer name kvb$$b
	ip link set kvb$$a netns $ns-a
	ip link set kvb$$b netns $ns-b
	ip -n $ns-a addr add 10.22.2.1/24 dev kvb$$a
	ip -n $ns-b addr add 10.22.2.2/24 dev kvb$$b
	ip -n $ns-a link set kvb$$a mtu "$mtu" up
	ip -n $ns-b link set kvb$$b mtu "$mtu" up
	ip -n $ns-a link set lo up
	ip -n $ns-b link set lo up
fi

hz=$(getconf CLK_TCK)
# ticks PID: utime+stime of the process, all threads (fields 14 and 15 of
# /proc/PID/stat, counted after the command name's closing paren).
ticks() { awk '{sub(/^.*\) /, ""); print $12 + $13}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# waitport NETNS ADDR PORT: until something listens there (10 s).
waitport() {
	for _ in $(seq 200); do
		if ${1:+ip netns exec $1} bash -c "exec 3<>/dev/tcp/$2/$3" 2>/dev/null; then return 0; fi
		sleep 0.05
	done
	echo "nothing listens on $2:$3${1:+ in $1} after 10 s" >&2
	return 1
}
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
nsexec() { if [[ $1 == - ]]; then shift; "$@"; else local n=$1; shift; ip netns exec "$n" "$@"; fi; }
# bgexec NETNS CMD...: for `bgexec ... &`: the background subshell becomes
# CMD (ip netns exec and env exec too), so $! is the server's own pid.
bgexec() { if [[ $1 == - ]]; then shift; exec "$@"; else local n=$1; shift; exec ip netns exec "$n" "$@"; fi; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "nan" || b == "nan" || b + 0 == 0) print "nan"; else printf "%.2f", a / b }'; }
declare -A V # every round's figures, by name
add() { V[$1]+="$2 "; }
med() { tr ' ' '\n' <<<"${V[$1]-}" | grep -v '^$' | grep -v nan | sort -g |
	awk '{v[NR] = $1} END {if (NR == 0) { print "nan"; exit } m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf (m >= 1000 ? "%.0f\n" : "%.4g\n"), m}'; }
# cpum TICKS GETS: CPU seconds per million GETs
cpum() { awk -v t="$1" -v hz="$hz" -v g="$2" 'BEGIN { if (g > 0) printf "%.3f", t / hz / (g / 1e6); else print "nan" }'; }

# hosts WHERE: "server-netns client-netns redis-addr ibex-addr memcached-addr"
hosts() {
	case $1 in
	host) echo "- - 127.0.0.160 127.0.0.161 127.0.0.162" ;;
	ns) echo "$ns-a $ns-b 10.22.2.1 10.22.2.1 10.22.2.1" ;;
	esac
}
port=18700

# kvrun KEY NETNS PID TARGET SIZE PIPE [ENV...]: one kv bench run against
# the server PID, recorded under KEY.
kvrun() {
	local k=$1 cns=$2 srv=$3 target=$4 size=$5 pipe=$6 t0 t1 out=$tmp/$1.$port
	shift 6
	local extra=()
	if [[ $target == ibex://* && $kvdevice == 1 ]]; then extra=(--device "$dev"); fi
	t0=$(ticks "$srv")
	nsexec "$cns" env "$@" "${kvbench[@]}" --target "$target" --conns "$conns" --pipeline "$pipe" --size "$size" \
		--get-ratio "$ratio_get" --duration "${secs}s" --json "${kvflags[@]}" "${extra[@]}" "${bench_args[@]}" >"$out" 2>"$out.err" || true
	t1=$(ticks "$srv")
	local ops p50 p99 p999 gets misses
	if ! read -r ops p50 p99 p999 gets misses < <(jq -r '[.ops_per_sec, .p50_us, .p99_us, .p999_us, .gets, .misses] | map(tostring) | join(" ")' "$out" 2>/dev/null) ||
		[[ $ops == null ]]; then
		echo "kv bench --target $target (size $size, pipeline $pipe) gave no JSON with ops_per_sec, p50_us, p99_us, p999_us, gets, misses:" >&2
		cat "$out" "$out.err" >&2
		return
	fi
	add "$k.ops" "$ops"
	add "$k.p50" "$p50"
	add "$k.p99" "$p99"
	add "$k.p999" "$p999"
	add "$k.miss" "$(awk -v m="$misses" -v g="$gets" 'BEGIN { if (g > 0) printf "%.4f", m / g; else print "nan" }')"
	add "$k.cpu" "$(cpum "$((t1 - t0))" "$gets")"
}

# rbrun KEY NETNS PID ADDR PORT SIZE PIPE TEST: one redis-benchmark test.
rbrun() {
	local k=$1 cns=$2 srv=$3 addr=$4 p=$5 size=$6 pipe=$7 test=$8 n=$req1 t0 t1 out=$tmp/$1.$5
	((pipe == 1)) || n=$reqp
	t0=$(ticks "$srv")
	nsexec "$cns" redis-benchmark -h "$addr" -p "$p" -t "$test" -d "$size" -c "$conns" -P "$pipe" -r "$keys" -n "$n" --csv \
		>"$out" 2>&1 || true
	t1=$(ticks "$srv")
	# "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
	local rps p50 p99
	if ! read -r rps p50 p99 < <(awk -F, -v t="\"${test^^}\"" '$1 == t { gsub(/"/, ""); printf "%s %.1f %.1f\n", $2, $5 * 1000, $7 * 1000; f = 1 }
		END { exit !f }' "$out"); then
		echo "redis-benchmark -t $test (size $size, pipeline $pipe) printed no $test row:" >&2
		cat "$out" >&2
		return
	fi
	add "$k.ops" "$rps"
	add "$k.p50" "$p50"
	add "$k.p99" "$p99"
	[[ $test == get ]] && add "$k.cpu" "$(cpum "$((t1 - t0))" "$n")"
	return 0
}

# one WHERE SIZE PIPE: every server's runs for one row.
one() {
	local w=$1 size=$2 pipe=$3 sns cns ra ia ma srv senv=() cenv=() dev=shm0
	read -r sns cns ra ia ma <<<"$(hosts "$w")"
	local k=$w.$size.$pipe
	if [[ $w == ns ]]; then dev=udp0 senv=(IBEX_UDP_ADDR=10.22.2.1) cenv=(IBEX_UDP_ADDR=10.22.2.2); fi
	if [[ -n ${IBEX_UDP_XDP-} ]]; then senv+=("IBEX_UDP_XDP=$IBEX_UDP_XDP") cenv+=("IBEX_UDP_XDP=$IBEX_UDP_XDP"); fi

	if [[ $ibex_rows == 1 ]]; then
		port=$((port + 1))
		bgexec "$sns" env "${senv[@]}" "$tmp/ibex" kv serve --listen "$ia:$port" --device $dev "${serve_args[@]}" >"$tmp/ibex.$port" 2>&1 &
		srv=$!
		pids+=("$srv")
		if waitport "${sns#-}" "$ia" "$port"; then
			kvrun "ibex.$k" "$cns" "$srv" "ibex://$ia:$port" "$size" "$pipe" "${cenv[@]}"
		else
			cat "$tmp/ibex.$port" >&2
		fi
		stop "$srv"
	fi

	port=$((port + 1))
	# shellcheck disable=SC2086 # REDIS_ARGS is a list of arguments
	bgexec "$sns" "$redis" --bind "$ra" --port $port --save '' --appendonly no --daemonize no --logfile '' \
		--protected-mode no --dir "$tmp" $redis_args >"$tmp/redis.$port" 2>&1 &
	srv=$!
	pids+=("$srv")
	if waitport "${sns#-}" "$ra" "$port"; then
		rbrun "rbset.$k" "$cns" "$srv" "$ra" "$port" "$size" "$pipe" set
		rbrun "rbget.$k" "$cns" "$srv" "$ra" "$port" "$size" "$pipe" get
		if ((${#kvbench[@]})); then kvrun "redis.$k" "$cns" "$srv" "redis://$ra:$port" "$size" "$pipe"; fi
	else
		cat "$tmp/redis.$port" >&2
	fi
	stop "$srv"

	if ((${#kvbench[@]})); then
		port=$((port + 1))
		# shellcheck disable=SC2086 # MEMCACHED_ARGS is a list of arguments
		bgexec "$sns" "$memcached" -l "$ma" -p $port -U 0 $mc_args >"$tmp/memcached.$port" 2>&1 &
		srv=$!
		pids+=("$srv")
		if waitport "${sns#-}" "$ma" "$port"; then
			kvrun "memcached.$k" "$cns" "$srv" "memcached://$ma:$port" "$size" "$pipe"
		else
			cat "$tmp/memcached.$port" >&2
		fi
		stop "$srv"
	fi
	last() { awk '{print $NF}' <<<"${V[$1]-nan}"; }
	echo "round $r, $w, $size B, pipeline $pipe: ops/s ibex $(last "ibex.$k.ops"), redis $(last "redis.$k.ops") (redis-benchmark GET $(last "rbget.$k.ops")), memcached $(last "memcached.$k.ops")" >&2
}

echo "# key-value: ibex kv vs redis and memcached, $conns conns, $keys keys, kv bench GET ratio $ratio_get for $secs s, $rounds rounds"
echo "# $(date -u +%FT%TZ), $(nproc) cores, kernel $(uname -r), $("$redis" --version | awk '{print $1, $2, $3}'), memcached $("$memcached" -V | awk '{print $2}'), ibex $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo '+changes'), load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
	for w in $where; do
		for s in $sizes; do
			for p in $pipes; do
				one "$w" "$s" "$p"
			done
		done
	done
done

echo
echo "## ops/s, latency (us) and server CPU s per million GETs, median of $rounds rounds; host: one host (ibex shm0, peers on loopback); ns: two namespaces, veth MTU $mtu (ibex udp0)"
echo "## kv bench: GET ratio $ratio_get, $keys keys${kvflags[*]:+, ${kvflags[*]}}; latency of a pipeline's op = its pipeline's; miss = misses / GETs"
echo "## redis-benchmark: -t set then -t get, -r $keys, -n $req1 (pipeline 1) or $reqp; latency per request"
fmt='%-5s %5s %4s %-30s %10s %9s %9s %9s %7s %9s\n'
printf "$fmt" where size pipe "server / load" ops/s p50 p99 p99.9 miss "CPU s/M"
for w in $where; do
	for s in $sizes; do
		for p in $pipes; do
			k=$w.$s.$p
			dev=shm0
			[[ $w == ns ]] && dev=udp0
			[[ $ibex_rows == 1 ]] && printf "$fmt" "$w" "$s" "$p" "ibex kv ($dev) / kv bench" "$(med "ibex.$k.ops")" \
				"$(med "ibex.$k.p50")" "$(med "ibex.$k.p99")" "$(med "ibex.$k.p999")" "$(med "ibex.$k.miss")" "$(med "ibex.$k.cpu")"
			if ((${#kvbench[@]})); then
				printf "$fmt" "$w" "$s" "$p" "redis / kv bench" "$(med "redis.$k.ops")" "$(med "redis.$k.p50")" \
					"$(med "redis.$k.p99")" "$(med "redis.$k.p999")" "$(med "redis.$k.miss")" "$(med "redis.$k.cpu")"
				printf "$fmt" "$w" "$s" "$p" "memcached / kv bench" "$(med "memcached.$k.ops")" "$(med "memcached.$k.p50")" \
					"$(med "memcached.$k.p99")" "$(med "memcached.$k.p999")" "$(med "memcached.$k.miss")" "$(med "memcached.$k.cpu")"
			fi
			printf "$fmt" "$w" "$s" "$p" "redis / redis-benchmark GET" "$(med "rbget.$k.ops")" "$(med "rbget.$k.p50")" \
				"$(med "rbget.$k.p99")" "" "" "$(med "rbget.$k.cpu")"
			printf "$fmt" "$w" "$s" "$p" "redis / redis-benchmark SET" "$(med "rbset.$k.ops")" "$(med "rbset.$k.p50")" \
				"$(med "rbset.$k.p99")" "" "" ""
		done
	done
done

echo
echo "## ratios: ibex / redis under the same kv bench load (ops/s: > 1 is ibex faster; p99 and CPU per M GETs: < 1 is ibex better);"
echo "## ibex kv bench ops/s / redis-benchmark GET ops/s; ibex / memcached ops/s"
fmt='%-5s %5s %4s %12s %12s %16s %14s %14s\n'
printf "$fmt" where size pipe "ops/s" "p99" "CPU per M GETs" "ops/s vs rb GET" "ops/s vs mc"
for w in $where; do
	for s in $sizes; do
		for p in $pipes; do
			k=$w.$s.$p
			printf "$fmt" "$w" "$s" "$p" "$(ratio "$(med "ibex.$k.ops")" "$(med "redis.$k.ops")")" \
				"$(ratio "$(med "ibex.$k.p99")" "$(med "redis.$k.p99")")" \
				"$(ratio "$(med "ibex.$k.cpu")" "$(med "redis.$k.cpu")")" \
				"$(ratio "$(med "ibex.$k.ops")" "$(med "rbget.$k.ops")")" \
				"$(ratio "$(med "ibex.$k.ops")" "$(med "memcached.$k.ops")")"
		done
	done
done
