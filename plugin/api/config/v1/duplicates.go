package v1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// checkDuplicateKeys walks a JSON document and refuses an object that gives
// a key twice: encoding/json keeps the last value silently, so an operator's
// first setting would be dropped without a word. The error names the object
// by its path (nodeconfig[0]) and the key.
func checkDuplicateKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := walkValue(dec, ""); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty document: the decode proper reports it
		}
		return err
	}
	return nil
}

func walkValue(dec *json.Decoder, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch d {
	case '{':
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			k, _ := kt.(string)
			if seen[k] {
				where := "the top level"
				if path != "" {
					where = path
				}
				return fmt.Errorf("%s: key %q given twice; give each key once", where, k)
			}
			seen[k] = true
			if err := walkValue(dec, join(path, k)); err != nil {
				return err
			}
		}
	case '[':
		for i := 0; dec.More(); i++ {
			if err := walkValue(dec, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	_, err = dec.Token() // the closing delimiter
	return err
}
