// Command kube is the real Kubernetes control plane used by kbind's tests and demo.
//
// One binary, four roles chosen by the first argument, so the shared dependency graph of
// etcd, kube-apiserver, kube-controller-manager and kubectl is compiled and linked once:
//
//	kube etcd [etcd flags]
//	kube kube-apiserver [kube-apiserver flags]
//	kube kube-controller-manager [kube-controller-manager flags]
//	kube kubectl [kubectl args]   (for poking at the demo clusters)
package main

import (
	"fmt"
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	kubectl "k8s.io/kubectl/pkg/cmd"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kube etcd|kube-apiserver|kube-controller-manager|kubectl [flags]")
		os.Exit(2)
	}
	role, args := os.Args[1], os.Args[2:]
	switch role {
	case "etcd":
		etcdmain.Main(append([]string{"etcd"}, args...))
	case "kube-apiserver":
		cmd := apiserver.NewAPIServerCommand()
		cmd.SetArgs(args)
		os.Exit(cli.Run(cmd))
	case "kube-controller-manager":
		cmd := controllermanager.NewControllerManagerCommand()
		cmd.SetArgs(args)
		os.Exit(cli.Run(cmd))
	case "kubectl":
		cmd := kubectl.NewDefaultKubectlCommand()
		cmd.SetArgs(args)
		os.Exit(cli.Run(cmd))
	default:
		fmt.Fprintf(os.Stderr, "unknown role %q: want etcd, kube-apiserver, kube-controller-manager or kubectl\n", role)
		os.Exit(2)
	}
}
