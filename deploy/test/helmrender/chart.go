package main

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Chart is what a chart folder holds, split the way Helm's loader splits it.
type Chart struct {
	Name      string
	Metadata  map[string]interface{} // Chart.yaml, exposed as .Chart with Helm's field names
	Values    map[string]interface{} // values.yaml
	Schema    []byte                 // values.schema.json, nil if absent
	Templates map[string]string      // "templates/x.yaml" -> source
	Files     Files                  // every other file, for .Files
}

// Helm exposes Chart.yaml through a Go struct, so templates spell the
// fields .Chart.Name, .Chart.AppVersion, ...
var chartFieldNames = map[string]string{
	"apiVersion": "APIVersion", "name": "Name", "version": "Version", "appVersion": "AppVersion",
	"description": "Description", "type": "Type", "keywords": "Keywords", "home": "Home",
	"sources": "Sources", "maintainers": "Maintainers", "icon": "Icon", "kubeVersion": "KubeVersion",
	"annotations": "Annotations", "deprecated": "Deprecated", "dependencies": "Dependencies",
}

func loadChart(dir string) (*Chart, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, fmt.Errorf("not a chart: %v", err)
	}
	meta, err := parseYAMLMap(raw, true)
	if err != nil {
		return nil, fmt.Errorf("Chart.yaml: %v", err)
	}
	chart := &Chart{Metadata: map[string]interface{}{}, Templates: map[string]string{}, Files: Files{}}
	for key, value := range meta {
		name, known := chartFieldNames[key]
		if !known {
			return nil, fmt.Errorf("Chart.yaml: unknown field %q", key)
		}
		chart.Metadata[name] = value
	}
	for _, required := range []string{"APIVersion", "Name", "Version"} {
		if s, _ := chart.Metadata[required].(string); s == "" {
			return nil, fmt.Errorf("Chart.yaml: %s is required", required)
		}
	}
	if chart.Metadata["APIVersion"] != "v2" {
		return nil, fmt.Errorf("Chart.yaml: apiVersion must be v2 for Helm 3")
	}
	chart.Name = chart.Metadata["Name"].(string)

	chart.Values = map[string]interface{}{}
	if raw, err := os.ReadFile(filepath.Join(dir, "values.yaml")); err == nil {
		if chart.Values, err = parseValues(raw); err != nil {
			return nil, fmt.Errorf("values.yaml: %v", err)
		}
	}
	if raw, err := os.ReadFile(filepath.Join(dir, "values.schema.json")); err == nil {
		chart.Schema = raw
	}

	ignored, err := loadHelmIgnore(dir)
	if err != nil {
		return nil, err
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if ignored(rel, d.IsDir()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		content, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch {
		case strings.HasPrefix(rel, "templates/"):
			chart.Templates[rel] = string(content)
		case rel == "Chart.yaml" || rel == "values.yaml" || rel == "values.schema.json":
		default:
			chart.Files[rel] = content
		}
		return nil
	})
	return chart, err
}

// loadHelmIgnore supports the common subset of .helmignore: one glob per
// line, matched against the path and the base name; a trailing "/" matches
// folders only; "#" starts a comment.
func loadHelmIgnore(dir string) (func(rel string, isDir bool) bool, error) {
	raw, err := os.ReadFile(filepath.Join(dir, ".helmignore"))
	if os.IsNotExist(err) {
		return func(string, bool) bool { return false }, nil
	}
	if err != nil {
		return nil, err
	}
	var patterns []string
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	return func(rel string, isDir bool) bool {
		for _, p := range patterns {
			dirOnly := strings.HasSuffix(p, "/")
			p = strings.TrimSuffix(p, "/")
			if dirOnly && !isDir {
				continue
			}
			if ok, _ := path.Match(p, rel); ok {
				return true
			}
			if ok, _ := path.Match(p, path.Base(rel)); ok {
				return true
			}
		}
		return false
	}, nil
}
