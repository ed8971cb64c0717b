package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"regexp"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/semver"
)

// The Kubernetes version .Capabilities reports, as `helm template` does
// without a cluster; the schemas the tests validate against are 1.27's.
const kubeMinor = "27"

// APIVersions is .Capabilities.APIVersions; without a cluster only the
// built-in groups exist, as in `helm template`.
type APIVersions []string

func (a APIVersions) Has(version string) bool {
	for _, v := range a {
		if v == version {
			return true
		}
	}
	return false
}

var builtinAPIVersions = APIVersions{
	"v1", "apps/v1", "batch/v1", "policy/v1", "networking.k8s.io/v1", "rbac.authorization.k8s.io/v1",
	"autoscaling/v2", "storage.k8s.io/v1", "apps/v1/Deployment", "apps/v1/StatefulSet",
}

func releaseInfo(name, namespace string) map[string]interface{} {
	return map[string]interface{}{
		"Name": name, "Namespace": namespace, "Service": "Helm",
		"IsInstall": true, "IsUpgrade": false, "Revision": 1,
	}
}

// Manifest is one rendered template file.
type Manifest struct {
	Source  string // "herd/templates/x.yaml"
	Content string
}

type rendered struct {
	manifests []Manifest
	notes     string
}

// checkKubeVersion refuses a chart whose kubeVersion range excludes the
// version rendered for, as Helm does.
func checkKubeVersion(chart *Chart) error {
	constraint, _ := chart.Metadata["KubeVersion"].(string)
	if constraint == "" {
		return nil
	}
	c, err := semver.NewConstraint(constraint)
	if err != nil {
		return fmt.Errorf("Chart.yaml: kubeVersion %q: %v", constraint, err)
	}
	version := semver.MustParse("v1." + kubeMinor + ".0")
	if !c.Check(version) {
		return fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s", constraint, version.Original())
	}
	return nil
}

func renderTemplates(chart *Chart, values, release map[string]interface{}) (*rendered, error) {
	if err := checkKubeVersion(chart); err != nil {
		return nil, err
	}
	var root *template.Template
	root = template.New("gotpl").Option("missingkey=zero").Funcs(helmFuncs(&root))
	names := make([]string, 0, len(chart.Templates))
	for name := range chart.Templates {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, err := root.New(chart.Name + "/" + name).Parse(chart.Templates[name]); err != nil {
			return nil, fmt.Errorf("parse error in %q: %v", name, err)
		}
	}
	capabilities := map[string]interface{}{
		"KubeVersion": map[string]interface{}{
			"Version": "v1." + kubeMinor + ".0", "GitVersion": "v1." + kubeMinor + ".0",
			"Major": "1", "Minor": kubeMinor,
		},
		"APIVersions": builtinAPIVersions,
		"HelmVersion": map[string]interface{}{"Version": "v3.12.0"},
	}
	out := &rendered{}
	for _, name := range names {
		base := path.Base(name)
		if strings.HasPrefix(base, "_") {
			continue // partials only define named templates
		}
		data := map[string]interface{}{
			"Values": values, "Release": release, "Chart": chart.Metadata,
			"Capabilities": capabilities, "Files": chart.Files,
			"Template": map[string]interface{}{
				"Name": chart.Name + "/" + name, "BasePath": chart.Name + "/templates",
			},
		}
		var b bytes.Buffer
		if err := root.ExecuteTemplate(&b, chart.Name+"/"+name, data); err != nil {
			return nil, cleanExecError(err)
		}
		text := strings.ReplaceAll(b.String(), "<no value>", "")
		if name == "templates/NOTES.txt" {
			out.notes = text
			continue
		}
		if strings.TrimSpace(text) != "" {
			out.manifests = append(out.manifests, Manifest{Source: chart.Name + "/" + name, Content: text})
		}
	}
	return out, nil
}

const (
	messageStart = "HELM_ERR_START"
	messageEnd   = "HELM_ERR_END"
)

func markMessage(message string) string { return messageStart + message + messageEnd }

var markedMessage = regexp.MustCompile(messageStart + `((?s).*)` + messageEnd)

// cleanExecError turns a failed required/fail into Helm's
// "execution error at (herd/templates/x.yaml:3:4): MESSAGE".
func cleanExecError(err error) error {
	tokens := strings.SplitN(err.Error(), ": ", 3)
	if len(tokens) == 3 {
		if m := markedMessage.FindStringSubmatch(tokens[2]); m != nil {
			return fmt.Errorf("execution error at (%s): %s", tokens[1], m[1])
		}
	}
	return err
}

var documentSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// documents splits a manifest into its YAML documents, dropping empty ones.
func documents(m Manifest) []string {
	var docs []string
	for _, d := range documentSeparator.Split(m.Content, -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			docs = append(docs, d)
		}
	}
	return docs
}

func stripComments(doc string) string {
	var kept []string
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			kept = append(kept, line)
		}
	}
	return strings.Join(kept, "\n")
}

func writeYAMLStream(w io.Writer, manifests []Manifest) error {
	for _, m := range manifests {
		for _, d := range documents(m) {
			fmt.Fprintf(w, "---\n# Source: %s\n%s\n", m.Source, strings.Trim(d, "\n"))
		}
	}
	return nil
}

// writeJSON parses every document (as the API server would receive it) and
// writes [{"source": ..., "object": ...}]; a document that is not valid
// YAML, or not an object with apiVersion and kind, is an error.
func writeJSON(w io.Writer, manifests []Manifest) error {
	type entry struct {
		Source string                 `json:"source"`
		Object map[string]interface{} `json:"object"`
	}
	entries := []entry{}
	for _, m := range manifests {
		for _, d := range documents(m) {
			object, err := parseYAMLMap([]byte(d), true)
			if err != nil {
				return fmt.Errorf("YAML parse error on %s: %v\n%s", m.Source, err, d)
			}
			if object["apiVersion"] == nil || object["kind"] == nil {
				return fmt.Errorf("%s: a document without apiVersion/kind:\n%s", m.Source, d)
			}
			entries = append(entries, entry{Source: m.Source, Object: object})
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(entries)
}
