package daemon_test

import (
	"fmt"
	"os"
)

// appChild runs an application role in a child process.
func appChild(role string) int {
	fmt.Fprintln(os.Stderr, "unknown app role", role)
	return 2
}
