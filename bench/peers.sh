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
# time ratio ompi/ibex). Needs Go (it builds ibex itself), Open MPI
# (apt-get install openmpi-bin libopenmpi-dev) and, for the udp table,
# iproute2 and root (the table is skipped, saying so, without root); it
# says what is missing and exits 1 before running anything. The Open MPI
# program is built from the source below. By default it stops at 1 MiB
# (about 20 s for both tables); the full 128 MiB sweep takes a few minutes.
# VETH_MTU sets the veth's MTU (default the kernel's, 1500).
# Usage: bench/peers.sh [max_bytes=1048576] [shm|udp|both]
set -euo pipefail
cd "$(dirname "$0")/.."
max=${1:-1048576}
which=${2:-both}
need() { # command package
	command -v "$1" >/dev/null || { echo "bench/peers.sh: $1 not found: apt-get install $2" >&2; exit 1; }
}
command -v go >/dev/null || { echo "bench/peers.sh: go not found: install Go 1.26 (https://go.dev/dl/) to build ibex" >&2; exit 1; }
need mpicc "openmpi-bin libopenmpi-dev"
need mpirun openmpi-bin
need join coreutils
need awk gawk
if [[ $which == udp || $which == both ]]; then need ip iproute2; fi
tmp=$(mktemp -d)
ns=ibexpeers$$
cleanup() {
	ip netns del ${ns}a 2>/dev/null || true
	ip netns del ${ns}b 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/ibex" ./cmd/ibex
# Open MPI's side: MPI_Allreduce of float32 sums from 8 B to max_bytes in x4
# steps, printing "bytes time_us algbw busbw" (nccl-tests' busbw).
cat >"$tmp/mpi_allreduce.c" <<'EOC'
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int c, char **v) {
	MPI_Init(&c, &v);
	int r, n;
	MPI_Comm_rank(MPI_COMM_WORLD, &r);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	size_t maxb = (size_t)atol(v[1]);
	float *s = malloc(maxb), *d = malloc(maxb);
	for (size_t i = 0; i < maxb / 4; i++) s[i] = 1;
	if (!r) printf("%12s %10s %10s %10s\n", "bytes", "time_us", "algbw", "busbw");
	for (size_t b = 8; b <= maxb; b *= 4) {
		int it = b < 1 << 20 ? 1000 : (b < (64 << 20) ? 20 : 5);
		MPI_Allreduce(s, d, b / 4, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		MPI_Barrier(MPI_COMM_WORLD);
		double t = MPI_Wtime();
		for (int i = 0; i < it; i++) MPI_Allreduce(s, d, b / 4, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		t = (MPI_Wtime() - t) / it;
		if (!r) printf("%12zu %10.2f %10.3f %10.3f\n", b, t * 1e6, b / t / 1e9, b / t / 1e9 * 2.0 * (n - 1) / n);
	}
	MPI_Finalize();
}
EOC
mpicc -O3 "$tmp/mpi_allreduce.c" -o "$tmp/mpi_allreduce"
ompi() { # shm|tcp
	local mca=()
	[[ $1 == tcp ]] && mca=(--mca pml ob1 --mca btl tcp,self)
	mpirun --allow-run-as-root --oversubscribe "${mca[@]}" -np 2 "$tmp/mpi_allreduce" "$max" 2>&1 | grep -v -i warn
}
# Iterations as Open MPI's program (above):
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
	ompi shm | ompicols >"$tmp/ompi-shm"
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
	ompi tcp | ompicols >"$tmp/ompi-tcp"
	table "2 ranks, two network namespaces: ibex udp0 (RoCEv2 over a veth) vs Open MPI TCP (loopback)" "$tmp/ibex-udp" "$tmp/ompi-tcp"
fi
