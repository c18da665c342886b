package bench

import (
	"errors"
	"slices"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/chanlimit/chanlimit"
)

// Policies in YAML, through a YAML-to-JSON converter: chanlimit reads
// JSON alone and depends on no YAML package, so the converter is here,
// in the bench module, as it would be in a program's own go.mod.

// policiesYAML is a file of policies, a YAML list.
const policiesYAML = `
# policies.yaml
- name: second
  limit: 10
  window: 1s
- name: minute
  algorithm: sliding_window_log
  limit: 100
  window: 1m30s
  dry_run: true
`

// wantYAMLPolicies are policiesYAML's.
var wantYAMLPolicies = []chanlimit.Policy{
	{Name: "second", Limit: 10, Window: time.Second},
	{Name: "minute", Algorithm: "sliding_window_log", Limit: 100, Window: 90 * time.Second, DryRun: true},
}

// TestYAMLPolicies: YAMLToJSON, then ParsePolicies, then New.
func TestYAMLPolicies(t *testing.T) {
	data, err := yaml.YAMLToJSON([]byte(policiesYAML))
	if err != nil {
		t.Fatal(err)
	}
	policies, err := chanlimit.ParsePolicies(data)
	if err != nil {
		t.Fatalf("ParsePolicies(%s): %v", data, err)
	}
	if !slices.Equal(policies, wantYAMLPolicies) {
		t.Fatalf("ParsePolicies(%s) = %+v, want %+v", data, policies, wantYAMLPolicies)
	}
	r, err := chanlimit.New(chanlimit.Config{Policies: policies})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestYAMLUserStruct: sigs.k8s.io/yaml's Unmarshal converts to JSON and
// decodes with encoding/json, so a []chanlimit.Policy field of a
// program's own configuration reads from YAML too.
func TestYAMLUserStruct(t *testing.T) {
	const file = `
listen: ":8080"
policies:
  - name: second
    limit: 10
    window: 1s
  - name: minute
    algorithm: sliding_window_log
    limit: 100
    window: 1m30s
    dry_run: true
`
	var cfg struct {
		Listen   string             `json:"listen"`
		Policies []chanlimit.Policy `json:"policies"`
	}
	if err := yaml.Unmarshal([]byte(file), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != ":8080" || !slices.Equal(cfg.Policies, wantYAMLPolicies) {
		t.Fatalf("yaml.Unmarshal = %+v, want :8080 and %+v", cfg, wantYAMLPolicies)
	}
}

// TestYAMLWindowNumber: a YAML number as window (90, meant as seconds) is
// a JSON number after the conversion, which ParsePolicies refuses, saying
// to write a duration string.
func TestYAMLWindowNumber(t *testing.T) {
	data, err := yaml.YAMLToJSON([]byte("- name: minute\n  limit: 100\n  window: 90\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = chanlimit.ParsePolicies(data)
	const want = `chanlimit: invalid config: Policies[0]: window: the number 90 is not a duration, for it has no unit: write a string such as "1m30s"`
	if !errors.Is(err, chanlimit.ErrInvalidConfig) || err.Error() != want {
		t.Fatalf("ParsePolicies(%s) = %v, want %s", data, err, want)
	}
}

// TestYAMLKeysAsWritten: a key spelled otherwise ("Window") is refused
// after the conversion as in JSON; a key given twice is one the converter
// drops before chanlimit sees it (YAMLToJSON) or refuses
// (YAMLToJSONStrict).
func TestYAMLKeysAsWritten(t *testing.T) {
	data, err := yaml.YAMLToJSON([]byte("- limit: 1\n  Window: 1s\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = chanlimit.ParsePolicies(data)
	const want = `chanlimit: invalid config: Policies[0]: "Window": no such key (keys are spelled exactly: "window"): a policy's keys are "name", "algorithm", "limit", "window", "burst" and "dry_run"`
	if err == nil || err.Error() != want {
		t.Fatalf("ParsePolicies(%s) = %v, want %s", data, err, want)
	}

	twice := []byte("- limit: 1\n  window: 1s\n  limit: 2\n")
	if _, err := yaml.YAMLToJSONStrict(twice); err == nil {
		t.Fatalf("YAMLToJSONStrict(%q) accepted a key given twice", twice)
	}
}

// TestYAMLBooleanWords: YAML 1.1, which the converter reads, takes no,
// yes, on and off unquoted for booleans: a policy named no is refused
// until its name is quoted.
func TestYAMLBooleanWords(t *testing.T) {
	data, err := yaml.YAMLToJSON([]byte("- name: no\n  limit: 1\n  window: 1s\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = chanlimit.ParsePolicies(data)
	const want = `chanlimit: invalid config: Policies[0]: name: a string is needed (got false)`
	if err == nil || err.Error() != want {
		t.Fatalf("ParsePolicies(%s) = %v, want %s", data, err, want)
	}

	data, err = yaml.YAMLToJSON([]byte("- name: \"no\"\n  limit: 1\n  window: 1s\n"))
	if err != nil {
		t.Fatal(err)
	}
	policies, err := chanlimit.ParsePolicies(data)
	if want := []chanlimit.Policy{{Name: "no", Limit: 1, Window: time.Second}}; err != nil || !slices.Equal(policies, want) {
		t.Fatalf("ParsePolicies(%s) = %+v, %v; want %+v", data, policies, err, want)
	}
}
