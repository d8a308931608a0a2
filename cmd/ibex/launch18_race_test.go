//go:build race

package main

// raceBuild: this test binary has the race detector, so the ibex binary
// the launcher tests build has it too (its packages are then the test
// build's, already compiled).
const raceBuild = true
