package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// mergePatch is the patch type of the annotation patch (RFC 7386: a null
// value deletes the key).
const mergePatch = types.MergePatchType

// annotationPatch returns the JSON merge patch that turns the routelet.io/
// annotations in have into want (a value routelet no longer has is
// deleted), or nil when they agree.
func annotationPatch(have, want map[string]string) ([]byte, error) {
	diff := map[string]any{}
	for _, k := range Annotations {
		w, inWant := want[k]
		h, inHave := have[k]
		switch {
		case inWant && (!inHave || h != w):
			diff[k] = w
		case !inWant && inHave:
			diff[k] = nil
		}
	}
	if len(diff) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": diff}})
	if err != nil {
		return nil, fmt.Errorf("marshal an annotation patch: %w", err)
	}
	return b, nil
}

// patchCondition sets our Node's NetworkUnavailable condition to False with
// routelet's reason: a strategic merge patch of nodes/status (conditions
// merge by type), sent as a plain PATCH, so RBAC needs only patch on
// nodes/status, no get.
func (d *Datastore) patchCondition(ctx context.Context) error {
	now := metav1.NewTime(time.Now())
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse,
		Reason: ConditionReason, Message: "routelet's dataplane is up on this node",
		LastTransitionTime: now, LastHeartbeatTime: now,
	}}}})
	if err != nil {
		return fmt.Errorf("marshal the NetworkUnavailable patch: %w", err)
	}
	if _, err := d.opts.Client.Patch(ctx, d.opts.NodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("patch NetworkUnavailable of node %s (nodes/status): %w", d.opts.NodeName, err)
	}
	return nil
}
