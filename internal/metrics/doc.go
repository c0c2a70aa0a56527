// Package metrics builds ferry's Prometheus collectors on an injected
// registry (never the global one) and serves /metrics. Names follow
// ferry_<subsystem>_<name>_<unit>; labels are bounded (op, backend,
// result), never a path or key. It imports prometheus only.
package metrics
