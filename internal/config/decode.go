package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// decode reads YAML into dst field by field, so that every error, unknown
// keys included, names the field's full path ("critical.rules"), and every
// problem in the file is reported at once.
//
// sigs.k8s.io/yaml's UnmarshalStrict (encoding/json with
// DisallowUnknownFields on the YAMLToJSON output) cannot do this, checked
// with Go 1.26 and sigs.k8s.io/yaml v1.6.0:
//   - an unknown nested key loses its path: "critical: {rule: modern}" gives
//     `json: unknown field "rule"`, not "critical.rule: unknown field";
//   - an error from a field's own UnmarshalJSON loses the field's name:
//     "housekeepingInterval: fast" gives only `bad duration "fast": ...`;
//   - decoding stops at the first problem, where check-config lists them all.
//
// What the library does that this decoder needs is used: the YAML to JSON
// conversion, strict, so that a key given twice is an error (line and key
// named) rather than the last one silently winning.
func decode(b []byte, dst *Config) error {
	j, err := yaml.YAMLToJSONStrict(b)
	if err != nil {
		return fmt.Errorf("decode: %s", yamlError(err))
	}
	if errs := decodeValue("", j, reflect.ValueOf(dst).Elem()); len(errs) > 0 {
		return errs
	}
	return nil
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

func decodeValue(path string, raw json.RawMessage, v reflect.Value) Errors {
	if v.Kind() == reflect.Map {
		// A map in the file replaces the default whole, as the kubelet's
		// config loading does (cmd/kubelet/app/server.go loadConfigFile:
		// the default evictionHard applies only when the key is nil):
		// `evictionHard: {}` means no hard thresholds. A null value, like
		// an absent key, keeps the default.
		if string(raw) == "null" {
			return nil
		}
		v.Set(reflect.Zero(v.Type()))
	}
	if !isSection(v.Type()) {
		if err := json.Unmarshal(raw, v.Addr().Interface()); err != nil {
			return Errors{fmt.Errorf("%s: %s", path, cleanJSONError(err))}
		}
		return nil
	}
	if string(raw) == "null" {
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		if path == "" {
			return Errors{fmt.Errorf("decode: the file must be a YAML mapping of settings")}
		}
		return Errors{fmt.Errorf("%s: want a mapping", path)}
	}
	fields := map[string]int{}
	for i := range v.NumField() {
		fields[fieldKey(v.Type().Field(i))] = i
	}
	var errs Errors
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		p := k
		if path != "" {
			p = path + "." + k
		}
		if why, ok := removedKeys[p]; ok {
			errs = append(errs, fmt.Errorf("%s: %w in this release: %s", p, errRemovedField, why))
			continue
		}
		i, ok := fields[k]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: %w", p, errUnknownField))
			continue
		}
		errs = append(errs, decodeValue(p, obj[k], v.Field(i))...)
	}
	return errs
}

// cleanJSONError keeps what is wrong, without the library's prefixes.
func cleanJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if ok := asTypeError(err, &te); ok {
		return fmt.Sprintf("want %s, got %s", te.Type, te.Value)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func asTypeError(err error, target **json.UnmarshalTypeError) bool {
	te, ok := err.(*json.UnmarshalTypeError)
	if ok {
		*target = te
	}
	return ok
}

// yamlError is the YAML library's message on one line, without the
// conversion's prefix: "yaml: unmarshal errors: line 2: key "listen" already
// set in map; line 3: ...".
func yamlError(err error) string {
	var b strings.Builder
	for i, l := range strings.Split(strings.TrimPrefix(err.Error(), "error converting YAML to JSON: "), "\n") {
		if i > 0 {
			if strings.HasSuffix(b.String(), ":") {
				b.WriteString(" ")
			} else {
				b.WriteString("; ")
			}
		}
		b.WriteString(strings.TrimSpace(l))
	}
	return b.String()
}
