package v1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// decodeTolerant decodes the JSON document data into out (a pointer to a
// config struct) the way HAMi's own plugin reads the same file: fields this
// package does not know (other vendors' sections, HAMi fields this plugin has
// no use for) are dropped and returned as dotted paths for the caller's one
// warning. Two kinds of unknown field are errors instead, since they are
// typos of a field this plugin does use: a field that differs from a known
// one only in case, and a near miss of one of the names in guarded. Type
// errors name the field, what was found and how to write it.
func decodeTolerant(data []byte, out any, guarded []string) (ignored []string, err error) {
	if err := checkDuplicateKeys(data); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON object")
	}
	p := pruner{guarded: guarded}
	tree = p.prune(tree, reflect.TypeOf(out).Elem(), "")
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	pruned, err := json.Marshal(tree)
	if err != nil {
		return nil, err
	}
	dec = json.NewDecoder(bytes.NewReader(pruned))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return nil, describeTypeError(err)
	}
	return p.ignored, nil
}

type pruner struct {
	guarded []string
	ignored []string
	errs    []error
}

// prune returns v without the object keys that t has no field for.
func (p *pruner) prune(v any, t reflect.Type, path string) any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return v // a type error, reported by the typed decode
		}
		fields := jsonFields(t)
		for _, k := range sortedKeys(obj) {
			where := join(path, k)
			if ft, ok := fields[k]; ok {
				obj[k] = p.prune(obj[k], ft, where)
				continue
			}
			if known := p.nearMiss(k, fields); known != "" {
				p.errs = append(p.errs, fmt.Errorf("%s: unknown field; did you mean %q? (field names are case-sensitive)", where, known))
				continue
			}
			p.ignored = append(p.ignored, where)
			delete(obj, k)
		}
		return obj
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			return v
		}
		for i := range arr {
			arr[i] = p.prune(arr[i], t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
		return arr
	}
	return v
}

// nearMiss returns the known field that key is a typo of, or "".
func (p *pruner) nearMiss(key string, fields map[string]reflect.Type) string {
	for _, name := range sortedKeys(fields) {
		if strings.EqualFold(key, name) {
			return name
		}
	}
	for _, name := range p.guarded {
		if _, ok := fields[name]; ok && editDistance(strings.ToLower(key), strings.ToLower(name)) <= 2 {
			return name
		}
	}
	return ""
}

// jsonFields maps the JSON names of t's fields to their types, with embedded
// structs flattened as encoding/json does.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// describeTypeError turns encoding/json's type error into one that names the
// field as the file spells it and says how to write the value.
func describeTypeError(err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return err
	}
	field := te.Field
	// encoding/json names embedded structs in the path; the file does not.
	var parts []string
	for _, seg := range strings.Split(field, ".") {
		if seg != "" && seg != "NodeDefaults" {
			parts = append(parts, seg)
		}
	}
	field = strings.Join(parts, ".")
	got := te.Value
	if got == "" {
		got = "a value"
	}
	return fmt.Errorf("%s: found %s, want %s", field, got, want(te.Type))
}

func want(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeOf(LogLevel("")) {
		return "a log level 0..4, as a number or a string (libCudaLogLevel: 2)"
	}
	switch t.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number, 0 or more, without quotes (e.g. 10)"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number without quotes (e.g. 0)"
	case reflect.Float32, reflect.Float64:
		return "a number without quotes (e.g. 1.5)"
	case reflect.Bool:
		return "true or false, without quotes"
	case reflect.String:
		return "a string (quote it if it looks like a number or a boolean)"
	case reflect.Struct, reflect.Map:
		return "a mapping of fields"
	case reflect.Slice:
		return "a list"
	}
	return t.String()
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
