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

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-tools/pkg/crd"
	"sigs.k8s.io/controller-tools/pkg/genall"
	gatewayconsts "sigs.k8s.io/gateway-api/pkg/consts"
	"sigs.k8s.io/yaml"
)

// project is one project of the corpus and the API packages its CRDs are generated from.
type project struct {
	name     string
	packages []string
	// finish, if set, does to each generated CRD what the project's own generator adds to
	// controller-gen's output.
	finish func(*apiextensionsv1.CustomResourceDefinition)
	// drop names the files controller-gen writes that the project's own build removes (a
	// helper type it takes for a kind).
	drop []string
}

var projects = []project{
	{"gateway-api", []string{
		"sigs.k8s.io/gateway-api/apis/v1",
		"sigs.k8s.io/gateway-api/apis/v1beta1",
		"sigs.k8s.io/gateway-api/apis/v1alpha2",
		"sigs.k8s.io/gateway-api/apis/v1alpha3",
		"sigs.k8s.io/gateway-api/apisx/v1alpha1",
	}, gatewayAnnotations, nil},
	{"prometheus-operator", []string{
		"github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1",
		"github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1alpha1",
		"github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1beta1",
	}, nil, nil},
	{"cert-manager", []string{
		"github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1",
		"github.com/cert-manager/cert-manager/pkg/apis/acme/v1",
	}, nil, nil},
	{"argo-rollouts", []string{
		"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1",
	}, nil, nil},
	{"flux", []string{
		"github.com/fluxcd/source-controller/api/v1",
		"github.com/fluxcd/helm-controller/api/v2",
		"github.com/fluxcd/kustomize-controller/api/v1",
		"github.com/fluxcd/notification-controller/api/v1",
		"github.com/fluxcd/notification-controller/api/v1beta3",
		"github.com/fluxcd/image-reflector-controller/api/v1",
		"github.com/fluxcd/image-automation-controller/api/v1",
	}, nil, nil},
	{"cluster-api", []string{
		"sigs.k8s.io/cluster-api/api/core/v1beta2",
		"sigs.k8s.io/cluster-api/api/addons/v1beta2",
	}, nil, nil},
	{"keda", []string{
		"github.com/kedacore/keda/v2/apis/keda/v1alpha1",
		"github.com/kedacore/keda/v2/apis/eventing/v1alpha1",
	}, nil, []string{"keda.sh_withtriggers.yaml"}},
	{"kueue", []string{
		"sigs.k8s.io/kueue/apis/kueue/v1beta2",
	}, nil, nil},
}

// gatewayAnnotations adds the annotations Gateway API's own generator (its pkg/generator) puts
// on every CRD, from the same constants: the bundle version, and the API approval that
// Kubernetes requires of a CRD in a *.k8s.io group.
func gatewayAnnotations(crd *apiextensionsv1.CustomResourceDefinition) {
	if crd.Annotations == nil {
		crd.Annotations = map[string]string{}
	}
	crd.Annotations[gatewayconsts.BundleVersionAnnotation] = gatewayconsts.BundleVersion
	crd.Annotations[apiextensionsv1.KubeAPIApprovedAnnotation] = gatewayconsts.ApprovalLink
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
	for _, name := range p.drop {
		if err := os.Remove(filepath.Join(out, name)); err != nil {
			return err
		}
	}
	if p.finish == nil {
		return nil
	}
	files, err := filepath.Glob(filepath.Join(out, "*.yaml"))
	if err != nil {
		return err
	}
	for _, file := range files {
		if err := finishFile(file, p.finish); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
	}
	return nil
}

// finishFile rewrites one generated CRD with finish applied.
func finishFile(file string, finish func(*apiextensionsv1.CustomResourceDefinition)) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		return err
	}
	finish(&crd)
	raw, err = yaml.Marshal(&crd)
	if err != nil {
		return err
	}
	return os.WriteFile(file, raw, 0o644)
}
