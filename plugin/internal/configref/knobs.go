package configref

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// JSONFields returns the dotted paths of every field of the struct type of v, by json tag:
// inline fields are flattened, struct (and pointer to struct) fields recurse, slices of
// structs add "[]" (nodeconfig[].name).
func JSONFields(v any) []string {
	var out []string
	walkFields(reflect.TypeOf(v), "", &out)
	sort.Strings(out)
	return out
}

func walkFields(t reflect.Type, prefix string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if name != "-" && (strings.Contains(opts, "inline") || (f.Anonymous && name == "")) && ft.Kind() == reflect.Struct {
			walkFields(ft, prefix, out)
			continue
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		path := prefix + name
		switch {
		case ft.Kind() == reflect.Struct:
			walkFields(ft, path+".", out)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			walkFields(ft.Elem(), path+"[].", out)
		default:
			*out = append(*out, path)
		}
	}
}

// GoStringLiterals returns every distinct string literal with the given prefix in the non-test
// Go files under dir (relative to root), skipping testdata.
func GoStringLiterals(root, dir, prefix string) ([]string, error) {
	seen := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parse %s: %w", p, err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err == nil && strings.HasPrefix(s, prefix) && len(s) > len(prefix) {
				seen[s] = true
			}
			return true
		})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scan %s for %q literals: %w", dir, prefix, err)
	}
	return sortedKeys(seen), nil
}

// HelmValues returns every leaf of a values.yaml as a dotted path with its default rendered as
// the reference writes it: a string as is ("" when empty), anything else as compact JSON. An
// empty map or a list is a leaf.
func HelmValues(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read Helm values: %w", err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("parse Helm values %s: %w", path, err)
	}
	out := map[string]string{}
	if err := flattenValues(v, "", out); err != nil {
		return nil, fmt.Errorf("Helm values %s: %w", path, err)
	}
	return out, nil
}

func flattenValues(m map[string]any, prefix string, out map[string]string) error {
	for k, v := range m {
		path := prefix + k
		if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
			if err := flattenValues(sub, path+".", out); err != nil {
				return err
			}
			continue
		}
		s, err := RenderDefault(v)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		out[path] = s
	}
	return nil
}

// RenderDefault writes a value the way the reference's default column does.
func RenderDefault(v any) (string, error) {
	if s, ok := v.(string); ok {
		if s == "" {
			return Empty, nil
		}
		return s, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("render default: %w", err)
	}
	return string(b), nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
