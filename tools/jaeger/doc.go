// Package jaeger pins Jaeger (github.com/jaegertracing/jaeger/cmd/jaeger,
// an OTLP receiver with a query API) as a Go tool dependency of its own
// module, for the telemetry end-to-end test (test/otel_test.go):
//
//	go -C tools/jaeger build -o jaeger github.com/jaegertracing/jaeger/cmd/jaeger
//
// It is a module of its own so that Jaeger's ~300 dependencies, and the
// older OpenTelemetry and collector versions it is built with, do not
// enter the router's own module graph.
package jaeger
