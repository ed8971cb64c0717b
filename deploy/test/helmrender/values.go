package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/xeipuuv/gojsonschema"
)

// parseValues reads a values file the way Helm does: YAML through JSON, so
// every number becomes a float64 (templates must use `int` where Helm would
// need it too).
func parseValues(raw []byte) (map[string]interface{}, error) {
	return parseYAMLMap(raw, false)
}

// mergeValues applies Helm's order: chart defaults < -f files (in order) <
// --set / --set-string (in order). A null in user values removes the default.
func mergeValues(defaults map[string]interface{}, files, sets, setStrings []string) (map[string]interface{}, error) {
	user := map[string]interface{}{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		parsed, err := parseValues(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", f, err)
		}
		user = mergeMaps(user, parsed)
	}
	for _, s := range sets {
		if err := applySet(user, s, true); err != nil {
			return nil, fmt.Errorf("failed parsing --set data: %v", err)
		}
	}
	for _, s := range setStrings {
		if err := applySet(user, s, false); err != nil {
			return nil, fmt.Errorf("failed parsing --set-string data: %v", err)
		}
	}
	values := coalesce(user, deepCopy(defaults).(map[string]interface{}))
	if _, ok := values["global"]; !ok {
		values["global"] = map[string]interface{}{} // Helm always provides .Values.global
	}
	return values, nil
}

// mergeMaps: b wins, maps merge key by key.
func mergeMaps(a, b map[string]interface{}) map[string]interface{} {
	out := map[string]interface{}{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bm, ok := v.(map[string]interface{}); ok {
			if am, ok := out[k].(map[string]interface{}); ok {
				out[k] = mergeMaps(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// coalesce lays user values over the defaults; a user null deletes the key.
func coalesce(user, defaults map[string]interface{}) map[string]interface{} {
	for k, v := range user {
		if v == nil {
			delete(defaults, k)
			continue
		}
		um, userIsMap := v.(map[string]interface{})
		dm, defaultIsMap := defaults[k].(map[string]interface{})
		if userIsMap && defaultIsMap {
			defaults[k] = coalesce(um, dm)
		} else {
			defaults[k] = v
		}
	}
	return defaults
}

func deepCopy(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		out := make(map[string]interface{}, len(t))
		for k, e := range t {
			out[k] = deepCopy(e)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(t))
		for i, e := range t {
			out[i] = deepCopy(e)
		}
		return out
	}
	return v
}

// applySet handles the --set forms charts are driven with: a.b=c, lists
// a={x,y}, indexes a[0].b=c, several pairs separated by commas, and "\" to
// escape "." and ",". Typed values follow Helm: true/false, null, integers.
func applySet(into map[string]interface{}, expr string, typed bool) error {
	for _, pair := range splitUnescaped(expr, ',', true) {
		eq := strings.IndexByte(pair, '=')
		if eq <= 0 {
			return fmt.Errorf("key %q has no value", pair)
		}
		key, raw := pair[:eq], pair[eq+1:]
		var value interface{}
		if strings.HasPrefix(raw, "{") && strings.HasSuffix(raw, "}") {
			items := []interface{}{}
			for _, item := range splitUnescaped(raw[1:len(raw)-1], ',', false) {
				items = append(items, setValue(item, typed))
			}
			value = items
		} else {
			value = setValue(raw, typed)
		}
		if err := setPath(into, splitUnescaped(key, '.', false), value); err != nil {
			return fmt.Errorf("%s: %v", key, err)
		}
	}
	return nil
}

func setValue(raw string, typed bool) interface{} {
	raw = strings.NewReplacer(`\,`, ",", `\.`, ".").Replace(raw)
	if !typed {
		return raw
	}
	switch raw {
	case "true":
		return true
	case "false":
		return false
	case "null":
		return nil
	}
	if n, err := strconv.ParseInt(raw, 10, 64); err == nil && (raw == "0" || !strings.HasPrefix(raw, "0")) {
		return n
	}
	return raw
}

var indexedKey = regexp.MustCompile(`^(.+)\[(\d+)\]$`)

func setPath(node map[string]interface{}, keys []string, value interface{}) error {
	key := strings.ReplaceAll(keys[0], `\.`, ".")
	last := len(keys) == 1
	if m := indexedKey.FindStringSubmatch(key); m != nil {
		index, _ := strconv.Atoi(m[2])
		list, _ := node[m[1]].([]interface{})
		for len(list) <= index {
			list = append(list, nil)
		}
		if last {
			list[index] = value
		} else {
			child, ok := list[index].(map[string]interface{})
			if !ok {
				child = map[string]interface{}{}
			}
			if err := setPath(child, keys[1:], value); err != nil {
				return err
			}
			list[index] = child
		}
		node[m[1]] = list
		return nil
	}
	if last {
		node[key] = value
		return nil
	}
	child, ok := node[key].(map[string]interface{})
	if !ok {
		child = map[string]interface{}{}
		node[key] = child
	}
	return setPath(child, keys[1:], value)
}

// splitUnescaped splits on sep unless escaped with "\"; with braces, a sep
// inside {...} does not split (list values).
func splitUnescaped(s string, sep byte, braces bool) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\':
			i++
		case braces && s[i] == '{':
			depth++
		case braces && s[i] == '}':
			depth--
		case s[i] == sep && depth == 0:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// validateAgainstSchema mirrors Helm: the merged values, as JSON, against
// values.schema.json with xeipuuv/gojsonschema, errors listed one a line.
func validateAgainstSchema(chart *Chart, values map[string]interface{}) error {
	if chart.Schema == nil {
		return nil
	}
	valuesJSON, err := json.Marshal(values)
	if err != nil {
		return err
	}
	result, err := gojsonschema.Validate(gojsonschema.NewBytesLoader(chart.Schema), gojsonschema.NewBytesLoader(valuesJSON))
	if err != nil {
		return fmt.Errorf("values.schema.json: %v", err)
	}
	if result.Valid() {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "values don't meet the specifications of the schema(s) in the following chart(s):\n%s:\n", chart.Name)
	for _, e := range result.Errors() {
		fmt.Fprintf(&b, "- %s\n", e)
	}
	return fmt.Errorf("%s", b.String())
}
