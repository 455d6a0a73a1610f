// Package config loads routeletd's configuration from four layers: built-in
// defaults, an optional YAML file (--config / ROUTELET_CONFIG), ROUTELET_*
// environment variables and command-line flags. A later layer overrides an
// earlier one key by key: flag > env > file > default. A repeatable key
// (pod-cidr) is replaced as a whole by the highest layer that sets it.
//
// Every key has one name used everywhere: the flag is --<name>, the
// environment variable is ROUTELET_<NAME> with '-' turned into '_', and the
// file key is <name>. Invalid input is reported with the key, the layer it
// came from and the offending value.
package config
