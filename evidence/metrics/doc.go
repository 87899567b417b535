// Package metrics reads service metrics for the noDisruption gate: a Provider evaluates a query over
// a window, once for many clusters, and Summarize turns each cluster's points into the summary the
// evidence holds (count, min, max, mean, last). Prometheus is the Provider for the Prometheus HTTP
// API (Prometheus, Thanos Query, Mimir and the other servers of that API).
package metrics
