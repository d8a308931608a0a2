package topo

import (
	"errors"
	"strings"
	"testing"
)

// build parses and builds a spec, failing the test on any error.
func build(t testing.TB, yml string) *Graph {
	t.Helper()
	s, err := Parse([]byte(yml))
	if err != nil {
		t.Fatalf("parse:\n%s\n%v", yml, err)
	}
	g, err := s.Build()
	if err != nil {
		t.Fatalf("build:\n%s\n%v", yml, err)
	}
	return g
}

// mustCheck fails the test if Check finds a problem.
func mustCheck(t testing.TB, g *Graph) {
	t.Helper()
	if err := g.Check(); err != nil {
		t.Fatalf("check: %v", err)
	}
}

// specErr parses and builds yml and returns the error, failing the test if
// there is none or it does not wrap ErrSpec.
func specErr(t *testing.T, yml string) error {
	t.Helper()
	s, err := Parse([]byte(yml))
	if err == nil {
		_, err = s.Build()
	}
	if err == nil {
		t.Fatalf("no error for\n%s", yml)
	}
	if !errors.Is(err, ErrSpec) {
		t.Errorf("error %q does not wrap ErrSpec", err)
	}
	return err
}

func wantContains(t *testing.T, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%q does not contain %q", got, w)
		}
	}
}
