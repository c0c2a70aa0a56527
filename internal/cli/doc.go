// Package cli is ferry's command line (cobra): the run, mount, prefetch,
// config and version commands, flags bound to config.Config with
// environment fallbacks, and the argv[0] dispatch that makes the binary a
// drop-in /usr/bin/fusion. It imports config, supervise and cobra.
package cli
