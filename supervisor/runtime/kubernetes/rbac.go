package kubernetes

import (
	"fmt"
	"strings"
)

// RBAC is the minimal Role and RoleBinding the runtime needs in
// namespace ns for subject (kind User, Group or ServiceAccount; a
// ServiceAccount lives in ns): pods create, get, list, watch, delete
// (exec, reconcile, ls) and pods/exec create and get (the control
// stream's relay: the API server authorizes the exec's WebSocket
// upgrade, a GET, as get pods/exec, and a POST as create).
// Doctor's access review asks for exactly the verbs it uses.
func RBAC(ns, kind, subject string) (string, error) {
	if ns == "" || len(ns) > 63 || !dnsLabel().MatchString(ns) {
		return "", fmt.Errorf("--namespace %q is not a Kubernetes namespace name", ns)
	}
	switch kind {
	case "User", "Group", "ServiceAccount":
	default:
		return "", fmt.Errorf("--subject-kind %q: want User, Group or ServiceAccount", kind)
	}
	if subject == "" || strings.ContainsAny(subject, "\n\"'") {
		return "", fmt.Errorf("--subject %q: want a name", subject)
	}
	apiGroup, subNS := `  apiGroup: rbac.authorization.k8s.io
`, ""
	if kind == "ServiceAccount" {
		apiGroup, subNS = "", "  namespace: "+ns+"\n"
	}
	return `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: deathwatch-supervisor
  namespace: ` + ns + `
rules:
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["create", "get", "list", "watch", "delete"]
- apiGroups: [""]
  resources: ["pods/exec"]
  verbs: ["create", "get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: deathwatch-supervisor
  namespace: ` + ns + `
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: deathwatch-supervisor
subjects:
- kind: ` + kind + `
  name: "` + subject + `"
` + subNS + apiGroup, nil
}
