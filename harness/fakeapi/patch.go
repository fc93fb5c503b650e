package fakeapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// applyPatch applies a PATCH body of the given content type to m. It returns code 0 on success,
// else the HTTP status, reason and message to answer with; m is then unspecified.
func applyPatch(contentType string, body []byte, m *metav1.ObjectMeta) (int, metav1.StatusReason, string) {
	var err error
	switch types.PatchType(mediaType(contentType)) {
	case types.MergePatchType, types.StrategicMergePatchType:
		err = mergePatch(body, m)
	case types.JSONPatchType:
		err = jsonPatch(body, m)
	default:
		return http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
			fmt.Sprintf("fakeapi: the body of the request was in an unknown format - accepted media types are "+
				"%s, %s and %s; got %q", types.MergePatchType, types.StrategicMergePatchType, types.JSONPatchType, contentType)
	}
	if err != nil {
		if c, ok := err.(conflict); ok {
			return http.StatusConflict, metav1.StatusReasonConflict, string(c)
		}
		return http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "fakeapi: " + err.Error()
	}
	return 0, "", ""
}

type conflict string

func (c conflict) Error() string { return string(c) }

func metaMap(m *metav1.ObjectMeta, field string) *map[string]string {
	if field == "labels" {
		return &m.Labels
	}
	return &m.Annotations
}

// mergePatch applies an RFC 7386 merge patch restricted to metadata.annotations and
// metadata.labels (a strategic merge patch is the same for these string maps): a string sets a key,
// null removes it, null for the whole map clears it. metadata.resourceVersion, when present, must
// equal the object's (optimistic concurrency, as the API server checks it).
func mergePatch(body []byte, m *metav1.ObjectMeta) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return fmt.Errorf("merge patch: %w", err)
	}
	for k := range top {
		if k != "metadata" {
			return fmt.Errorf("merge patch: only metadata.annotations and metadata.labels may be patched, not %q", k)
		}
	}
	var meta map[string]json.RawMessage
	if err := json.Unmarshal(top["metadata"], &meta); err != nil {
		return fmt.Errorf("merge patch: metadata: %w", err)
	}
	for k, raw := range meta {
		switch k {
		case "resourceVersion":
			var rv string
			if err := json.Unmarshal(raw, &rv); err != nil {
				return fmt.Errorf("merge patch: metadata.resourceVersion: %w", err)
			}
			if rv != m.ResourceVersion {
				return conflict(fmt.Sprintf("Operation cannot be fulfilled on %s: the object has been modified "+
					"(resourceVersion %s, patch expects %s)", m.Name, m.ResourceVersion, rv))
			}
		case "annotations", "labels":
			dst := metaMap(m, k)
			if string(raw) == "null" {
				*dst = nil
				continue
			}
			var vals map[string]*string
			if err := json.Unmarshal(raw, &vals); err != nil {
				return fmt.Errorf("merge patch: metadata.%s: values must be strings or null: %w", k, err)
			}
			for key, v := range vals {
				if strings.HasPrefix(key, "$") {
					return fmt.Errorf("merge patch: metadata.%s: patch directive %q not supported", k, key)
				}
				if v == nil {
					delete(*dst, key)
					continue
				}
				if *dst == nil {
					*dst = map[string]string{}
				}
				(*dst)[key] = *v
			}
		default:
			return fmt.Errorf("merge patch: only metadata.annotations and metadata.labels may be patched, not metadata.%s", k)
		}
	}
	return nil
}

type jsonOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value"`
}

// jsonPatch applies an RFC 6902 JSON patch (add, replace, remove, test) whose paths are
// /metadata/annotations, /metadata/labels or one key below them. The patch is atomic.
func jsonPatch(body []byte, m *metav1.ObjectMeta) error {
	var ops []jsonOp
	if err := json.Unmarshal(body, &ops); err != nil {
		return fmt.Errorf("json patch: %w", err)
	}
	work := m.DeepCopy()
	for i, op := range ops {
		if err := applyOp(op, work); err != nil {
			return fmt.Errorf("json patch operation %d (%s %s): %w", i, op.Op, op.Path, err)
		}
	}
	m.Annotations, m.Labels = work.Annotations, work.Labels
	return nil
}

func applyOp(op jsonOp, m *metav1.ObjectMeta) error {
	rest, ok := strings.CutPrefix(op.Path, "/metadata/")
	if !ok {
		return fmt.Errorf("only /metadata/annotations and /metadata/labels may be patched")
	}
	field, key, hasKey := strings.Cut(rest, "/")
	if field != "annotations" && field != "labels" {
		return fmt.Errorf("only /metadata/annotations and /metadata/labels may be patched")
	}
	key = strings.ReplaceAll(strings.ReplaceAll(key, "~1", "/"), "~0", "~")
	dst := metaMap(m, field)
	if !hasKey {
		switch op.Op {
		case "add", "replace":
			var vals map[string]string
			if err := json.Unmarshal(op.Value, &vals); err != nil {
				return fmt.Errorf("value must be a map of strings: %w", err)
			}
			if op.Op == "replace" && *dst == nil {
				return fmt.Errorf("replace: %s does not exist", field)
			}
			*dst = vals
		case "remove":
			if *dst == nil {
				return fmt.Errorf("remove: %s does not exist", field)
			}
			*dst = nil
		case "test":
			var vals map[string]string
			if err := json.Unmarshal(op.Value, &vals); err != nil {
				return fmt.Errorf("value must be a map of strings: %w", err)
			}
			if !maps.Equal(vals, *dst) {
				return fmt.Errorf("test failed")
			}
		default:
			return fmt.Errorf("operation %q not supported (add, replace, remove, test are)", op.Op)
		}
		return nil
	}
	cur, exists := (*dst)[key]
	switch op.Op {
	case "add", "replace", "test":
		var v string
		if err := json.Unmarshal(op.Value, &v); err != nil {
			return fmt.Errorf("value must be a string: %w", err)
		}
		switch {
		case op.Op == "test":
			if !exists || cur != v {
				return fmt.Errorf("test failed: %q is %q", key, cur)
			}
		case *dst == nil:
			return fmt.Errorf("%s: parent %s does not exist", op.Op, field)
		case op.Op == "replace" && !exists:
			return fmt.Errorf("replace: %s %q does not exist", field, key)
		default:
			(*dst)[key] = v
		}
	case "remove":
		if !exists {
			return fmt.Errorf("remove: %s %q does not exist", field, key)
		}
		delete(*dst, key)
	default:
		return fmt.Errorf("operation %q not supported (add, replace, remove, test are)", op.Op)
	}
	return nil
}
