package proxy

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirhq/weir/internal/meta"
)

// metrics are the proxy's Prometheus metrics; a nil registry gives
// metrics that are kept but not exported.
type metrics struct {
	queueItems      *prometheus.GaugeVec
	queueBytes      *prometheus.GaugeVec
	oldestAge       *prometheus.GaugeVec
	outcomes        *prometheus.CounterVec
	sentBytes       *prometheus.CounterVec
	live            *prometheus.GaugeVec
	aggregates      *prometheus.CounterVec
	repositoryBytes prometheus.Gauge
	queueReads      *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		queueItems: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weir_proxy_queue_aggregates",
			Help: "Aggregates waiting for a destination, by state: queued (never tried), retrying, failed (failure area)."},
			[]string{"destination", "state"}),
		queueBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weir_proxy_queue_bytes",
			Help: "Uncompressed data bytes of the aggregates waiting for a destination, by state."},
			[]string{"destination", "state"}),
		oldestAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weir_proxy_queue_oldest_age_seconds",
			Help: "Age of the oldest aggregate waiting for a destination (queued or retrying), since it closed."},
			[]string{"destination"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weir_proxy_forwards_total",
			Help: "Forward attempts by outcome: sent, retry (failed, will retry) or refused (permanent failure)."},
			[]string{"destination", "outcome"}),
		sentBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weir_proxy_forward_bytes_total",
			Help: "Bytes sent to a destination by successful forwards."}, []string{"destination"}),
		live: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weir_proxy_destination_live",
			Help: "1 while the destination's liveness check passes (always 1 without a check)."}, []string{"destination"}),
		aggregates: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weir_proxy_aggregates_closed_total",
			Help: "Aggregates closed, by reason: items, bytes, age, full (the next post did not fit) or unaggregated."},
			[]string{"reason"}),
		repositoryBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "weir_proxy_repository_bytes",
			Help: "Stored bytes of posts not yet forwarded everywhere."}),
		queueReads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weir_proxy_queue_reads_total",
			Help: "Times a destination's forwarder read its queue for due aggregates: when one closes, a send ends, a retry is due, and every 2 s otherwise."},
			[]string{"destination"}),
	}
	if reg != nil {
		reg.MustRegister(m.queueItems, m.queueBytes, m.oldestAge, m.outcomes, m.sentBytes, m.live, m.aggregates, m.repositoryBytes, m.queueReads)
	}
	return m
}

func (m *metrics) closed(reason string) { m.aggregates.WithLabelValues(reason).Inc() }

func (m *metrics) setLive(dest string, live bool) {
	v := 0.0
	if live {
		v = 1
	}
	m.live.WithLabelValues(dest).Set(v)
}

func (m *metrics) forwarded(dest string, out Outcome) {
	switch {
	case out.OK:
		m.outcomes.WithLabelValues(dest, "sent").Inc()
		m.sentBytes.WithLabelValues(dest).Add(float64(out.Bytes))
	case out.Permanent:
		m.outcomes.WithLabelValues(dest, "refused").Inc()
	default:
		m.outcomes.WithLabelValues(dest, "retry").Inc()
	}
}

// setQueues sets the queue gauges from a summary; every configured
// destination gets every state, zero when empty.
func (m *metrics) setQueues(dests []string, sums []meta.ForwardSummary, now time.Time) {
	type key struct{ dest, state string }
	items, bytes := map[key]float64{}, map[key]float64{}
	oldest := map[string]int64{}
	for _, d := range dests {
		for _, s := range []string{"queued", "retrying", "failed"} {
			items[key{d, s}], bytes[key{d, s}] = 0, 0
		}
		oldest[d] = 0
	}
	for _, s := range sums {
		state := meta.QueueState(s.State, s.Retrying)
		k := key{s.Destination, state}
		items[k] += float64(s.Count)
		bytes[k] += float64(s.Bytes)
		if state != "failed" && (oldest[s.Destination] == 0 || s.OldestMs < oldest[s.Destination]) {
			oldest[s.Destination] = s.OldestMs
		}
	}
	for k, v := range items {
		m.queueItems.WithLabelValues(k.dest, k.state).Set(v)
		m.queueBytes.WithLabelValues(k.dest, k.state).Set(bytes[k])
	}
	for d, ms := range oldest {
		age := 0.0
		if ms > 0 {
			age = max(now.Sub(time.UnixMilli(ms)).Seconds(), 0)
		}
		m.oldestAge.WithLabelValues(d).Set(age)
	}
}
