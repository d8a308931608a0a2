#!/usr/bin/env bash
# The data-path cost of issue 20's observability (counters, capture tap,
# coll's flight recorder): the same benchmarks built at BASE (default
# fc3cbf5, before those changes) and at HEAD, run interleaved ROUNDS times
# (default 6), compared with benchstat. Run it on a quiet machine.
#   bash bench/metrics-overhead.sh [BASE] [ROUNDS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
base=${1:-fc3cbf5}
rounds=${2:-6}
root=$(pwd)
work=$(mktemp -d)
trap 'git worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add -q --detach "$work/base" "$base"
export PATH="$(go env GOPATH)/bin:$PATH"
command -v benchstat >/dev/null || go install golang.org/x/perf/cmd/benchstat@latest
for side in before after; do
	dir=$work/base
	[[ $side == after ]] && dir=$root
	for p in provider/loopback provider/udp coll; do
		(cd "$dir" && go test -c -o "$work/$(basename $p)-$side" ./$p)
	done
done
for _ in $(seq "$rounds"); do
	for side in before after; do
		(cd provider/loopback && "$work/loopback-$side" -test.run '^$' -test.bench 'Write/8B$|SendRecv8B' -test.benchtime 300000x) >>"$work/$side.txt"
		(cd provider/udp && "$work/udp-$side" -test.run '^$' -test.bench 'Write64KiB|WriteLatency8B' -test.benchtime 1s) >>"$work/$side.txt"
		(cd coll && "$work/coll-$side" -test.run '^$' -test.bench 'BenchmarkAllReduce$/^(8|131072)$' -test.benchtime 1s) >>"$work/$side.txt"
	done
done
benchstat "$work/before.txt" "$work/after.txt"
