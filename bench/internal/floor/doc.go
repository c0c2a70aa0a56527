// Package floor holds what bench/putfloor and bench/getfloor share: a
// plain AWS SDK S3 client for the benchmark's MinIO (path style, static
// credentials from the environment, C connections kept open), and their
// command-line plumbing.
package floor
