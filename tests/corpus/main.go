// Writes the CRD corpus the e2e corpus test binds: controller-gen's CRD generator (the
// sigs.k8s.io/controller-tools module, as a library) run on the API packages of widely used
// projects, as those projects run it to build their own CRDs. Nothing is copied out of a module
// archive and no CRD is written by hand: every CRD comes from the projects' Go types and their
// kubebuilder markers.
//
// Usage: corpus OUTDIR. Writes OUTDIR/<project>/<group>_<plural>.yaml for each project.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/controller-tools/pkg/crd"
	"sigs.k8s.io/controller-tools/pkg/genall"

	// The API packages, imported so that go.mod pins them and `go build` fetches them.
	_ "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	_ "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	_ "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	_ "github.com/fluxcd/helm-controller/api/v2"
	_ "github.com/fluxcd/kustomize-controller/api/v1"
	_ "github.com/fluxcd/source-controller/api/v1"
	_ "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	_ "sigs.k8s.io/cluster-api/api/addons/v1beta2"
	_ "sigs.k8s.io/cluster-api/api/core/v1beta2"
	_ "sigs.k8s.io/gateway-api/apis/v1"
)

// project is one project of the corpus and the API packages its CRDs are generated from.
type project struct {
	name     string
	packages []string
}

var projects = []project{
	{"gateway-api", []string{
		"sigs.k8s.io/gateway-api/apis/v1",
		"sigs.k8s.io/gateway-api/apis/v1beta1",
		"sigs.k8s.io/gateway-api/apis/v1alpha2",
		"sigs.k8s.io/gateway-api/apis/v1alpha3",
	}},
	{"prometheus-operator", []string{
		"github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1",
		"github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1alpha1",
		"github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1beta1",
	}},
	{"cert-manager", []string{
		"github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1",
		"github.com/cert-manager/cert-manager/pkg/apis/acme/v1",
	}},
	{"argo-rollouts", []string{
		"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1",
	}},
	{"flux", []string{
		"github.com/fluxcd/source-controller/api/v1",
		"github.com/fluxcd/helm-controller/api/v2",
		"github.com/fluxcd/kustomize-controller/api/v1",
	}},
	{"cluster-api", []string{
		"sigs.k8s.io/cluster-api/api/core/v1beta2",
		"sigs.k8s.io/cluster-api/api/addons/v1beta2",
	}},
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: corpus OUTDIR")
		os.Exit(2)
	}
	failed := false
	for _, p := range projects {
		if err := generate(p, filepath.Join(os.Args[1], p.name)); err != nil {
			fmt.Fprintf(os.Stderr, "corpus: %s: %v\n", p.name, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// generate runs the CRD generator on the project's packages, as `controller-gen crd
// paths=...  output:crd:dir=OUT` would.
func generate(p project, out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var gen genall.Generator = crd.Generator{}
	runtime, err := genall.Generators{&gen}.ForRoots(p.packages...)
	if err != nil {
		return err
	}
	runtime.OutputRules = genall.OutputRules{Default: genall.OutputToDirectory(out)}
	if runtime.Run() {
		return fmt.Errorf("controller-gen reported errors")
	}
	return nil
}
