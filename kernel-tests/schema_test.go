package kerneltests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/supervisor/cli"
	"deathwatch/supervisor/hostcheck"
	"deathwatch/supervisor/reconcile"
)

// Every schema compiles, describes every field it names, and refuses
// what a consumer must be able to tell apart: no version, another
// version, an unknown field, a value outside its set, doctor's bound as
// the sentence it used to be.
func TestSchemaValidator(t *testing.T) {
	for _, name := range ktest.Schemas {
		b, err := os.ReadFile(filepath.Join(ktest.SchemaDir(), name+".v1.json"))
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, p := range undescribed(doc, name) {
			t.Errorf("%s: field %s has no description", name, p)
		}
	}
	event := `{"v":1,"event":"exited","time":"2026-01-02T03:04:05.123456789Z","instance":"ci","launch_id":"l","box":"dw-l","runtime":"native","code":0,"reason":"exited"}`
	if err := ktest.ValidateOutput(ktest.SchemaEvents, []byte(event)); err != nil {
		t.Errorf("a valid event line refused: %v", err)
	}
	for _, bad := range []struct{ schema, doc string }{
		{ktest.SchemaEvents, strings.Replace(event, `"v":1,`, "", 1)},
		{ktest.SchemaEvents, strings.Replace(event, `"v":1`, `"v":2`, 1)},
		{ktest.SchemaEvents, strings.Replace(event, `"code":0`, `"code":0,"secret":"x"`, 1)},
		{ktest.SchemaEvents, strings.Replace(event, `"exited","time"`, `"bogus","time"`, 1)},
		{ktest.SchemaEvents, strings.Replace(event, `2026-01-02T03:04:05.123456789Z`, `yesterday`, 1)},
		{ktest.SchemaLs, `[{"v":1,"box":"b","runtime":"native","journal":"started","box_state":"sleeping","owner":"alive"}]`},
		{ktest.SchemaReconcile, `{"v":1,"instance":"ci","removed":[],"closed":[]}`},
		{ktest.SchemaDoctor, `{"v":1,"runtimes":[],"cgroup":"","landlock":"","controller":"","host_watcher":{"where":"host","present":false},"posture":"required","ok":false,"bound":"a frozen controller's boxes die within 10s","bound_text":""}`},
		{ktest.SchemaProve, `{"v":1,"runtime":"native","trials":1,"rows":[{"path":"sigkill"}],"pass":true}`},
	} {
		if err := ktest.ValidateOutput(bad.schema, []byte(bad.doc)); err == nil {
			t.Errorf("%s accepted %s", bad.schema, bad.doc)
		}
	}
}

// undescribed lists the properties under doc (at path) that have no
// description.
func undescribed(doc any, path string) []string {
	var out []string
	switch d := doc.(type) {
	case map[string]any:
		if props, ok := d["properties"].(map[string]any); ok {
			for k, p := range props {
				if pm, ok := p.(map[string]any); !ok || pm["description"] == nil {
					out = append(out, path+"."+k)
				}
			}
		}
		for k, v := range d {
			out = append(out, undescribed(v, path+"/"+k)...)
		}
	case []any:
		for i, v := range d {
			out = append(out, undescribed(v, fmt.Sprintf("%s[%d]", path, i))...)
		}
	}
	return out
}

// Each machine output of a real native launch validates against its
// schema: the events of a launch, ls (open and --all), reconcile (and
// --prune), doctor, and prove-deathwatch with one trial per path.
func TestSchemaOutputs(t *testing.T) {
	r := rigs(t, "native")[0]
	r.setup(t)
	events := filepath.Join(r.Dir, "events.jsonl")
	if res := runCmd(r.exec(nil, r.Instance, events, "--", "true")); res.code != 0 {
		t.Fatalf("exec: exit %d: %s", res.code, res.stderr)
	}
	b, err := os.ReadFile(events)
	if err != nil || len(b) == 0 {
		t.Fatalf("no events: %v", err)
	}
	ktest.CheckEvents(t, b)

	if code, rows, stderr := supervisorJSON[[]cli.LsRow](r, "--instance", r.Instance, "--journal", r.JournalDir(), "ls", "--json", "--all"); code != 0 || len(rows) != 1 || rows[0].Journal != "removed" {
		t.Errorf("ls --all: exit %d, rows %+v (%s)", code, rows, stderr)
	}
	if code, _, stderr := supervisorJSON[reconcile.Report](r, "--instance", r.Instance, "--journal", r.JournalDir(), "reconcile", "--json", "--runtime", "native", "--prune", "1h"); code != 0 {
		t.Errorf("reconcile --prune 1h: exit %d (%s)", code, stderr)
	}
	if code, rep, stderr := supervisorJSON[hostcheck.DoctorReport](r, "--instance", r.Instance, "--journal", r.JournalDir(), "doctor", "--json", "--runtime", "native", "--posture", "preferred", "--skip-proof"); code != 0 || rep.V != hostcheck.DoctorVersion {
		t.Errorf("doctor: exit %d, v %d (%s)", code, rep.V, stderr)
	}
	if code, rep, stderr := r.prove("--trials", "1", "--bound", ktest.Slack.String(), "--remove-bound", (3 * ktest.Slack).String()); code != 0 || rep.V != hostcheck.ProveVersion {
		t.Errorf("prove-deathwatch: exit %d, v %d (%s)", code, rep.V, stderr)
	}
}
