package fabric

import (
	"errors"
	"fmt"
)

// ErrConfig is wrapped by CheckParams' errors; sim/packet's ErrConfig is
// the same error.
var ErrConfig = errors.New("bad simulation config")

// CheckParams fills p's zero fields with Defaults' values and checks the
// rest. Its error wraps ErrConfig and names the first bad field ("VLs 9:
// want 1 to 8"); the engines put their own name in front.
func CheckParams(p Params) (Params, error) {
	d := Defaults
	if p.VLs == 0 {
		p.VLs = d.VLs
	}
	if p.CreditUnit == 0 {
		p.CreditUnit = d.CreditUnit
	}
	if p.Buffer == 0 {
		p.Buffer = d.Buffer
	}
	if p.PropNsPerM == 0 {
		p.PropNsPerM = d.PropNsPerM
	}
	if p.HeaderBytes == 0 {
		p.HeaderBytes = d.HeaderBytes
		if p.LinkLayer == LinkRoCE {
			p.HeaderBytes = RoCEHeaderBytes
		}
	}
	if p.FirstBytes == 0 {
		p.FirstBytes = d.FirstBytes
	}
	if p.MsgOverhead == 0 {
		p.MsgOverhead = d.MsgOverhead
	}
	if p.NICLatency == 0 {
		p.NICLatency = d.NICLatency
	}
	if p.Chunk == 0 {
		p.Chunk = d.Chunk
	}
	if p.Slots == 0 {
		p.Slots = d.Slots
	}
	if p.QPsPerConn == 0 {
		p.QPsPerConn = d.QPsPerConn
	}
	if p.RetryTimeout == 0 {
		p.RetryTimeout = d.RetryTimeout
	}
	if p.NVLinkRate == 0 {
		p.NVLinkRate = d.NVLinkRate
	}
	if p.NVLinkLatency == 0 {
		p.NVLinkLatency = d.NVLinkLatency
	}
	if p.PFCXoff == 0 {
		p.PFCXoff = d.PFCXoff
	}
	if p.PFCHysteresis == 0 {
		p.PFCHysteresis = d.PFCHysteresis
	}
	if p.ECNKmin == 0 {
		p.ECNKmin = d.ECNKmin
	}
	if p.ECNKmax == 0 {
		p.ECNKmax = d.ECNKmax
	}
	if p.ECNPmax == 0 {
		p.ECNPmax = d.ECNPmax
	}
	if p.CC == CCAuto {
		p.CC = CCNone
		if p.LinkLayer == LinkRoCE {
			p.CC = CCDCQCN
		}
	}
	p.DCQCN = p.DCQCN.withDefaults(d.DCQCN)
	bad := func(format string, args ...any) (Params, error) {
		return p, fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case p.VLs < 1 || p.VLs > 8:
		return bad("VLs %d: want 1 to 8", p.VLs)
	case p.CreditUnit < 1 || p.CreditUnit > 4096:
		return bad("credit unit %d bytes: want 1 to 4096", p.CreditUnit)
	case !(p.PropNsPerM >= 0 && p.PropNsPerM <= 1e6):
		return bad("propagation %g ns/m: want 0 to 1e6", p.PropNsPerM)
	case p.Buffer < 1 || p.Buffer > 1<<30:
		return bad("buffer %d bytes per VL: want 1 B to 1 GiB", p.Buffer)
	case p.RetryTimeout < 0:
		return bad("retry timeout %v: want >= 0", p.RetryTimeout)
	case p.HeaderBytes < 0 || p.FirstBytes < 0:
		return bad("header bytes %d, first-packet bytes %d: want >= 0", p.HeaderBytes, p.FirstBytes)
	case p.MsgOverhead < 0 || p.NICLatency < 0 || p.NVLinkLatency < 0:
		return bad("message overhead %v, NIC latency %v, NVLink latency %v: want >= 0", p.MsgOverhead, p.NICLatency, p.NVLinkLatency)
	case p.Chunk < 1 || p.Chunk > 1<<30:
		return bad("chunk %d bytes: want 1 B to 1 GiB", p.Chunk)
	case p.Slots < 1 || p.Slots > 1024:
		return bad("slots %d: want 1 to 1024", p.Slots)
	case p.QPsPerConn < 1 || p.QPsPerConn > 64:
		return bad("QPs per connection %d: want 1 to 64", p.QPsPerConn)
	case !(p.NVLinkRate > 0 && p.NVLinkRate <= 1e15):
		return bad("NVLink rate %g B/s: want > 0 and <= 1e15", p.NVLinkRate)
	case p.Routing > RouteAdaptive:
		return bad("%v: want dmodk, ecmp or adaptive", p.Routing)
	case p.VLWeights != nil && len(p.VLWeights) != p.VLs:
		return bad("%d VL weights for %d VLs", len(p.VLWeights), p.VLs)
	}
	for i, w := range p.VLWeights {
		if w < 1 || w > 255 {
			return bad("VL %d weight %d: want 1 to 255", i, w)
		}
	}
	switch {
	case p.LinkLayer > LinkRoCE:
		return bad("%v: want ib or roce", p.LinkLayer)
	case p.CC > CCDCQCN:
		return bad("%v: want auto, none or dcqcn", p.CC)
	case p.CC == CCDCQCN && p.LinkLayer != LinkRoCE:
		return bad("congestion control dcqcn needs link layer roce, not %v", p.LinkLayer)
	case p.LinkLayer == LinkRoCE && p.Routing == RouteAdaptive:
		// sim/packet's RoCE receivers take packets in PSN order
		// (go-back-N): every packet adaptive routing lets overtake
		// another would count as a loss. NICs that place out of order
		// (Spectrum-X) are not modelled.
		return bad("adaptive routing with link layer roce: the RoCE receivers are go-back-N and would take every overtaking for a loss; use dmodk or ecmp")
	case p.PFCXoff < 1 || p.PFCXoff > 1<<29:
		return bad("PFC Xoff %d bytes: want 1 B to 512 MiB", p.PFCXoff)
	case p.PFCHysteresis < 1 || p.PFCHysteresis > p.PFCXoff:
		return bad("PFC hysteresis %d bytes: want 1 B to Xoff (%d)", p.PFCHysteresis, p.PFCXoff)
	case p.PFCHeadroom < 0 || p.PFCHeadroom > 1<<29:
		return bad("PFC headroom %d bytes: want 0 (per port, lossless) to 512 MiB", p.PFCHeadroom)
	case p.ECNKmin < 1 || p.ECNKmax < p.ECNKmin || p.ECNKmax > 1<<30:
		return bad("ECN Kmin %d, Kmax %d bytes: want 1 <= Kmin <= Kmax <= 1 GiB", p.ECNKmin, p.ECNKmax)
	case !(p.ECNPmax > 0 && p.ECNPmax <= 1):
		return bad("ECN Pmax %g: want > 0 and <= 1", p.ECNPmax)
	}
	if err := p.DCQCN.check(); err != nil {
		return bad("%v", err)
	}
	return p, nil
}

