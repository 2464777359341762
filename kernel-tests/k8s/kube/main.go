// Command kube is the test cluster's Kubernetes in one multi-call binary
// (as hyperkube was): kube-apiserver, kube-controller-manager,
// kube-scheduler, kubelet and kubectl, chosen by the name it runs under
// (cluster.sh links each name to it) or by its first argument
// (`kube kubectl get pods`). One binary is one `go build`: every package
// compiles and links once. cluster.sh build copies this file beside a
// go.mod of its own (the module proxy's k8s.io/kubernetes) and builds it
// there; it is not part of the deathwatch module.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	_ "time/tzdata" // for CronJob time zones (kube-apiserver, kube-controller-manager)

	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubectl's client auth plugins
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"          // the JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go's metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// commands are the programs of the binary, each as its upstream main
// runs it.
var commands = map[string]func() int{
	"kube-apiserver":          func() int { return cli.Run(apiserver.NewAPIServerCommand()) },
	"kube-controller-manager": func() int { return cli.Run(controllermanager.NewControllerManagerCommand()) },
	"kube-scheduler":          func() int { return cli.Run(scheduler.NewSchedulerCommand()) },
	"kubelet":                 func() int { return cli.Run(kubelet.NewKubeletCommand(context.Background())) },
	"kubectl":                 runKubectl,
}

func runKubectl() int {
	// kubectl reads its verbosity before building its command (as its own
	// main does), so that klog is set while plugins and .kuberc load.
	logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) // nolint:errcheck
	if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
		kubectlutil.CheckErr(err) // prints the error and exits non-zero
	}
	return 0
}

func main() {
	name := filepath.Base(os.Args[0])
	if _, ok := commands[name]; !ok && len(os.Args) > 1 {
		// kube NAME ARGS...: run NAME as if called by that name.
		name = os.Args[1]
		os.Args = append([]string{name}, os.Args[2:]...)
	}
	run, ok := commands[name]
	if !ok {
		names := make([]string, 0, len(commands))
		for n := range commands {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "kube: run me as one of %v (a link of that name, or `kube NAME ARGS...`)\n", names)
		os.Exit(2)
	}
	os.Exit(run())
}
