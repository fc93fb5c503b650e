package v1

import (
	"bytes"
	"encoding/json"
	"reflect"
)

// LogLevel is LIBCUDA_LOG_LEVEL: 0 silent, 1 errors, 2 warnings, 3 info,
// 4 debug. HAMi's chart renders it as a number (libCudaLogLevel: 1), this
// project's as a string; both read the same.
type LogLevel string

// UnmarshalJSON accepts a string or a number.
func (l *LogLevel) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*l = LogLevel(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return &json.UnmarshalTypeError{Value: jsonKind(b), Type: reflect.TypeOf(*l)}
	}
	*l = LogLevel(n.String())
	return nil
}

// Valid reports whether l is unset ("") or one of 0..4.
func (l LogLevel) Valid() bool {
	return l == "" || len(l) == 1 && l[0] >= '0' && l[0] <= '4'
}

func jsonKind(b []byte) string {
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	}
	return "value " + string(b)
}
