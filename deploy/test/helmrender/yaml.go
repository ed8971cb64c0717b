package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"gopkg.in/yaml.v2"
)

// Helm reads and writes YAML through JSON (sigs.k8s.io/yaml over yaml.v2):
// YAML 1.1 scalars (yes/no are booleans), numbers as float64, and string
// keys only. These helpers do the same with the yaml.v2 Debian ships.

// parseYAML decodes one YAML document into JSON-compatible values. strict
// also rejects duplicate keys.
func parseYAML(raw []byte, strict bool) (interface{}, error) {
	var parsed interface{}
	unmarshal := yaml.Unmarshal
	if strict {
		unmarshal = yaml.UnmarshalStrict
	}
	if err := unmarshal(raw, &parsed); err != nil {
		return nil, err
	}
	converted, err := jsonCompatible(parsed)
	if err != nil {
		return nil, err
	}
	asJSON, err := json.Marshal(converted)
	if err != nil {
		return nil, err
	}
	var out interface{}
	err = json.Unmarshal(asJSON, &out)
	return out, err
}

// parseYAMLMap is parseYAML for documents that must be a map (or empty).
func parseYAMLMap(raw []byte, strict bool) (map[string]interface{}, error) {
	parsed, err := parseYAML(raw, strict)
	if err != nil || parsed == nil {
		return map[string]interface{}{}, err
	}
	m, ok := parsed.(map[string]interface{})
	if !ok {
		return nil, fmt.Errorf("expected a map at the top level, got %T", parsed)
	}
	return m, nil
}

func jsonCompatible(v interface{}) (interface{}, error) {
	switch t := v.(type) {
	case map[interface{}]interface{}:
		out := make(map[string]interface{}, len(t))
		for k, e := range t {
			key, ok := k.(string)
			if !ok {
				key = fmt.Sprint(k) // as sigs.k8s.io/yaml does for int and bool keys
			}
			converted, err := jsonCompatible(e)
			if err != nil {
				return nil, err
			}
			out[key] = converted
		}
		return out, nil
	case []interface{}:
		out := make([]interface{}, len(t))
		for i, e := range t {
			converted, err := jsonCompatible(e)
			if err != nil {
				return nil, err
			}
			out[i] = converted
		}
		return out, nil
	}
	return v, nil
}

// toYAML is Helm's toYaml: through JSON (keys sorted, numbers as JSON has
// them), yaml.v2 layout, no trailing newline; "" on error, as in Helm.
func toYAML(v interface{}) string {
	asJSON, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	var generic interface{}
	if err := json.Unmarshal(asJSON, &generic); err != nil {
		return ""
	}
	out, err := yaml.Marshal(generic)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(out), "\n")
}
