// Package config holds ferry's configuration as plain data: the Config
// struct, its defaults and Validate. It imports only the standard library;
// flags and environment variables are bound to it by package cli.
package config