func (c DCQCN) withDefaults(d DCQCN) DCQCN {
	if c.G == 0 {
		c.G = d.G
	}
	if c.AlphaTimer == 0 {
		c.AlphaTimer = d.AlphaTimer
	}
	if c.RateTimer == 0 {
		c.RateTimer = d.RateTimer
	}
	if c.ByteCounter == 0 {
		c.ByteCounter = d.ByteCounter
	}
	if c.FastStages == 0 {
		c.FastStages = d.FastStages
	}
	if c.RateAI == 0 {
		c.RateAI = d.RateAI
	}
	if c.RateHAI == 0 {
		c.RateHAI = d.RateHAI
	}
	if c.MinRate == 0 {
		c.MinRate = d.MinRate
	}
	if c.CNPInterval == 0 {
		c.CNPInterval = d.CNPInterval
	}
	return c
}

func (c DCQCN) check() error {
	rate := func(r float64) bool { return r > 0 && r <= 1e15 }
	switch {
	case !(c.G > 0 && c.G <= 1):
		return fmt.Errorf("DCQCN g %g: want > 0 and <= 1", c.G)
	case c.AlphaTimer < 0 || c.RateTimer < 0 || c.CNPInterval < 0:
		return fmt.Errorf("DCQCN α timer %v, rate timer %v, CNP interval %v: want > 0", c.AlphaTimer, c.RateTimer, c.CNPInterval)
	case c.ByteCounter < 0:
		return fmt.Errorf("DCQCN byte counter %d: want > 0", c.ByteCounter)
	case c.FastStages < 0 || c.FastStages > 1000:
		return fmt.Errorf("DCQCN fast-recovery stages %d: want 1 to 1000", c.FastStages)
	case !rate(c.RateAI) || !rate(c.RateHAI) || !rate(c.MinRate) || c.RateAI < 1e6:
		return fmt.Errorf("DCQCN R_AI %g, R_HAI %g, minimum rate %g b/s: want R_AI >= 1 Mb/s, all <= 1e15 b/s", c.RateAI, c.RateHAI, c.MinRate)
	}
	return nil
}
