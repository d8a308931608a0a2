// Package shared finds the project's shared reference folder (../shared
// next to the repository, with testdata/rxe-pcaps), for tests that read
// the captures from Linux Soft-RoCE.
package shared

import (
	"os"
	"path/filepath"
	"strings"
)

// Dir returns the shared folder: $IBEX_SHARED, else a "shared" folder with
// testdata/rxe-pcaps in a parent of the working directory, or of the
// repository a local clone came from (CI runs on a fresh clone). It
// returns "" when there is none.
func Dir() string {
	if d := os.Getenv("IBEX_SHARED"); d != "" {
		return d
	}
	wd, _ := os.Getwd()
	for _, start := range []string{wd, cloneOrigin(wd)} {
		for d := start; d != "" && filepath.Dir(d) != d; d = filepath.Dir(d) {
			if st, err := os.Stat(filepath.Join(d, "shared", "testdata", "rxe-pcaps")); err == nil && st.IsDir() {
				return filepath.Join(d, "shared")
			}
		}
	}
	return ""
}

// Captures returns the rxe capture folder, or "" with the reason.
func Captures() (string, string) {
	if d := Dir(); d != "" {
		return filepath.Join(d, "testdata", "rxe-pcaps"), ""
	}
	wd, _ := os.Getwd()
	return "", "shared/testdata/rxe-pcaps not found in any parent of " + wd + " or of the repository it was cloned from; set IBEX_SHARED to the shared folder"
}

// cloneOrigin returns the origin URL of the git repository holding dir
// when it is a local directory, else "".
func cloneOrigin(dir string) string {
	for d := dir; filepath.Dir(d) != d; d = filepath.Dir(d) {
		cfg, err := os.ReadFile(filepath.Join(d, ".git", "config"))
		if err != nil {
			continue
		}
		inOrigin := false
		for _, l := range strings.Split(string(cfg), "\n") {
			l = strings.TrimSpace(l)
			if strings.HasPrefix(l, "[") {
				inOrigin = l == `[remote "origin"]`
			} else if u, ok := strings.CutPrefix(l, "url = "); ok && inOrigin && filepath.IsAbs(u) {
				return u
			}
		}
		return ""
	}
	return ""
}
