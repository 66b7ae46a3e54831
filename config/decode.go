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
// keys included, names the field's full path ("critical.rules").
func decode(b []byte, dst *Config) error {
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	if errs := decodeValue("", j, reflect.ValueOf(dst).Elem()); len(errs) > 0 {
		return errs
	}
	return nil
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

func decodeValue(path string, raw json.RawMessage, v reflect.Value) Errors {
	if v.Kind() != reflect.Struct || reflect.PointerTo(v.Type()).Implements(unmarshalerType) {
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
		tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
		fields[tag] = i
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
		i, ok := fields[k]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: unknown field", p))
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
