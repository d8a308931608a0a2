#!/usr/bin/env bash
# Issue 22's dataset server against the kernel's file server, side by side:
# reading a directory of shard files (FILES files of FILE_MB MiB of random
# bytes, made in a tmp dir, page cache warm) in samples of SIZE bytes, with
# CONNS connections, for SECS seconds,
#   ibex:  `ibex store serve DIR --listen ADDR --device D` read by
#          `ibex store bench --server ADDR --device D --conns N --size S
#          --duration T --json` (RDMA READs of the server's pool buffers);
#   nginx: nginx serving DIR (its own config in the tmp dir: sendfile on,
#          tcp_nopush, access_log off, NGINX_WORKERS workers, keep-alive)
#          read by wrk with N connections and a Lua script that asks for the
#          shards round-robin, each request a Range of SIZE bytes at a slot
#          that walks the file (SIZE=0: whole files);
#   local: cat of every shard to /dev/null in this process's namespace (the
#          page cache's speed: the ceiling for both).
# Each on one host (ibex: shm0; nginx and wrk on loopback 127.0.0.150-159)
# and between two network namespaces stb-PID-a (server, 10.22.1.1) and
# stb-PID-b (client, 10.22.1.2) joined by a veth pair (ibex: udp0 with
# IBEX_UDP_ADDR set to each namespace's address).
#
# Figures: GB/s of dataset bytes delivered (GB = 10^9 B; HTTP headers not
# counted), reads/s, and CPU seconds per GB: the server's (utime+stime of
# every server process from /proc/PID/stat, before and after the client's
# run: nginx's master and workers, ibex store serve) and the client's (the
# wrk or ibex store bench process, from bash's `times`). Medians of ROUNDS
# rounds, in which ibex and nginx alternate so that the machine's load hits
# both alike. Then the ratios ibex / nginx of GB/s and of server CPU s/GB.
#
# Knobs (environment):
#   FILES, FILE_MB   the dataset: 64 files of 16 MiB
#   SIZE             bytes per read (a Range request, an ibex read), default
#                    1048576; 0 reads whole files
#   CONNS            client connections, a list: "1 8"
#   SECS             seconds per run (5); ROUNDS (3)
#   WHERE            "host ns" (one host; two namespaces)
#   NGINX_WORKERS    worker_processes (auto: one per core)
#   WRK_THREADS      wrk -t (1; at most the connections)
#   VETH_MTU         the veth's MTU, default 4200: the largest RoCEv2
#                    datagram of IB MTU 4096 is 4,188 B (see ns-vs-peers.sh)
#   IBEX             1 (default): the ibex rows, failing at once if this
#                    build's ibex has no `store` command; 0: peers only
#   IBEX_UDP_XDP     passed to the ibex processes if set
#   STORE_SERVE_ARGS, STORE_BENCH_ARGS   more arguments of ibex store serve
#                    (e.g. "--pool 1G") and ibex store bench ("--depth 8")
# Needs root (namespaces), nginx, wrk, jq (apt-get install nginx wrk jq).
# Never touches the packaged nginx service or /etc/nginx.
# Usage: bench/store-vs-nginx.sh
# shellcheck disable=SC2059 # the tables' formats are in $fmt
set -euo pipefail
cd "$(dirname "$0")/.."
files=${FILES:-64}
file_mb=${FILE_MB:-16}
size=${SIZE:-1048576}
conns=${CONNS:-1 8}
secs=${SECS:-5}
rounds=${ROUNDS:-3}
where=${WHERE:-host ns}
nginx_workers=${NGINX_WORKERS:-auto}
wrk_threads=${WRK_THREADS:-1}
mtu=${VETH_MTU:-4200}
ibex_rows=${IBEX:-1}
read -r -a serve_args <<<"${STORE_SERVE_ARGS-}"
read -r -a bench_args <<<"${STORE_BENCH_ARGS-}"
fsize=$((file_mb * 1048576))
((size <= fsize)) || { echo "SIZE $size is larger than a file ($fsize B)" >&2; exit 1; }
rsize=$size
((rsize > 0)) || rsize=$fsize # bytes per read
for c in nginx wrk jq; do
	command -v $c >/dev/null || { echo "$c not found: apt-get install nginx wrk jq" >&2; exit 1; }
