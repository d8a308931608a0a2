//go:build !race

package attack_test

const raceBuild = false
