package topo

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Rate is a link's data rate in bits per second (after line coding: NDR is
// 400 Gb/s of data on 425 Gb/s of signalling).
type Rate int64

// Named InfiniBand 4x rates (fabric-sim.md §3.1).
const (
	EDR Rate = 100e9
	HDR Rate = 200e9
	NDR Rate = 400e9
	XDR Rate = 800e9
)

// rateWant is what ParseRate accepts, for error messages.
const rateWant = "want EDR, HDR, NDR, XDR or a number of Gb/s"

// ParseRate reads a rate as a spec writes it: EDR, HDR, NDR or XDR (any
// case), or a positive number of Gb/s ("400", "12.5").
func ParseRate(s string) (Rate, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "EDR":
		return EDR, nil
	case "HDR":
		return HDR, nil
	case "NDR":
		return NDR, nil
	case "XDR":
		return XDR, nil
	}
	g, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	// 1e7 Gb/s (10 Pb/s per link) is far above any link and keeps the
	// product in int64.
	if err != nil || !(g > 0) || g > 1e7 {
		return 0, fmt.Errorf("%q: %s", s, rateWant)
	}
	r := Rate(math.Round(g * 1e9))
	if r <= 0 {
		return 0, fmt.Errorf("%q: %s", s, rateWant)
	}
	return r, nil
}

// String prints the rate with an SI prefix, "400 Gb/s", "102.4 Tb/s".
func (r Rate) String() string {
	v := float64(r)
	for _, p := range []string{"b/s", "kb/s", "Mb/s", "Gb/s", "Tb/s", "Pb/s"} {
		if math.Abs(v) < 1000 || p == "Pb/s" {
			return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64) + " " + p
		}
		v /= 1000
	}
	panic("unreachable")
}
