package handlers

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	gojson "github.com/goccy/go-json"

	"github.com/opengpulab/gpulab/job"
)

// Every body the master reads goes through readBody, and every JSON body through decodeJSON
// (the slave protocol's messages through unmarshalProtocol, the same check and errors):
// one place bounds the size (413 naming the limit), turns a body that arrives too slowly into
// 408 (the server's body deadline, web/limits.go), and refuses text that could only hurt
// (invalid UTF-8, NUL, duplicate keys, deep nesting, wrong types) with a 400 naming the field.

// readBody reads a request body of at most limit bytes.
//
// It reads as io.ReadAll does, but into a buffer of the body's announced length (and a byte,
// to meet its end) where io.ReadAll starts at 512 bytes and grows: a heartbeat of a few
// kilobytes was copied four or five times on its way in, half of what reading bodies allocated
// in B8x, where the collector is a quarter of the master's CPU. What is announced is trusted
// only up to prealloc: a body larger than that grows as it arrives, so a client cannot make
// the master set aside the whole limit with a header.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	return readBodyInto(w, r, limit, nil)
}

// readBodyInto is readBody reading into buf's array when it is large enough (decodeBody's
// pooled buffers).
func readBodyInto(w http.ResponseWriter, r *http.Request, limit int64, buf []byte) ([]byte, error) {
	rd := http.MaxBytesReader(w, r.Body, limit)
	size := int64(512)
	if n := r.ContentLength; n >= 0 {
		size = min(n+1, prealloc, limit+1)
	}
	body := buf[:0]
	if int64(cap(body)) < size {
		body = make([]byte, 0, size)
	}
	for {
		n, err := rd.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		if errors.Is(err, io.EOF) {
			return body, nil
		}
		if err != nil {
			return nil, bodyError(err)
		}
		if len(body) == cap(body) {
			body = append(body, 0)[:len(body)] // grow, as io.ReadAll does
		}
	}
}

// prealloc bounds the buffer readBody sets aside for a body on its announced length.
const prealloc = 64 << 10

// bodyError maps a failed body read: too large → 413, too slow → 408, else 400.
func bodyError(err error) error {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return errorf(http.StatusRequestEntityTooLarge, "request body larger than the limit of %d bytes", tooLarge.Limit)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errorf(http.StatusRequestTimeout, "request body not received in time: send it at once")
	}
	return errorf(http.StatusBadRequest, "read request body: %v", err)
}

// decodeJSON reads a JSON body of at most limit bytes into v, strictly: the text is checked
// as a job's is (job.CheckJSON), a value of the wrong type is a 400 naming its field (no
// "1" for 1), and only one document is accepted.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	body, err := readBody(w, r, limit)
	if err != nil {
		return err
	}
	return unmarshalStrict(body, v)
}

// unmarshalStrict is decodeJSON's check and decoding of a body already read.
func unmarshalStrict(body []byte, v any) error {
	if err := checkJSON(body); err != nil {
		return err
	}
	return unmarshalChecked(body, v)
}

// unmarshalProtocol is unmarshalStrict for the slave protocol's messages, the master's most
// frequent (5,000 slaves send 1,000 heartbeats a second): decoded by goccy/go-json, which
// decodes a heartbeat of eight jobs 7 times faster than encoding/json (50 → 7 µs on the
// bench's machine, 53.7 → 13.5 µs with the text check: BenchmarkDecodeHeartbeat; encoding/json
// was 9 % of the master's CPU in B8x), and decoded again
// by encoding/json whenever it fails, so that a bad message gets the same 400 naming its
// field. The text is checked first as every body is (job.CheckJSON: one document, no
// duplicate keys, valid UTF-8, bounded), so the two decoders see only plain JSON; they agree
// on it (TestProtocolDecodersAgree, FuzzProtocolDecodersAgree).
func unmarshalProtocol(body []byte, v any) error {
	if err := checkJSON(body); err != nil {
		return err
	}
	if err := gojson.Unmarshal(body, v); err == nil {
		return nil
	}
	reflect.ValueOf(v).Elem().SetZero()
	return unmarshalChecked(body, v)
}

