package cost

import (
	"fmt"
	"io"
	"math"
	"strconv"
)

// WriteText prints the report as fixed-width tables: links and
// transceivers per tier, switches per tier, the bill of materials, and
// the power and cost totals with the per-GPU figures.
func (r *Report) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	if r.Name != "" {
		ew.printf("cost of %s: %s, %d GPUs\n\n", r.Name, r.LinkLayer, r.GPUs)
	} else {
		ew.printf("cost: %s, %d GPUs\n\n", r.LinkLayer, r.GPUs)
	}

	const links = "%-12s%8v%8v%9v%13v%10v\n"
	ew.printf(links, "links", "count", "copper", "optical", "xcvr switch", "xcvr NIC")
	var tot TierLinks
	for _, t := range r.Links {
		ew.printf(links, t.Tier, t.Links, t.Copper, t.Optical, t.SwitchTransceivers, t.NICTransceivers)
		tot.Links += t.Links
		tot.Copper += t.Copper
		tot.Optical += t.Optical
		tot.SwitchTransceivers += t.SwitchTransceivers
		tot.NICTransceivers += t.NICTransceivers
	}
	ew.printf(links, "total", tot.Links, tot.Copper, tot.Optical, tot.SwitchTransceivers, tot.NICTransceivers)

	const switches = "\n%-12s%8v%14s%14s\n"
	const row = "%-12s%8v%14s%14s\n"
	ew.printf(switches, "switches", "count", "power W", "cost USD")
	var n int
	var pw, usd float64
	for _, t := range r.Switches {
		ew.printf(row, t.Tier, t.Count, commas(t.PowerW), commas(t.CostUSD))
		n += t.Count
		pw += t.PowerW
		usd += t.CostUSD
	}
	ew.printf(row, "total", n, commas(pw), commas(usd))

	const parts = "%-24s%8v%10s%12s%12s%14s\n"
	ew.printf("\n"+parts, "parts", "count", "unit W", "unit USD", "power W", "cost USD")
	for _, p := range r.Parts {
		ew.printf(parts, p.Name, p.Count, commas(p.UnitPowerW), commas(p.UnitCostUSD), commas(p.PowerW), commas(p.CostUSD))
	}

	const totals = "%-12s%14s%14s\n"
	ew.printf("\n"+totals, "", "power W", "cost USD")
	ew.printf(totals, "switches", commas(r.PowerW.Switches), commas(r.CostUSD.Switches))
	ew.printf(totals, "optics", commas(r.PowerW.Optics), commas(r.CostUSD.Optics))
	ew.printf(totals, "NICs", commas(r.PowerW.NICs), commas(r.CostUSD.NICs))
	ew.printf(totals, "cables", commas(r.PowerW.Cables), commas(r.CostUSD.Cables))
	ew.printf(totals, "total", commas(r.PowerW.Total), commas(r.CostUSD.Total))
	ew.printf(totals, "per GPU", strconv.FormatFloat(r.PerGPU.PowerW, 'f', 1, 64), commas(r.PerGPU.CostUSD))
	return ew.err
}

// commas prints x with thousands separators, rounded to a whole number
// from 1,000 up and to a tenth below (a 2.5 W module).
func commas(x float64) string {
	if math.Abs(x) < 1000 && math.Round(x) != x {
		return strconv.FormatFloat(x, 'f', 1, 64)
	}
	s := strconv.FormatFloat(math.Abs(math.Round(x)), 'f', 0, 64)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if math.Round(x) < 0 {
		s = "-" + s
	}
	return s
}

// errWriter keeps the first write error so that a run of printf calls is
// checked once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}
