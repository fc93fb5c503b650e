package fakeapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

func mediaType(ct string) string {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.TrimSpace(strings.ToLower(mt))
}

const maxBody = 4 << 20

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("read body: %v (limit %d bytes)", err, maxBody))
		return nil, false
	}
	return body, true
}

// readObject decodes a request body into obj: JSON or protobuf (client-go's clientsets send
// built-in types as protobuf); other media types get 415.
func readObject(w http.ResponseWriter, r *http.Request, obj runtime.Object) bool {
	switch ct := mediaType(r.Header.Get("Content-Type")); ct {
	case "", runtime.ContentTypeJSON, runtime.ContentTypeProtobuf:
	default:
		writeStatus(w, http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
			fmt.Sprintf("fakeapi: the body of the request was in an unknown format - accepted media types are %s and %s; got %q",
				runtime.ContentTypeJSON, runtime.ContentTypeProtobuf, ct))
		return false
	}
	body, ok := readBody(w, r)
	if !ok {
		return false
	}
	if _, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, obj); err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "decode body: "+err.Error())
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		data, _ = json.Marshal(status(code, metav1.StatusReasonInternalError, err.Error(), nil))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(data)
}

func status(code int, reason metav1.StatusReason, msg string, details *metav1.StatusDetails) *metav1.Status {
	return &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Code: int32(code), Reason: reason, Message: msg, Details: details}
}

func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	writeStatusDetails(w, code, reason, msg, nil)
}

func writeStatusDetails(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string, d *metav1.StatusDetails) {
	writeJSON(w, code, status(code, reason, msg, d))
}