done
nginx=$(command -v nginx)

tmp=$(mktemp -d /tmp/stb.XXXXXX)
chmod 755 "$tmp" # nginx's workers run as nobody
ns=stb-$$
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	ip netns del $ns-a 2>/dev/null || true
	ip netns del $ns-b 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

if [[ $ibex_rows == 1 ]]; then
	go build -o "$tmp/ibex" ./cmd/ibex
	# cobra answers --help of an unknown command with the root's help.
	hs=$("$tmp/ibex" store serve --help 2>&1 || true) hb=$("$tmp/ibex" store bench --help 2>&1 || true)
	if [[ $hs != *"ibex store serve"* || $hb != *"ibex store bench"* ]]; then
		echo "ibex store serve / ibex store bench: not in this build of cmd/ibex ($(git rev-parse --short HEAD)); run with IBEX=0 for the nginx and local rows only" >&2
		exit 1
	fi
fi

if [[ " $where " == *" ns "* ]]; then
	if ! ip netns add $ns-a 2>/dev/null; then
		echo "cannot create network namespaces here (ip netns add failed; needs root)" >&2
		exit 1
	fi
	ip netns add $ns-b
	ip link add stb$$a type veth peer name stb$$b
	ip link set stb$$a netns $ns-a
	ip link set stb$$b netns $ns-b
	ip -n $ns-a addr add 10.22.1.1/24 dev stb$$a
	ip -n $ns-b addr add 10.22.1.2/24 dev stb$$b
	ip -n $ns-a link set stb$$a mtu "$mtu" up
	ip -n $ns-b link set stb$$b mtu "$mtu" up
	ip -n $ns-a link set lo up
	ip -n $ns-b link set lo up
fi

# The dataset.
data=$tmp/data
mkdir -m 755 "$data"
echo "making the dataset: $files files x $file_mb MiB of random bytes in $data" >&2
for i in $(seq 0 $((files - 1))); do
	head -c "$fsize" /dev/urandom >"$(printf '%s/shard-%05d.bin' "$data" "$i")"
