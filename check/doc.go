// Package check is `ibex check`, a fabric gate: it measures every pair of
// ranks (bandwidth both ways, ping-pong latency) in a round-robin schedule,
// then an all-reduce, names the links and ranks that are slow against the
// run's own median, compares every figure with a stored baseline, and says
// whether the fabric passes.
//
// The pieces are separate so that each can be tested alone:
//
//   - Rounds is the pair schedule: N-1 rounds of disjoint pairs (N rounds
//     with one rank resting in each when N is odd), so that a round's pairs
//     run at once without sharing a rank.
//   - Measure runs the schedule and the all-reduce on a coll.Comm (every
//     rank calls it; rank 0 gets the Figures). Simulate runs the same
//     schedule on sim/flow over a topology, with degraded and flapping
//     cables.
//   - Figures is what a run measured and what a baseline file holds (JSON,
//     versioned: Save, Load); Shape is the part two runs must share to be
//     compared.
//   - Evaluate is pure: slow links and ranks against the per-transport
//     median, drift against a baseline, the verdict. Report.WriteText
//     prints it.
//
// The package starts no goroutines.
package check
