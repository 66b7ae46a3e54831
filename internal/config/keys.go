package config

import (
	"reflect"
	"slices"
	"strings"
)

// isSection reports whether a field of type t is a mapping of settings of
// its own (critical, fastPoll, log, kubernetes), decoded key by key, rather
// than one value: a struct that does not decode itself (a Duration does).
// decode and Keys share it, so that the keys listed are the keys read.
func isSection(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(unmarshalerType)
}

// fieldKey is the key a struct field is read under: its json tag's name.
func fieldKey(f reflect.StructField) string {
	tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return tag
}

// Keys returns every key the file accepts, as a dotted path and sorted: each
// top-level key, and for a section ("kubernetes") the section and each of
// its keys ("kubernetes.kubeconfig"). A map's entries (evictionHard's
// signals) are values, not keys.
func Keys() []string {
	var out []string
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for f := range t.Fields() {
			k := fieldKey(f)
			if k == "" || k == "-" {
				continue
			}
			if prefix != "" {
				k = prefix + "." + k
			}
			out = append(out, k)
			if isSection(f.Type) {
				walk(k, f.Type)
			}
		}
	}
	walk("", reflect.TypeFor[Config]())
	slices.Sort(out)
	return out
}

// RemovedKeys returns the keys of earlier releases that this one loads
// without, with a warning (removedKeys), sorted.
func RemovedKeys() []string {
	out := make([]string, 0, len(removedKeys))
	for k := range removedKeys {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
