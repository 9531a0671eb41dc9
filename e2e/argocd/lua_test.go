// Package argocd runs specpilot's Argo CD health check and resource actions in Argo CD's own Lua VM (the util/lua
// package of the argo-cd module, the code Argo CD's application controller and API server run), with the scripts as
// an admin installs them: the resource.customizations keys of examples/argocd/argocd-cm-patch.yaml. The cases are the
// upstream-layout test files (health_test.yaml, actions/action_test.yaml); tests/unit/test_argocd_actions.py keeps
// the patch and the upstream layout identical.
package argocd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	appv1 "github.com/argoproj/argo-cd/v3/pkg/apis/application/v1alpha1"
	argolua "github.com/argoproj/argo-cd/v3/util/lua"
	"github.com/argoproj/gitops-engine/pkg/health"
)

const (
	examples      = "../../examples/argocd"
	customization = examples + "/resource_customizations/specpilot.dev/SpeculativeDeployment"
	configMapKey  = "specpilot.dev_SpeculativeDeployment"
	overrideKey   = "specpilot.dev/SpeculativeDeployment"
	// The reevaluate token is the VM's clock; the expected outputs carry this value in its place.
	reevaluateAnnotation = "specpilot.dev/reevaluate"
)

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func object(t *testing.T, path string) *unstructured.Unstructured {
	t.Helper()
	obj := map[string]any{}
	readYAML(t, path, &obj)
	return &unstructured.Unstructured{Object: obj}
}

// overrides: the resource customizations as Argo CD reads them from argocd-cm (no open libraries, Argo CD's default).
func overrides(t *testing.T) map[string]appv1.ResourceOverride {
	t.Helper()
	var patch struct {
		Data map[string]string `json:"data"`
	}
	readYAML(t, filepath.Join(examples, "argocd-cm-patch.yaml"), &patch)
	override := appv1.ResourceOverride{
		HealthLua: patch.Data["resource.customizations.health."+configMapKey],
		Actions:   patch.Data["resource.customizations.actions."+configMapKey],
	}
	if override.HealthLua == "" || override.Actions == "" {
		t.Fatalf("argocd-cm-patch.yaml has no health or actions customization for %s", configMapKey)
	}
	return map[string]appv1.ResourceOverride{overrideKey: override}
}

func TestHealth(t *testing.T) {
	var cases struct {
		Tests []struct {
			InputPath    string              `json:"inputPath"`
			HealthStatus health.HealthStatus `json:"healthStatus"`
		} `json:"tests"`
	}
	readYAML(t, filepath.Join(customization, "health_test.yaml"), &cases)
	if len(cases.Tests) == 0 {
		t.Fatal("health_test.yaml has no cases")
	}
	health := argolua.ResourceHealthOverrides(overrides(t))
	for _, c := range cases.Tests {
		t.Run(c.InputPath, func(t *testing.T) {
			got, err := health.GetResourceHealth(object(t, filepath.Join(customization, c.InputPath)))
			if err != nil {
				t.Fatal(err)
			}
			if got == nil || *got != c.HealthStatus {
				t.Fatalf("health = %+v, want %+v", got, c.HealthStatus)
			}
		})
	}
}

type actionCases struct {
	DiscoveryTests []struct {
		InputPath string                 `json:"inputPath"`
		Result    []appv1.ResourceAction `json:"result"`
	} `json:"discoveryTests"`
	ActionTests []struct {
		Action             string `json:"action"`
		InputPath          string `json:"inputPath"`
		ExpectedOutputPath string `json:"expectedOutputPath"`
	} `json:"actionTests"`
}

func readActionCases(t *testing.T) actionCases {
	t.Helper()
	var cases actionCases
	readYAML(t, filepath.Join(customization, "actions", "action_test.yaml"), &cases)
	if len(cases.DiscoveryTests) == 0 || len(cases.ActionTests) == 0 {
		t.Fatal("action_test.yaml has no discovery or action cases")
	}
	return cases
}

func TestActionDiscovery(t *testing.T) {
	vm := argolua.VM{ResourceOverrides: overrides(t)}
	for _, c := range readActionCases(t).DiscoveryTests {
		t.Run(c.InputPath, func(t *testing.T) {
			obj := object(t, filepath.Join(customization, "actions", c.InputPath))
			scripts, err := vm.GetResourceActionDiscovery(obj)
			if err != nil {
				t.Fatal(err)
			}
			got, err := vm.ExecuteResourceActionDiscovery(obj, scripts)
			if err != nil {
				t.Fatal(err)
			}
			byName := func(a, b appv1.ResourceAction) int { return strings.Compare(a.Name, b.Name) }
			slices.SortFunc(got, byName)
			slices.SortFunc(c.Result, byName)
			if !reflect.DeepEqual(got, c.Result) {
				t.Fatalf("actions = %+v, want %+v", got, c.Result)
			}
		})
	}
}

func TestActions(t *testing.T) {
	vm := argolua.VM{ResourceOverrides: overrides(t)}
	for _, c := range readActionCases(t).ActionTests {
		t.Run(c.Action+"/"+c.InputPath, func(t *testing.T) {
			obj := object(t, filepath.Join(customization, "actions", c.InputPath))
			action, err := vm.GetResourceAction(obj, c.Action)
			if err != nil {
				t.Fatal(err)
			}
			started := time.Now().UTC().Truncate(time.Second)
			impacted, err := vm.ExecuteResourceAction(obj, action.ActionLua, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(impacted) != 1 || impacted[0].K8SOperation != argolua.PatchOperation {
				t.Fatalf("want one patch of the object, got %+v", impacted)
			}
			want := object(t, filepath.Join(customization, "actions", c.ExpectedOutputPath))
			got := impacted[0].UnstructuredObj
			freezeToken(t, got, want, started)
			if !reflect.DeepEqual(asJSON(t, got.Object), asJSON(t, want.Object)) {
				t.Fatalf("%s of %s:\n got %v\nwant %v", c.Action, c.InputPath, asJSON(t, got.Object), asJSON(t, want.Object))
			}
		})
	}
}

// freezeToken checks that a reevaluate token the action wrote is the VM's current UTC time in RFC 3339, then replaces
// it with the expected output's value so the rest of the object compares exactly.
func freezeToken(t *testing.T, got, want *unstructured.Unstructured, started time.Time) {
	t.Helper()
	token, ok := got.GetAnnotations()[reevaluateAnnotation]
	if !ok {
		return
	}
	at, err := time.Parse(time.RFC3339, token)
	if err != nil {
		t.Fatalf("%s=%q is not an RFC 3339 time: %v", reevaluateAnnotation, token, err)
	}
	if at.Before(started) || at.After(time.Now().Add(time.Second)) {
		t.Fatalf("%s=%q is not the current time (test started %s)", reevaluateAnnotation, token, started)
	}
	annotations := got.GetAnnotations()
	annotations[reevaluateAnnotation] = want.GetAnnotations()[reevaluateAnnotation]
	got.SetAnnotations(annotations)
}

// asJSON: the object as JSON sees it (Lua returns every number as a float64, YAML reads integers as int64).
func asJSON(t *testing.T, obj map[string]any) map[string]any {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
