package kubernetes

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestRBAC(t *testing.T) {
	out, err := RBAC("agents", "ServiceAccount", "controller")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(out))
	var docs []map[string]any
	for {
		var d map[string]any
		if dec.Decode(&d) != nil {
			break
		}
		docs = append(docs, d)
	}
	if len(docs) != 2 || docs[0]["kind"] != "Role" || docs[1]["kind"] != "RoleBinding" {
		t.Fatalf("documents %v", docs)
	}
	rules := docs[0]["rules"].([]any)
	if len(rules) != 2 {
		t.Fatalf("rules %v", rules)
	}
	want := map[string]string{"pods": "create,get,list,watch,delete", "pods/exec": "create,get"}
	for _, r := range rules {
		m := r.(map[string]any)
		var verbs []string
		for _, v := range m["verbs"].([]any) {
			verbs = append(verbs, v.(string))
		}
		res := m["resources"].([]any)[0].(string)
		if want[res] != strings.Join(verbs, ",") {
			t.Errorf("%s: verbs %v, want %s", res, verbs, want[res])
		}
		delete(want, res)
	}
	if len(want) != 0 {
		t.Errorf("missing rules %v", want)
	}
	sub := docs[1]["subjects"].([]any)[0].(map[string]any)
	if sub["kind"] != "ServiceAccount" || sub["name"] != "controller" || sub["namespace"] != "agents" {
		t.Errorf("subject %v", sub)
	}
	// What Probe checks is what the Role grants (watch is for clients that watch).
	for _, n := range Needed {
		res := n.Resource
		if n.Sub != "" {
			res += "/" + n.Sub
		}
		if !strings.Contains(out, res) {
			t.Errorf("Probe needs %s %s, the Role does not name it", n.Verb, res)
		}
	}
	for _, bad := range [][3]string{{"A_B", "User", "u"}, {"ns", "Robot", "u"}, {"ns", "User", ""}} {
		if _, err := RBAC(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("RBAC%v took it", bad)
		}
	}
}
