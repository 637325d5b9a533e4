// helmrender renders a Helm 3 chart the way `helm template` does, for the
// chart checks on machines without Helm: values.yaml deep-merged with -f
// files, validated against values.schema.json (JSON Schema, the library Helm
// uses), every template parsed into one set, Helm's function map (sprig plus
// include, tpl, required, toYaml, fromYaml, toJson, fromJson, lookup, ...),
// .Values/.Release/.Chart/.Capabilities/.Template/.Files. Only what the
// gradex chart needs; a function it lacks fails the parse, not silently.
//
// usage: helmrender [-f values.yaml]... [--name R] [--namespace N] [--dump-values] CHART_DIR
// Prints the manifests ("---\n# Source: CHART/templates/F") to stdout; exit 1
// with "Error: ..." (Helm's wording) on bad values or a failing template.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io/ioutil"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	"github.com/xeipuuv/gojsonschema"
	"sigs.k8s.io/yaml"
)

type valueFiles []string

func (v *valueFiles) String() string     { return strings.Join(*v, ",") }
func (v *valueFiles) Set(s string) error { *v = append(*v, s); return nil }

// Files is .Files: the chart's non-template files by slash path.
type Files map[string][]byte

func (f Files) Get(name string) string      { return string(f[name]) }
func (f Files) GetBytes(name string) []byte { return f[name] }
func (f Files) Glob(pattern string) Files {
	out := Files{}
	for k, v := range f {
		if ok, _ := path.Match(pattern, k); ok {
			out[k] = v
		}
	}
	return out
}
func (f Files) AsConfig() string {
	m := map[string]string{}
	for k, v := range f {
		m[path.Base(k)] = string(v)
	}
	b, _ := yaml.Marshal(m)
	return strings.TrimSuffix(string(b), "\n")
}
func (f Files) Lines(name string) []string { return strings.Split(string(f[name]), "\n") }

type apiVersions []string

func (a apiVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

func die(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "Error: "+format+"\n", args...)
	os.Exit(1)
}

// mergeValues: b's keys over a's, maps merged recursively (Helm's coalesce).
func mergeValues(a, b map[string]interface{}) map[string]interface{} {
	for k, v := range b {
		if bm, ok := v.(map[string]interface{}); ok {
			if am, ok := a[k].(map[string]interface{}); ok {
				a[k] = mergeValues(am, bm)
				continue
			}
		}
		a[k] = v
	}
	return a
}

func readYAMLMap(file string) map[string]interface{} {
	b, err := ioutil.ReadFile(file)
	if err != nil {
		die("%v", err)
	}
	m := map[string]interface{}{}
	if err := yaml.Unmarshal(b, &m); err != nil {
		die("failed to parse %s: %v", file, err)
	}
	if m == nil {
		m = map[string]interface{}{}
	}
	return m
}

func toYAML(v interface{}) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}

