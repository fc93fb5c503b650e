package limitsfile

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
)

// Render returns the file contents for vars: one "KEY=VALUE\n" line per
// variable, keys sorted bytewise, with HAMI_LIMITS_FORMAT=1 sorted in among
// them. It rejects anything a reader could misread instead of escaping it:
// the format has no quoting, so a value with a newline would forge a line.
func Render(vars map[string]string) ([]byte, error) {
	if _, ok := vars[FormatKey]; ok {
		return nil, fmt.Errorf("render limits: %s is reserved and written by the renderer", FormatKey)
	}
	keys := make([]string, 0, len(vars)+1)
	for k, v := range vars {
		if err := validateVar(k, v); err != nil {
			return nil, fmt.Errorf("render limits: %w", err)
		}
		keys = append(keys, k)
	}
	keys = append(keys, FormatKey)
	sort.Strings(keys)

	var buf bytes.Buffer
	for _, k := range keys {
		v := FormatVersion
		if k != FormatKey {
			v = vars[k]
		}
		buf.WriteString(k)
		buf.WriteByte('=')
		buf.WriteString(v)
		buf.WriteByte('\n')
	}
	return buf.Bytes(), nil
}

func validateVar(k, v string) error {
	if !ValidKey(k) {
		return fmt.Errorf("key %q is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)", k)
	}
	if v == "" {
		return fmt.Errorf("%s: empty value", k)
	}
	if i := strings.IndexAny(v, "\n\r\x00"); i >= 0 {
		return fmt.Errorf("%s: value %q contains a forbidden byte %q (LF, CR and NUL are not allowed)", k, v, v[i])
	}
	if len(k)+1+len(v)+1 > MaxLineLen {
		return fmt.Errorf("%s: line is %d bytes, longer than %d", k, len(k)+len(v)+2, MaxLineLen)
	}
	if IsMemoryKey(k) {
		if _, err := ParseMemory(v); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		// An old reader parses with base-0 strtoul: "0100m" would be octal.
		if len(v) > 1 && v[0] == '0' && v[1] >= '0' && v[1] <= '9' {
			return fmt.Errorf("%s: memory value %q has a leading zero, which old readers parse as octal", k, v)
		}
	}
	return nil
}
