package fabric

import (
	"errors"
	"strings"
	"testing"
)

// TestCheckParamsDefaults: a zero Params takes Defaults' values, with the
// link layer's own header bytes and congestion control.
func TestCheckParamsDefaults(t *testing.T) {
	ib, err := CheckParams(Params{})
	if err != nil {
		t.Fatal(err)
	}
	if ib.VLs != Defaults.VLs || ib.Buffer != Defaults.Buffer || ib.HeaderBytes != Defaults.HeaderBytes || ib.CC != CCNone || ib.DCQCN != Defaults.DCQCN {
		t.Errorf("InfiniBand: %+v", ib)
	}
	roce, err := CheckParams(Params{LinkLayer: LinkRoCE})
	if err != nil {
		t.Fatal(err)
	}
	if roce.HeaderBytes != RoCEHeaderBytes || roce.CC != CCDCQCN || roce.PFCXoff != Defaults.PFCXoff {
		t.Errorf("RoCE: %+v", roce)
	}
}

// TestCheckParamsErrors: a bad field is named, the error wraps ErrConfig,
// and it carries no engine's name (the engines add theirs).
func TestCheckParamsErrors(t *testing.T) {
	for _, c := range []struct {
		p    Params
		want string
	}{
		{Params{VLs: 9}, "VLs 9: want 1 to 8"},
		{Params{Routing: 3}, "routing(3)"},
		{Params{LinkLayer: 2}, "linklayer(2)"},
		{Params{CC: CCDCQCN}, "dcqcn needs link layer roce"},
		{Params{LinkLayer: LinkRoCE, Routing: RouteAdaptive}, "adaptive routing with link layer roce"},
		{Params{DCQCN: DCQCN{G: 2}}, "DCQCN g 2"},
	} {
		_, err := CheckParams(c.p)
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), ErrConfig.Error()+": ") {
			t.Errorf("%+v: %v; want an error wrapping ErrConfig saying %q", c.p, err, c.want)
		}
	}
}

// TestChoicesRoundTrip: every choice parses back from its String.
func TestChoicesRoundTrip(t *testing.T) {
	for r := RouteDModK; r <= RouteAdaptive; r++ {
		if q, err := ParseRouting(r.String()); err != nil || q != r {
			t.Errorf("ParseRouting(%q) = %v, %v", r, q, err)
		}
	}
	for l := LinkIB; l <= LinkRoCE; l++ {
		if q, err := ParseLinkLayer(l.String()); err != nil || q != l {
			t.Errorf("ParseLinkLayer(%q) = %v, %v", l, q, err)
		}
	}
	for c := CCAuto; c <= CCDCQCN; c++ {
		if q, err := ParseCongestionControl(c.String()); err != nil || q != c {
			t.Errorf("ParseCongestionControl(%q) = %v, %v", c, q, err)
		}
	}
	for _, bad := range []error{
		func() error { _, err := ParseRouting("spray"); return err }(),
		func() error { _, err := ParseLinkLayer("ethernet"); return err }(),
		func() error { _, err := ParseCongestionControl("hpcc"); return err }(),
	} {
		if bad == nil {
			t.Error("an unknown name parsed")
		}
	}
}