done
chmod 644 "$data"/*
cat "$data"/* >/dev/null # page cache warm
total=$((files * fsize))

# The wrk script: request() walks the shards round-robin, each thread from
# its own start; with a sample size, a Range at a slot that walks each file.
cat >"$tmp/shards.lua" <<'EOF'
local threads = 0
function setup(thread)
	thread:set("tid", threads)
	threads = threads + 1
end
function init(args)
	nfiles, fsize, size = tonumber(args[1]), tonumber(args[2]), tonumber(args[3])
	slots = 0
	if size > 0 and size < fsize then slots = math.floor(fsize / size) end
	n = (tid or 0) * 7919
end
function request()
	local i = n % nfiles
	local path = string.format("/shard-%05d.bin", i)
	local req
	if slots > 0 then
		local off = ((math.floor(n / nfiles) * 7 + i) % slots) * size
		req = wrk.format("GET", path, { Range = "bytes=" .. off .. "-" .. (off + size - 1) })
	else
		req = wrk.format("GET", path)
	end
	n = n + 1
	return req
end
function done(summary, latency, requests)
	local e = summary.errors
	io.write(string.format("STB requests=%d usec=%d errors=%d status=%d p50=%d p99=%d\n",
		summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
		latency:percentile(50), latency:percentile(99)))
end
EOF

hz=$(getconf CLK_TCK)
# ticks PID...: utime+stime of the processes, all threads (fields 14 and 15
# of /proc/PID/stat, counted after the command name's closing paren).
ticks() {
	local t=0 p v
	for p in "$@"; do
		v=$(awk '{sub(/^.*\) /, ""); print $12 + $13}' "/proc/$p/stat" 2>/dev/null) || v=0
		t=$((t + ${v:-0}))
	done
	echo $t
}
# childcpu: user+sys seconds of this shell's waited-for children so far,
# into $cpu. Not in a $(...): a subshell's children are its own.
childcpu() {
	times >"$tmp/times"
	cpu=$(awk 'NR == 2 { s = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); s += a[1] * 60 + a[2] } printf "%.3f\n", s }' "$tmp/times")
}
# waitport NS ADDR PORT: until something listens there (10 s).
waitport() {
	local i
	for i in $(seq 200); do
		if ${1:+ip netns exec $1} bash -c "exec 3<>/dev/tcp/$2/$3" 2>/dev/null; then return 0; fi
		sleep 0.05
	done
	echo "nothing listens on $2:$3${1:+ in $1} after 10 s" >&2
	return 1
}
# field NAME LINE: the value of NAME=value in LINE.
field() { tr ' ' '\n' <<<"$2" | awk -F= -v k="$1" '$1 == k { print $2; exit }'; }
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
num() { [[ -n ${1-} ]] && echo "$1" || echo nan; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "nan" || b == "nan" || b + 0 == 0) print "nan"; else printf "%.2f", a / b }'; }
declare -A V # every round's figures, by name
add() { V[$1]+="$2 "; }
med() { tr ' ' '\n' <<<"${V[$1]-}" | grep -v '^$' | grep -v nan | sort -g |
	awk '{v[NR] = $1} END {if (NR == 0) { print "nan"; exit } m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf (m >= 1000 ? "%.0f\n" : "%.4g\n"), m}'; }
# record KEY BYTES SECONDS READS SERVER_TICKS CLIENT_CPU_S
record() {
	local k=$1 b=$2 s=$3 n=$4 st=$5 cc=$6
	add "$k.gbs" "$(awk -v b="$b" -v s="$s" 'BEGIN { if (s > 0 && b > 0) printf "%.4f", b / s / 1e9; else print "nan" }')"
	add "$k.rps" "$(awk -v n="$n" -v s="$s" 'BEGIN { if (s > 0 && n > 0) printf "%.0f", n / s; else print "nan" }')"
	add "$k.scpu" "$(awk -v t="$st" -v hz="$hz" -v b="$b" 'BEGIN { if (b > 0) printf "%.4f", t / hz / (b / 1e9); else print "nan" }')"
	add "$k.ccpu" "$(awk -v c="$cc" -v b="$b" 'BEGIN { if (b > 0) printf "%.4f", c / (b / 1e9); else print "nan" }')"
}

port=18600
# addresses WHERE: "server-netns client-netns server-addr"
addresses() {
	case $1 in
	host) echo "- - 127.0.0.150" ;;
	ns) echo "$ns-a $ns-b 10.22.1.1" ;;
	esac
}
nsexec() { if [[ $1 == - ]]; then shift; "$@"; else local n=$1; shift; ip netns exec "$n" "$@"; fi; }
# bgexec NETNS CMD...: for `bgexec ... &`: the background subshell becomes
# CMD (ip netns exec execs too), so $! is the server's own pid.
bgexec() { if [[ $1 == - ]]; then shift; exec "$@"; else local n=$1; shift; exec ip netns exec "$n" "$@"; fi; }

# run_nginx WHERE CONNS: one wrk run against a fresh nginx.
run_nginx() {
	local w=$1 c=$2 sns cns addr
	read -r sns cns addr <<<"$(addresses "$w")"
	port=$((port + 1))
	local d=$tmp/nginx-$port
	mkdir -p "$d"
	cat >"$d/nginx.conf" <<EOF
worker_processes $nginx_workers;
daemon off;
pid $d/nginx.pid;
error_log $d/error.log;
events { worker_connections 1024; }
http {
	access_log off;
	sendfile on;
	tcp_nopush on;
	tcp_nodelay on;
	keepalive_requests 100000000;
	keepalive_timeout 60s;
	client_body_temp_path $d/body;
	proxy_temp_path $d/proxy;
	fastcgi_temp_path $d/fastcgi;
	uwsgi_temp_path $d/uwsgi;
	scgi_temp_path $d/scgi;
	default_type application/octet-stream;
	server {
		listen $addr:$port;
		root $data;
	}
}
EOF
	bgexec "$sns" "$nginx" -p "$d/" -e "$d/error.log" -c "$d/nginx.conf" >"$d/out" 2>&1 &
	local srv=$!
	pids+=("$srv")
	waitport "${sns#-}" "$addr" "$port" || { cat "$d/out" "$d/error.log" >&2; stop "$srv"; return 1; }
	local i procs
	for i in $(seq 100); do # the master forks its workers after it listens
		pgrep -P "$srv" >/dev/null && break
		sleep 0.02
	done
	sleep 0.1
	# shellcheck disable=SC2207
	procs=("$srv" $(pgrep -P "$srv"))
	local t0 c0 t1 c1
	t0=$(ticks "${procs[@]}")
	childcpu
	c0=$cpu
	nsexec "$cns" wrk -t "$((wrk_threads < c ? wrk_threads : c))" -c "$c" -d "${secs}s" --timeout 10s \
		-s "$tmp/shards.lua" "http://$addr:$port/" -- "$files" "$fsize" "$size" >"$d/wrk" 2>&1 || true
	t1=$(ticks "${procs[@]}")
	childcpu
	c1=$cpu
	stop "$srv"
	local line n us e st
	line=$(grep '^STB ' "$d/wrk" || true)
	if [[ -z $line ]]; then
		echo "wrk ($w, $c conns) printed no summary:" >&2
		cat "$d/wrk" >&2
		record "nginx.$w.$c" 0 0 0 0 0
		return
	fi
	n=$(field requests "$line") us=$(field usec "$line") e=$(field errors "$line") st=$(field status "$line")
	((e + st == 0)) || echo "wrk ($w, $c conns): $e socket errors, $st non-2xx responses" >&2
	add "nginx.$w.$c.p50" "$(field p50 "$line")"
	add "nginx.$w.$c.p99" "$(field p99 "$line")"
	record "nginx.$w.$c" "$((n * rsize))" "$(awk -v u="$us" 'BEGIN { print u / 1e6 }')" "$n" "$((t1 - t0))" \
		"$(awk -v a="$c0" -v b="$c1" 'BEGIN { print b - a }')"
}

# run_ibex WHERE CONNS: one ibex store bench run against a fresh ibex store
# serve.
run_ibex() {
	local w=$1 c=$2 sns cns addr dev=shm0 cenv=() senv=()
	read -r sns cns addr <<<"$(addresses "$w")"
	[[ $w == host ]] && addr=127.0.0.151
	if [[ $w == ns ]]; then
		dev=udp0 senv=(IBEX_UDP_ADDR=10.22.1.1) cenv=(IBEX_UDP_ADDR=10.22.1.2)
	fi
	if [[ -n ${IBEX_UDP_XDP-} ]]; then senv+=("IBEX_UDP_XDP=$IBEX_UDP_XDP") cenv+=("IBEX_UDP_XDP=$IBEX_UDP_XDP"); fi
	port=$((port + 1))
	local d=$tmp/ibex-$port
	mkdir -p "$d"
	bgexec "$sns" env "${senv[@]}" "$tmp/ibex" store serve "$data" --listen "$addr:$port" --device $dev "${serve_args[@]}" >"$d/srv" 2>&1 &
	local srv=$!
	pids+=("$srv")
	waitport "${sns#-}" "$addr" "$port" || { cat "$d/srv" >&2; stop "$srv"; return 1; }
	local t0 c0 t1 c1
	t0=$(ticks "$srv")
	childcpu
	c0=$cpu
	nsexec "$cns" env "${cenv[@]}" "$tmp/ibex" store bench --server "$addr:$port" --device $dev --conns "$c" \
		--size "$rsize" --duration "${secs}s" --json "${bench_args[@]}" >"$d/cli" 2>"$d/cli.err" || true
	t1=$(ticks "$srv")
	childcpu
	c1=$cpu
	stop "$srv"
	local b s n
	if ! read -r b s n < <(jq -r '[.bytes, .seconds, (.reads_per_sec * .seconds)] | map(tostring) | join(" ")' "$d/cli" 2>/dev/null); then
		echo "ibex store bench ($w, $c conns, $dev) gave no JSON with bytes, seconds, reads_per_sec:" >&2
		cat "$d/cli" "$d/cli.err" >&2
		echo "server:" >&2
		cat "$d/srv" >&2
		record "ibex.$w.$c" 0 0 0 0 0
		return
	fi
	if [[ $b == 0 ]]; then
		echo "ibex store bench ($w, $c conns, $dev) read nothing in $s s:" >&2
		tail -n 3 "$d/srv" "$d/cli.err" >&2
	fi
	record "ibex.$w.$c" "$b" "$s" "$n" "$((t1 - t0))" "$(awk -v a="$c0" -v b="$c1" 'BEGIN { print b - a }')"
}

# run_local: cat of the whole dataset, page cache warm.
run_local() {
	local t0 t1 c0 c1
	childcpu
	c0=$cpu t0=$(date +%s.%N)
	cat "$data"/* >/dev/null
	t1=$(date +%s.%N)
	childcpu
	c1=$cpu
	record local "$total" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$files" 0 \
		"$(awk -v a="$c0" -v b="$c1" 'BEGIN { print b - a }')"
}

echo "# dataset reads: ibex store vs nginx+wrk, $files x $file_mb MiB, reads of $rsize B, $secs s runs, $rounds rounds"
echo "# $(date -u +%FT%TZ), $(nproc) cores, kernel $(uname -r), nginx $("$nginx" -v 2>&1 | sed 's/.*\///'), ibex $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo '+changes'), load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
	run_local
	for w in $where; do
		for c in $conns; do
			if [[ $ibex_rows == 1 ]]; then run_ibex "$w" "$c"; fi
			run_nginx "$w" "$c"
			echo "round $r, $w, $c conns: nginx $(awk '{print $NF}' <<<"${V[nginx.$w.$c.gbs]}") GB/s${V[ibex.$w.$c.gbs]+, ibex $(awk '{print $NF}' <<<"${V[ibex.$w.$c.gbs]}") GB/s}" >&2
		done
	done
done

echo
echo "## GB/s of dataset bytes (10^9 B/s, headers not counted), median of $rounds rounds; CPU: seconds per GB; nginx latency: wrk's per request"
echo "## host: one host (ibex shm0; nginx on 127.0.0.150); ns: two namespaces over a veth of MTU $mtu (ibex udp0)"
fmt='%-6s %6s %-22s %9s %10s %14s %14s %9s %9s\n'
printf "$fmt" where conns server GB/s reads/s "server CPU/GB" "client CPU/GB" "p50 us" "p99 us"
printf "$fmt" - - "local cat" "$(med local.gbs)" "" "" "$(med local.ccpu)" "" ""
for w in $where; do
	for c in $conns; do
		[[ $ibex_rows == 1 ]] && printf "$fmt" "$w" "$c" "ibex store ($([[ $w == host ]] && echo shm0 || echo udp0))" \
			"$(med "ibex.$w.$c.gbs")" "$(med "ibex.$w.$c.rps")" "$(med "ibex.$w.$c.scpu")" "$(med "ibex.$w.$c.ccpu")" "" ""
		printf "$fmt" "$w" "$c" "nginx ($nginx_workers) + wrk" \
			"$(med "nginx.$w.$c.gbs")" "$(med "nginx.$w.$c.rps")" "$(med "nginx.$w.$c.scpu")" "$(med "nginx.$w.$c.ccpu")" \
			"$(med "nginx.$w.$c.p50")" "$(med "nginx.$w.$c.p99")"
	done
done
echo
echo "## ratios ibex / nginx (throughput: > 1 is ibex faster; server CPU per GB: < 1 is ibex cheaper); nginx / local cat"
fmt='%-6s %6s %14s %18s %16s\n'
printf "$fmt" where conns "ibex/nginx GB/s" "ibex/nginx srv CPU" "nginx/local GB/s"
for w in $where; do
	for c in $conns; do
		printf "$fmt" "$w" "$c" "$(ratio "$(med "ibex.$w.$c.gbs")" "$(med "nginx.$w.$c.gbs")")" \
			"$(ratio "$(med "ibex.$w.$c.scpu")" "$(med "nginx.$w.$c.scpu")")" \
			"$(ratio "$(med "nginx.$w.$c.gbs")" "$(med local.gbs)")"
	done
done
