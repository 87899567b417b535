package chart

import (
	"context"
	"fmt"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	fluxchartutil "github.com/fluxcd/pkg/chartutil"
	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ComposeValues returns the values hr's chart is rendered with, composed from c (the hub, where hr
// and the ConfigMaps and Secrets its spec.valuesFrom names live) by the code helm-controller
// composes them with (fluxcd/pkg/chartutil.ChartValuesFromReferences): each reference in order,
// merged over the ones before it or set at its targetPath, an optional one missing skipped, and
// spec.values merged over them all. The chart's own defaults are merged under them by Render.
func ComposeValues(ctx context.Context, c client.Client, hr *helmv2.HelmRelease) (map[string]any, error) {
	values, err := fluxchartutil.ChartValuesFromReferences(ctx, logr.Discard(), c, hr.Namespace, hr.GetValues(), hr.Spec.ValuesFrom...)
	if err != nil {
		return nil, fmt.Errorf("composing the values of HelmRelease %s/%s: %w", hr.Namespace, hr.Name, err)
	}
	return values, nil
}
