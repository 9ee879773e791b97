package receive

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the datafeed's Prometheus metrics. The feed label is the
// feed's name only for feeds that exist, and "-" otherwise, so that senders
// cannot create unbounded label values by posting to made-up feeds.
type Metrics struct {
	requests   *prometheus.CounterVec
	bytes      *prometheus.CounterVec
	stored     *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	inflight   prometheus.Gauge
	undeclared *prometheus.CounterVec
	rules      *prometheus.CounterVec
	// droppedParts counts zip parts of trusted forwarders that a REJECT
	// rule refused and that were dropped while the rest was stored.
	droppedParts prometheus.Counter
}

// NewMetrics creates the datafeed metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_receive_requests_total",
			Help: "Posts to the datafeed by feed, outcome (received, empty, dropped, rejected, error, duplicate) and Service-Status code (0 = OK).",
		}, []string{"feed", "outcome", "status"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_receive_bytes_total",
			Help: "Request body bytes read from senders, as sent (compressed or not).",
		}, []string{"feed"}),
		stored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_receive_stored_bytes_total",
			Help: "Uncompressed data bytes stored from acknowledged posts.",
		}, []string{"feed"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "weir_receive_duration_seconds",
			Help:    "Time from the start of a post to its response, including the durable commit.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"outcome"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "weir_receive_inflight",
			Help: "Posts whose bodies are being received now.",
		}),
		undeclared: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_receive_undeclared_compression_total",
			Help: "Posts declared uncompressed whose body starts with gzip or zip magic bytes.",
		}, []string{"format"}),
		rules: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_receive_rule_decisions_total",
			Help: "Decisions of the data receipt rules (RECEIPT_POLICY mode) by rule number (none: no rule matched) and action: one per post, per zip part and per feed status question.",
		}, []string{"rule", "action"}),
		droppedParts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "weir_receive_rule_dropped_parts_total",
			Help: "Parts of trusted forwarders' zips that a REJECT rule refused and that were dropped, the rest of the zip being stored (each is logged at WARN).",
		}),
	}
	reg.MustRegister(m.requests, m.bytes, m.stored, m.duration, m.inflight, m.undeclared, m.rules, m.droppedParts)
	return m
}