func fromYAML(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func fromJSON(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func validateSchema(chartDir string, values map[string]interface{}) {
	schema, err := ioutil.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if os.IsNotExist(err) {
		return
	} else if err != nil {
		die("%v", err)
	}
	doc, _ := json.Marshal(values)
	res, err := gojsonschema.Validate(gojsonschema.NewBytesLoader(schema), gojsonschema.NewBytesLoader(doc))
	if err != nil {
		die("values.schema.json: %v", err)
	}
	if !res.Valid() {
		var sb strings.Builder
		sb.WriteString("values don't meet the specifications of the schema(s) in the following chart(s):\n")
		sb.WriteString(filepath.Base(chartDir) + ":\n")
		for _, e := range res.Errors() {
			sb.WriteString("- " + e.String() + "\n")
		}
		die("%s", strings.TrimSuffix(sb.String(), "\n"))
	}
}

func main() {
	var files valueFiles
	name := flag.String("name", "release-name", "release name")
	namespace := flag.String("namespace", "default", "release namespace")
	kubeVersion := flag.String("kube-version", "v1.29.0", "Capabilities.KubeVersion")
	dumpValues := flag.Bool("dump-values", false, "print the merged values as JSON (before the schema check) and exit")
	flag.Var(&files, "f", "values file (repeatable; later ones win)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: helmrender [-f values.yaml]... [--name R] [--namespace N] CHART_DIR")
		os.Exit(2)
	}
	chartDir := flag.Arg(0)

	chart := readYAMLMap(filepath.Join(chartDir, "Chart.yaml"))
	chartName, _ := chart["name"].(string)
	// .Chart fields are capitalised in Helm (Name, Version, AppVersion, ...).
	chartObj := map[string]interface{}{}
	for k, v := range chart {
		chartObj[strings.ToUpper(k[:1])+k[1:]] = v
	}

	values := readYAMLMap(filepath.Join(chartDir, "values.yaml"))
	for _, f := range files {
		values = mergeValues(values, readYAMLMap(f))
	}
	if *dumpValues {
		b, _ := json.Marshal(values)
		fmt.Println(string(b))
		return
	}
	validateSchema(chartDir, values)

	// Every file of the chart: templates parsed, the rest in .Files.
	chartFiles := Files{}
	var tplNames []string
	tplText := map[string]string{}
	err := filepath.Walk(chartDir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(chartDir, p)
		rel = filepath.ToSlash(rel)
		b, err := ioutil.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.HasPrefix(rel, "templates/") {
			n := chartName + "/" + rel
			tplNames = append(tplNames, n)
			tplText[n] = string(b)
		} else if rel != "Chart.yaml" && rel != "values.yaml" && rel != "values.schema.json" {
			chartFiles[rel] = b
		}
		return nil
	})
	if err != nil {
		die("%v", err)
	}
	sort.Strings(tplNames)

	kv := strings.TrimPrefix(*kubeVersion, "v")
	parts := strings.SplitN(kv, ".", 3)
	caps := map[string]interface{}{
		"KubeVersion": map[string]interface{}{"Version": "v" + kv, "GitVersion": "v" + kv, "Major": parts[0], "Minor": parts[1]},
		"APIVersions": apiVersions{"v1", "apps/v1", "batch/v1", "networking.k8s.io/v1",
			"monitoring.coreos.com/v1", "kubeflow.org/v1"},
		"HelmVersion": map[string]interface{}{"Version": "v3.14.0"},
	}
	release := map[string]interface{}{"Name": *name, "Namespace": *namespace, "Service": "Helm",
		"IsInstall": true, "IsUpgrade": false, "Revision": 1}

	t := template.New("gotpl")
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env")
	delete(funcs, "expandenv")
	includedNames := map[string]int{}
	funcs["include"] = func(name string, data interface{}) (string, error) {
		if includedNames[name] > 1000 {
			return "", fmt.Errorf("rendering template has a nested reference name: %s", name)
		}
		includedNames[name]++
		defer func() { includedNames[name]-- }()
		var buf bytes.Buffer
		if err := t.ExecuteTemplate(&buf, name, data); err != nil {
			return "", err
		}
		return buf.String(), nil
	}
	funcs["tpl"] = func(text string, data interface{}) (string, error) {
		c, err := t.Clone()
		if err != nil {
			return "", err
		}
		c, err = c.New("tpl").Parse(text)
		if err != nil {
			return "", err
		}
		var buf bytes.Buffer
		if err := c.Execute(&buf, data); err != nil {
			return "", err
		}
		return strings.Replace(buf.String(), "<no value>", "", -1), nil
	}
	funcs["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return v, fmt.Errorf(msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return v, fmt.Errorf(msg)
		}
		return v, nil
	}
	funcs["toYaml"] = toYAML
	funcs["fromYaml"] = fromYAML
	funcs["fromJson"] = fromJSON
	funcs["toJson"] = func(v interface{}) string { b, _ := json.Marshal(v); return string(b) }
	funcs["lookup"] = func(string, string, string, string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil // helm template: no cluster
	}
	t.Funcs(funcs).Option("missingkey=zero")
	for _, n := range tplNames {
		if _, err := t.New(n).Parse(tplText[n]); err != nil {
			die("parse error in %q: %v", n, err)
		}
	}

	var out strings.Builder
	for _, n := range tplNames {
		base := path.Base(n)
		if strings.HasPrefix(base, "_") {
			continue
		}
		data := map[string]interface{}{
			"Values": values, "Release": release, "Chart": chartObj, "Capabilities": caps,
			"Files":    chartFiles,
			"Template": map[string]interface{}{"Name": n, "BasePath": chartName + "/templates"},
		}
		var buf bytes.Buffer
		if err := t.ExecuteTemplate(&buf, n, data); err != nil {
			die("%v", err)
		}
		s := strings.Replace(buf.String(), "<no value>", "", -1)
		if base == "NOTES.txt" { // rendered (a failing one fails), printed by helm install, not a manifest
			continue
		}
		if strings.TrimSpace(s) == "" {
			continue
		}
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", n, strings.TrimSpace(s))
	}
	fmt.Print(out.String())
}
