package main

import (
	"encoding/base64"
	"path"
	"strings"
)

// Files is .Files: the chart's non-template files, with Helm's methods.
type Files map[string][]byte

func (f Files) GetBytes(name string) []byte { return f[name] }
func (f Files) Get(name string) string      { return string(f[name]) }

// Glob keeps the files whose path matches pattern (path.Match syntax).
func (f Files) Glob(pattern string) Files {
	out := Files{}
	for name, content := range f {
		if ok, _ := path.Match(pattern, name); ok {
			out[name] = content
		}
	}
	return out
}

// AsConfig is a ConfigMap `data` body: base name -> content, as YAML.
func (f Files) AsConfig() string {
	m := map[string]interface{}{}
	for name, content := range f {
		m[path.Base(name)] = string(content)
	}
	return toYAML(m)
}

// AsSecrets is a Secret `data` body: base name -> base64 content, as YAML.
func (f Files) AsSecrets() string {
	m := map[string]interface{}{}
	for name, content := range f {
		m[path.Base(name)] = base64.StdEncoding.EncodeToString(content)
	}
	return toYAML(m)
}

func (f Files) Lines(name string) []string {
	s := strings.TrimSuffix(string(f[name]), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
