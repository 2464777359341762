// The multi-call Kubernetes binary of the test cluster: a module of its
// own, so that the deathwatch module never depends on k8s.io/kubernetes.
// cluster.sh build writes the full go.mod (the module proxy's
// k8s.io/kubernetes and its staging modules) beside a copy of main.go.
module deathwatch-k8s-build

go 1.26.0
