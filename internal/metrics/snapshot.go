package metrics

import "github.com/prometheus/client_golang/prometheus"

// field is one metric read from a snapshot of type T.
type field[T any] struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(T) float64
}

func counterField[T any](name, help string, value func(T) float64) field[T] {
	return field[T]{desc: prometheus.NewDesc(name, help, nil, nil), typ: prometheus.CounterValue, value: value}
}

func gaugeField[T any](name, help string, value func(T) float64) field[T] {
	return field[T]{desc: prometheus.NewDesc(name, help, nil, nil), typ: prometheus.GaugeValue, value: value}
}

// snapshotCollector calls snap once per scrape and turns the snapshot
// into constant metrics. It is immutable; snap must be safe for
// concurrent use.
type snapshotCollector[T any] struct {
	snap   func() T
	fields []field[T]
	// extra, when set, adds metrics computed from the same snapshot.
	extra func(T, chan<- prometheus.Metric)
	// extraDescs describes what extra emits.
	extraDescs []*prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c *snapshotCollector[T]) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range c.fields {
		ch <- f.desc
	}
	for _, d := range c.extraDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *snapshotCollector[T]) Collect(ch chan<- prometheus.Metric) {
	s := c.snap()
	for _, f := range c.fields {
		ch <- prometheus.MustNewConstMetric(f.desc, f.typ, f.value(s))
	}
	if c.extra != nil {
		c.extra(s, ch)
	}
}
