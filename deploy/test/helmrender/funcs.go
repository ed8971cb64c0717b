package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
)

// includeDepthLimit matches Helm's guard against recursive includes.
const includeDepthLimit = 1000

// helmFuncs is sprig minus what Helm removes, plus what Helm adds. include
// and tpl need the template set, so they are bound per render.
func helmFuncs(t **template.Template) template.FuncMap {
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env")       // Helm drops these: a chart must not
	delete(funcs, "expandenv") // depend on the machine rendering it

	depth := 0
	funcs["include"] = func(name string, data interface{}) (string, error) {
		if depth++; depth > includeDepthLimit {
			return "", fmt.Errorf("rendering template has a nested reference name: %s", name)
		}
		defer func() { depth-- }()
		var b bytes.Buffer
		err := (*t).ExecuteTemplate(&b, name, data)
		return b.String(), err
	}
	funcs["tpl"] = func(text string, data interface{}) (string, error) {
		clone, err := (*t).Clone()
		if err != nil {
			return "", err
		}
		parsed, err := clone.New("tpl").Option("missingkey=zero").Parse(text)
		if err != nil {
			return "", fmt.Errorf("cannot parse template %q: %v", text, err)
		}
		var b bytes.Buffer
		if err := parsed.Execute(&b, data); err != nil {
			return "", fmt.Errorf("error during tpl function execution for %q: %v", text, err)
		}
		return strings.ReplaceAll(b.String(), "<no value>", ""), nil
	}
	// Helm marks the messages of required and fail so that the error it
	// prints is the chart's message alone (see cleanExecError).
	funcs["required"] = func(message string, value interface{}) (interface{}, error) {
		if value == nil {
			return nil, fmt.Errorf("%s", markMessage(message))
		}
		if s, ok := value.(string); ok && s == "" {
			return nil, fmt.Errorf("%s", markMessage(message))
		}
		return value, nil
	}
	funcs["fail"] = func(message string) (string, error) {
		return "", fmt.Errorf("%s", markMessage(message))
	}
	funcs["toYaml"] = toYAML
	funcs["fromYaml"] = func(s string) map[string]interface{} {
		m, err := parseYAMLMap([]byte(s), false)
		if err != nil {
			return map[string]interface{}{"Error": err.Error()}
		}
		return m
	}
	funcs["toJson"] = func(v interface{}) string {
		b, err := json.Marshal(v)
		if err != nil {
			return ""
		}
		return string(b)
	}
	funcs["fromJson"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	// `helm template` has no cluster: lookup finds nothing.
	funcs["lookup"] = func(apiVersion, kind, namespace, name string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	return funcs
}
