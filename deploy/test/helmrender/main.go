// helm-render renders a Helm v3 chart the way `helm template` does, for
// tests on machines without Helm: Go's text/template with the sprig
// functions plus Helm's own additions (include, tpl, required, toYaml, ...),
// Helm's value merging (-f files, then --set) and values.schema.json
// validation with the same JSON Schema library Helm uses.
//
//	helm-render --chart DIR [-f values.yaml]... [--set a.b=c]... [--set-string a=b]...
//	            [--release NAME] [--namespace NS] [--format yaml|json] [--notes FILE]
//
// Exit status 1 with Helm-like messages on schema, template or YAML errors.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func main() {
	var valueFiles, sets, setStrings repeated
	chartDir := flag.String("chart", "", "chart folder (holds Chart.yaml)")
	release := flag.String("release", "herd", "release name")
	namespace := flag.String("namespace", "default", "release namespace")
	format := flag.String("format", "yaml", "yaml: a multi-document stream like helm template; json: [{source, object}]")
	notesFile := flag.String("notes", "", "also render templates/NOTES.txt into this file")
	flag.Var(&valueFiles, "f", "values file (repeatable; later files win)")
	flag.Var(&sets, "set", "key=value overrides, Helm --set syntax (repeatable)")
	flag.Var(&setStrings, "set-string", "key=value overrides kept as strings (repeatable)")
	flag.Parse()
	if *chartDir == "" {
		fmt.Fprintln(os.Stderr, "helm-render: --chart is required")
		os.Exit(2)
	}
	if err := run(*chartDir, *release, *namespace, *format, *notesFile, valueFiles, sets, setStrings); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

func run(chartDir, release, namespace, format, notesFile string, valueFiles, sets, setStrings []string) error {
	chart, err := loadChart(chartDir)
	if err != nil {
		return err
	}
	values, err := mergeValues(chart.Values, valueFiles, sets, setStrings)
	if err != nil {
		return err
	}
	if err := validateAgainstSchema(chart, values); err != nil {
		return err
	}
	rendered, err := renderTemplates(chart, values, releaseInfo(release, namespace))
	if err != nil {
		return err
	}
	if notesFile != "" {
		if err := os.WriteFile(notesFile, []byte(rendered.notes), 0o644); err != nil {
			return err
		}
	}
	switch format {
	case "yaml":
		return writeYAMLStream(os.Stdout, rendered.manifests)
	case "json":
		return writeJSON(os.Stdout, rendered.manifests)
	}
	return fmt.Errorf("unknown --format %q", format)
}
