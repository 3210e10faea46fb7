//go:build pins

// The API packages the corpus is generated from, imported only under the `pins` build tag: so
// that go.mod and go.sum pin their modules (`go mod tidy` reads every build tag) while the
// generator's build compiles none of them. controller-gen loads them from source at run time.
package main

import (
	_ "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	_ "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	_ "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	_ "github.com/fluxcd/helm-controller/api/v2"
	_ "github.com/fluxcd/image-automation-controller/api/v1"
	_ "github.com/fluxcd/image-reflector-controller/api/v1"
	_ "github.com/fluxcd/kustomize-controller/api/v1"
	_ "github.com/fluxcd/notification-controller/api/v1"
	_ "github.com/fluxcd/source-controller/api/v1"
	_ "github.com/kedacore/keda/v2/apis/eventing/v1alpha1"
	_ "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	_ "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	_ "sigs.k8s.io/cluster-api/api/addons/v1beta2"
	_ "sigs.k8s.io/cluster-api/api/core/v1beta2"
	_ "sigs.k8s.io/gateway-api/apis/v1"
	_ "sigs.k8s.io/gateway-api/apisx/v1alpha1"
	_ "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)
