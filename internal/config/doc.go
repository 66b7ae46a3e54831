// Package config owns cri-guard's configuration: the YAML file (names follow
// the kubelet's KubeletConfiguration where one exists; docs/configuration.md
// is the reference, docs/design.md the reasons), its defaults, and its
// validation. Every error names the field it is about.
//
// It may import pod and pressure (to validate critical rules and eviction
// thresholds) and nothing else of the project; cmd/cri-guard is its only user.
package config
