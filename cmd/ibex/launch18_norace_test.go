//go:build !race

package main

// raceBuild: see launch18_race_test.go.
const raceBuild = false
