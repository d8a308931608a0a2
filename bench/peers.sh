#!/usr/bin/env bash
# ibex coll all_reduce side by side with Open MPI's MPI_Allreduce (float32
# sum, 2 ranks, 8 B to 128 MiB in x4 steps) in one run, and one table per
# path with both figures and the ratios:
#   shm: ibex on shm0 (2 local rank processes) vs Open MPI's shared memory
#        (vader);
#   udp: ibex on udp0 between two network namespaces joined by a veth pair
#        (ranks started with torchrun's variables) vs Open MPI's TCP path
#        (--mca btl tcp,self, on loopback: mpirun cannot span namespaces
#        without ssh).
# busbw is nccl-tests' (algbw * 2(n-1)/n) on both sides; ibex's is the
# out-of-place column; ibex times 1000 iterations below 512 KiB and 20
# above, about as Open MPI's program does. ratio > 1: ibex is faster (busbw ratio ibex/ompi,
# time ratio ompi/ibex). Needs root for the namespaces (the udp table is
# skipped, saying so, without) and Open MPI (installed by
# ../shared/bench/run-openmpi.sh when missing).
# VETH_MTU sets the veth's MTU (default the kernel's, 1500).
# Usage: bench/peers.sh [max_bytes=134217728] [shm|udp|both]
set -euo pipefail
cd "$(dirname "$0")/.."
max=${1:-134217728}
which=${2:-both}
shared=$(cd ../shared/bench 2>/dev/null && pwd) || { echo "../shared/bench not found" >&2; exit 1; }
tmp=$(mktemp -d)
ns=ibexpeers$$
cleanup() {
	ip netns del ${ns}a 2>/dev/null || true
	ip netns del ${ns}b 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/ibex" ./cmd/ibex
# Iterations as Open MPI's program (../shared/bench/mpi_allreduce.c):
# 1000 below 1 MiB, fewer above; so two sweeps.
small=(coll all_reduce -b 8 -e $((max < 131072 ? max : 131072)) -f 4 -n 1000 -w 100 -c 1)
large=(coll all_reduce -b 524288 -e "$max" -f 4 -n 20 -w 5 -c 1)

# ibex rows -> "bytes time_us busbw"
ibexcols() { awk '!/^#/ && NF == 13 {print $1, $6, $8}'; }
# Open MPI rows -> "bytes time_us busbw"
ompicols() { awk '$1 ~ /^[0-9]+$/ {print $1, $2, $4}'; }

table() { # title ibexfile ompifile
	echo "## $1"
	printf "%12s %12s %12s %10s %10s %8s %8s\n" bytes ibex_us ompi_us ibex_busbw ompi_busbw bw_ratio t_ratio
	join <(sort -k1,1 "$2") <(sort -k1,1 "$3") | sort -n -k1,1 |
		awk '{r = ($5 > 0) ? $3 / $5 : 0; t = ($2 > 0) ? $4 / $2 : 0;
		      printf "%12d %12.2f %12.2f %10.3f %10.3f %8.2f %8.2f\n", $1, $2, $4, $3, $5, r, t}'
	echo
}

if [[ $which == shm || $which == both ]]; then
	{ "$tmp/ibex" "${small[@]}" --np 2; ((max < 524288)) || "$tmp/ibex" "${large[@]}" --np 2; } | ibexcols >"$tmp/ibex-shm"
	bash "$shared/run-openmpi.sh" 2 "$max" shm | ompicols >"$tmp/ompi-shm"
	table "2 ranks, shared memory: ibex shm0 vs Open MPI vader" "$tmp/ibex-shm" "$tmp/ompi-shm"
fi

if [[ $which == udp || $which == both ]]; then
	if ! ip netns add ${ns}a 2>/dev/null; then
		echo "## udp: skipped: cannot create network namespaces here (ip netns add failed; needs root)"
		exit 0
	fi
	ip netns add ${ns}b
	ip link add ${ns}x type veth peer name ${ns}y
	ip link set ${ns}x netns ${ns}a
	ip link set ${ns}y netns ${ns}b
	if [[ -n ${VETH_MTU-} ]]; then
		ip -n ${ns}a link set ${ns}x mtu "$VETH_MTU"
		ip -n ${ns}b link set ${ns}y mtu "$VETH_MTU"
	fi
	ip -n ${ns}a addr add 10.81.0.1/24 dev ${ns}x
	ip -n ${ns}b addr add 10.81.0.2/24 dev ${ns}y
	for n in a b; do
		ip -n ${ns}$n link set lo up
		ip -n ${ns}$n link set $([[ $n == a ]] && echo ${ns}x || echo ${ns}y) up
	done
	sweep() { # port args...: one sweep, rank 1 in namespace b, rank 0 (printing) in a
		local port=$1
		shift
		ip netns exec ${ns}b env RANK=1 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=10.81.0.1 MASTER_PORT=$port \
			IBEX_UDP_ADDR=10.81.0.2 "$tmp/ibex" "$@" >/dev/null &
		local peer=$!
		ip netns exec ${ns}a env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=10.81.0.1 MASTER_PORT=$port \
			IBEX_UDP_ADDR=10.81.0.1 "$tmp/ibex" "$@"
		wait $peer
	}
	{ sweep 29400 "${small[@]}"; ((max < 524288)) || sweep 29410 "${large[@]}"; } | ibexcols >"$tmp/ibex-udp"
	bash "$shared/run-openmpi.sh" 2 "$max" tcp | ompicols >"$tmp/ompi-tcp"
	table "2 ranks, two network namespaces: ibex udp0 (RoCEv2 over a veth) vs Open MPI TCP (loopback)" "$tmp/ibex-udp" "$tmp/ompi-tcp"
fi
