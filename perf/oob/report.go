package oob

import (
	"encoding/binary"
	"math"
)

// Report is the part of perftest's struct bw_report_data that
// xchg_bw_reports sends (without --report-per-port, which needs two ports).
// The values are what perftest's print_report_bw computes; bandwidths are in
// the unit the reporting side chose (MB/s, or Gb/s with --report_gbits), and a
// perftest server prints the client's report as it comes.
type Report struct {
	Size       uint64  // size: message size in bytes
	Iters      uint64  // iters: completed iterations
	BWPeak     float64 // bw_peak
	BWAvg      float64 // bw_avg
	MsgRateAvg float64 // msgRate_avg, Mpps
}

// fields returns the five 8-byte big-endian values in the order
// xchg_bw_reports exchanges them, each with its own ctx_xchg_data: size
// (hton_long), iters (hton_long, peer >= 5.33), bw_peak, bw_avg,
// msgRate_avg (hton_double: the IEEE bits byte-swapped).
func (r Report) fields() [5][8]byte {
	var f [5][8]byte
	binary.BigEndian.PutUint64(f[0][:], r.Size)
	binary.BigEndian.PutUint64(f[1][:], r.Iters)
	binary.BigEndian.PutUint64(f[2][:], math.Float64bits(r.BWPeak))
	binary.BigEndian.PutUint64(f[3][:], math.Float64bits(r.BWAvg))
	binary.BigEndian.PutUint64(f[4][:], math.Float64bits(r.MsgRateAvg))
	return f
}

func reportFrom(f [5][8]byte) Report {
	return Report{
		Size:       binary.BigEndian.Uint64(f[0][:]),
		Iters:      binary.BigEndian.Uint64(f[1][:]),
		BWPeak:     math.Float64frombits(binary.BigEndian.Uint64(f[2][:])),
		BWAvg:      math.Float64frombits(binary.BigEndian.Uint64(f[3][:])),
		MsgRateAvg: math.Float64frombits(binary.BigEndian.Uint64(f[4][:])),
	}
}

var reportFieldNames = [5]string{"size", "iters", "bw_peak", "bw_avg", "msgRate_avg"}
