//go:build race

package rc

// Under the race detector the simulation runs a quarter of the seeds;
// .ci/run runs the full 2,000 without it.
const raceEnabled = true
