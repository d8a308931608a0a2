package prom

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ibex-rdma/ibex/coll"
)

// Collectives, under the names NCCL's Inspector exporter gives them: the
// last completed call of each kind on each rank this process holds
// (coll.Stats, read at scrape time from the flight recorders' atomics).
var (
	collLabels  = []string{"comm_id", "rank", "n_ranks", "collective"}
	collBusBW   = prometheus.NewDesc("nccl_bus_bandwidth_gbs", "Bus bandwidth of the last completed call of this collective on this rank, GB/s, as nccl-tests computes it (algbw x the collective's bus factor).", collLabels, nil)
	collAlgBW   = prometheus.NewDesc("nccl_algorithm_bandwidth_gbs", "Algorithm bandwidth (bytes / time) of the last completed call of this collective on this rank, GB/s.", collLabels, nil)
	collExec    = prometheus.NewDesc("nccl_collective_exec_time_microseconds", "Execution time of the last completed call of this collective on this rank, from its start to its end, microseconds.", collLabels, nil)
	collBytes   = prometheus.NewDesc("nccl_collective_message_size_bytes", "Size of the last completed call of this collective on this rank, bytes.", collLabels, nil)
	collCalls   = prometheus.NewDesc("ibex_coll_calls_total", "Calls of this collective completed on this rank.", collLabels, nil)
	collFailed  = prometheus.NewDesc("ibex_coll_calls_failed_total", "Calls of this collective that failed on this rank.", collLabels, nil)
	collMetrics = []*prometheus.Desc{collBusBW, collAlgBW, collExec, collBytes, collCalls, collFailed}
)

// CollCollector is a prometheus.Collector of the process's collectives
// (coll.Stats): nothing when it holds no communicator, as a daemon.
type CollCollector struct {
	stats func() []coll.CommStats
}

// NewCollCollector returns a collector over coll.Stats.
func NewCollCollector() *CollCollector { return &CollCollector{stats: coll.Stats} }

// Describe sends the descriptors of every collective metric.
func (c *CollCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range collMetrics {
		ch <- d
	}
}

// Collect sends each rank's figures per kind of call. A rank with two
// communicators of one ID cannot be (IDs are unique per job), but a
// series is sent once whatever the input.
func (c *CollCollector) Collect(ch chan<- prometheus.Metric) {
	seen := map[[3]string]bool{}
	for _, cs := range c.stats() {
		rank, size := strconv.Itoa(cs.Rank), strconv.Itoa(cs.Size)
		for _, o := range cs.Ops {
			k := [3]string{cs.ID, rank, o.Op}
			if seen[k] {
				continue
			}
			seen[k] = true
			lv := []string{cs.ID, rank, size, o.Op}
			ch <- prometheus.MustNewConstMetric(collCalls, prometheus.CounterValue, float64(o.Count), lv...)
			ch <- prometheus.MustNewConstMetric(collFailed, prometheus.CounterValue, float64(o.Failed), lv...)
			if o.LastExecMicros == 0 {
				continue // none completed yet: no last call to describe
			}
			ch <- prometheus.MustNewConstMetric(collBusBW, prometheus.GaugeValue, o.LastBusBWGBs, lv...)
			ch <- prometheus.MustNewConstMetric(collAlgBW, prometheus.GaugeValue, o.LastAlgBWGBs, lv...)
			ch <- prometheus.MustNewConstMetric(collExec, prometheus.GaugeValue, o.LastExecMicros, lv...)
			ch <- prometheus.MustNewConstMetric(collBytes, prometheus.GaugeValue, float64(o.LastBytes), lv...)
		}
	}
}