// checkJSON checks a body's text (job.CheckJSON): a 400 naming what is wrong.
func checkJSON(body []byte) error {
	if err := job.CheckJSON(body, job.Limits{DocumentBytes: len(body) + 1, StringBytes: maxProtocolString, ListItems: maxProtocolList}); err != nil {
		var ve *job.ValidationError
		if errors.As(err, &ve) {
			parts := make([]string, len(ve.Problems))
			for i, p := range ve.Problems {
				parts[i] = p.String()
			}
			return &Error{Status: http.StatusBadRequest, Message: "invalid request: " + strings.Join(parts, "; "), Details: ve.Problems}
		}
		return errorf(http.StatusBadRequest, "%v", err)
	}
	return nil
}

// unmarshalChecked decodes a checked body into v with encoding/json: a value of the wrong
// type is a 400 naming its field.
func unmarshalChecked(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field := te.Field
			if field == "" {
				field = "(document)"
			}
			return fieldError(field, "must be %s, not a JSON %s", jsonKind(te.Type.Kind().String()), te.Value)
		}
		var pe *time.ParseError
		if errors.As(err, &pe) {
			return fieldError(fieldHolding(body, pe.Value), "must be a date and time in RFC 3339 format, like 2030-01-01T00:00:00Z, not %q", pe.Value)
		}
		return errorf(http.StatusBadRequest, "invalid JSON: %v", err)
	}
	return nil
}

// fieldHolding names the top-level field whose value is the string s (a time that did not
// parse: encoding/json does not say where it was).
func fieldHolding(body []byte, s string) string {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) == nil {
		for k, raw := range top {
			var v string
			if json.Unmarshal(raw, &v) == nil && v == s {
				return k
			}
		}
	}
	return "(document)"
}

// jsonKind names a Go kind the way a JSON author thinks of it.
func jsonKind(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "an integer"
	case strings.HasPrefix(kind, "float"):
		return "a number"
	case kind == "string":
		return "a string"
	case kind == "bool":
		return "true or false"
	case kind == "slice", kind == "array":
		return "a list"
	case kind == "struct", kind == "map":
		return "an object"
	}
	return "a " + kind
}

// Bounds of the JSON the master reads besides jobs (which have job.Limits): no protocol string
// or list is legitimately larger (a log chunk is one string, base64, bounded by the body).
const (
	maxProtocolString = 2 << 20
	maxProtocolList   = 10000
)

// checkText refuses a string that Postgres or a terminal would choke on: invalid UTF-8, NUL,
// or longer than limit bytes. field names it in the 400.
func checkText(field, s string, limit int) error {
	switch {
	case !utf8.ValidString(s):
		return fieldError(field, "is not valid UTF-8 text")
	case strings.ContainsRune(s, 0):
		return fieldError(field, "must not contain a NUL character")
	case len(s) > limit:
		return fieldError(field, "is %d bytes long: at most %d bytes are accepted", len(s), limit)
	}
	return nil
}

// checkForm checks every value of a parsed form with checkText (a portal form's fields are
// stored or shown: none is legitimately larger than a job document).
func checkForm(r *http.Request) error {
	for name, values := range r.PostForm {
		if err := checkText("form field", name, 256); err != nil {
			return err
		}
		for _, v := range values {
			if err := checkText(name, v, maxFormBody); err != nil {
				return err
			}
		}
	}
	return nil
}

// MaxQueryParams and MaxQueryBytes bound a query string (web checks them before any handler).
const (
	MaxQueryParams = 64
	MaxQueryBytes  = 8 << 10
)

// CheckURL refuses a path that is not valid text (a NUL or invalid UTF-8 in a job id, a slave
// name, would reach Postgres and answer 500), and a query string that is too long, has too many
// parameters, or holds a value that is not valid text; web runs it on every request.
func CheckURL(r *http.Request) error {
	if err := checkText("path", r.URL.Path, MaxQueryBytes); err != nil {
		return err
	}
	if len(r.URL.RawQuery) > MaxQueryBytes {
		return fieldError("query", "is %d bytes long: at most %d bytes are accepted", len(r.URL.RawQuery), MaxQueryBytes)
	}
	if n := strings.Count(r.URL.RawQuery, "&") + 1; r.URL.RawQuery != "" && n > MaxQueryParams {
		return fieldError("query", "has %d parameters: at most %d are accepted", n, MaxQueryParams)
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return fieldError("query", "cannot be read: %v", err)
	}
	for name, values := range q {
		if err := checkText("query parameter", name, 256); err != nil {
			return err
		}
		for _, v := range values {
			if err := checkText(name, v, MaxQueryBytes); err != nil {
				return err
			}
		}
	}
	return nil
}
