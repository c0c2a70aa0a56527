// Command ferry mounts object storage at /fusion, runs a task and makes its
// outputs durable. It is the only place that calls os.Exit.
package main
