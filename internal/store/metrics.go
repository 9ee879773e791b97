package store

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the store's Prometheus metrics.
type Metrics struct {
	batchSize     prometheus.Histogram
	commitSeconds prometheus.Histogram
	purgedStreams prometheus.Counter
	purgedBytes   prometheus.Counter
	// compactedPacks counts packs rewritten without their purged streams.
	compactedPacks prometheus.Counter
	// rowsPending is how many streams of answered posts wait for their
	// rows' transaction (store.commit: log).
	rowsPending prometheus.Gauge
}

// NewMetrics creates the store metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "weir_store_commit_batch_size",
			Help:    "Requests (post creations, commits, aborts) made durable by one group commit (one metadata transaction and shared directory fsyncs).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "weir_store_commit_seconds",
			Help:    "Time taken by one group commit.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		purgedStreams: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "weir_store_purged_streams_total",
			Help: "Deleted streams removed for good (files and rows) once DELETED longer than store.deletePurgeAge.",
		}),
		purgedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "weir_store_purged_bytes_total",
			Help: "Bytes of stream and pack files removed by the purge of deleted streams (of a compacted pack: what it shrank by).",
		}),
		compactedPacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "weir_store_compacted_packs_total",
			Help: "Packs rewritten by the purge of deleted streams without the streams it removed, because other streams in them stay.",
		}),
		rowsPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "weir_store_rows_pending",
			Help: "Streams of posts answered (durable in the store's log) whose rows are not yet in the metadata database (store.commit: log).",
		}),
	}
	reg.MustRegister(m.batchSize, m.commitSeconds, m.purgedStreams, m.purgedBytes, m.compactedPacks, m.rowsPending)
	return m
}
