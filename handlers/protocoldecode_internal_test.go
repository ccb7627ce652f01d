package handlers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	gojson "github.com/goccy/go-json"
)

// protocolMessages are the slave protocol's messages as the handlers decode them (decodeBody).
func protocolMessages() []any {
	return []any{&joinRequest{}, &inventory{}, &heartbeat{}, &nextRequest{}, &stateUpdate{}, &logChunk{}, &logStateQuery{},
		&completion{}, &sshAuthRequest{}}
}

// fill sets v to random values of its type, with nil or empty pointers, slices and maps now and
// then, and strings with escapes, non-ASCII text and keys' own characters.
func fill(rng *rand.Rand, v reflect.Value, depth int) {
	switch v.Type() {
	case reflect.TypeFor[time.Time]():
		v.Set(reflect.ValueOf(time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)).UTC()))
		return
	case reflect.TypeFor[json.RawMessage]():
		raw := []string{`{"k":[1,"x",null]}`, `"s"`, `12.5`, `true`, `[]`}[rng.IntN(5)]
		v.Set(reflect.ValueOf(json.RawMessage(raw)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		parts := []string{"a", "GPU-0", `"`, `\`, "é", "日本", "\t", "</script>", "{", "\u2028"}
		var b strings.Builder
		for range rng.IntN(6) {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		v.SetString(b.String())
	case reflect.Bool:
		v.SetBool(rng.IntN(2) == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := v.Type().Bits()
		v.SetInt(rng.Int64N(1<<(bits-2)) - 1<<(bits-3))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(rng.Uint64N(1 << (v.Type().Bits() - 1)))
	case reflect.Float32, reflect.Float64:
		v.SetFloat([]float64{0, 87.5, -1.25, 1e-7, 3.4e12, rng.Float64() * 1000}[rng.IntN(6)])
	case reflect.Pointer:
		if depth > 4 || rng.IntN(3) == 0 {
			return
		}
		p := reflect.New(v.Type().Elem())
		fill(rng, p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		if depth > 4 || rng.IntN(4) == 0 {
			return
		}
		n := rng.IntN(4)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			fill(rng, s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Map:
		if depth > 4 || rng.IntN(3) == 0 || v.Type().Key().Kind() != reflect.String {
			return
		}
		m := reflect.MakeMap(v.Type())
		for range rng.IntN(3) {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(rng, k, depth+1)
			fill(rng, e, depth+1)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(rng, v.Field(i), depth+1)
			}
		}
	case reflect.Array:
		for i := range v.Len() {
			fill(rng, v.Index(i), depth+1)
		}
	}
}

// decodeBoth decodes doc into a new value of msg's type with each decoder.
func decodeBoth(msg any, doc []byte) (fast, std any, fastErr, stdErr error) {
	t := reflect.TypeOf(msg).Elem()
	f, s := reflect.New(t).Interface(), reflect.New(t).Interface()
	return f, s, gojson.Unmarshal(doc, f), json.Unmarshal(doc, s)
}

// The fast decoder of the protocol's messages (unmarshalProtocol) gives what encoding/json
// gives, for every message type filled with random values, written by encoding/json and again
// with its keys in other cases and with nulls, which encoding/json takes too.
func TestProtocolDecodersAgree(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	for _, msg := range protocolMessages() {
		for round := range 300 {
			v := reflect.New(reflect.TypeOf(msg).Elem())
			fill(rng, v.Elem(), 0)
			doc, err := json.Marshal(v.Interface())
			if err != nil {
				t.Fatal(err)
			}
			variants := [][]byte{doc}
			if round%3 == 0 {
				variants = append(variants, []byte(strings.ToUpper(string(doc[:2]))+string(doc[2:])), // first key in capitals
					[]byte(strings.ReplaceAll(string(doc), `:[]`, `:null`)))
			}
			for _, d := range variants {
				if checkJSON(d) != nil {
					continue
				}
				fast, std, fastErr, stdErr := decodeBoth(msg, d)
				if (fastErr == nil) != (stdErr == nil) || stdErr == nil && !reflect.DeepEqual(fast, std) {
					t.Fatalf("%T: the decoders differ on %s:\ngo-json %+v (%v)\nencoding/json %+v (%v)", msg, d, fast, fastErr, std, stdErr)
				}
			}
		}
	}
}

// Whatever plain JSON a slave sends, a message the fast decoder takes is what encoding/json
// makes of it; one it refuses is decoded again by encoding/json, which words the 400.
func FuzzProtocolDecodersAgree(f *testing.F) {
	for _, d := range []string{
		`{"instanceId":"i-1","jobs":[{"jobUuid":"5d7c3f0e-0000-4000-8000-000000000001","attempt":1,"status":"RUNNING","usage":{"cpuPercent":1.5,"memoryMiB":20,"gpus":[{"index":0,"utilPercent":87.5,"memoryUsedMiB":30211}]}}],"accepting":true}`,
		`{"instanceid":"i-1","JOBS":null,"accepting":false}`,
		`{"jobs":[{"attempt":1.5}]}`,
		`{"jobs":[{"attempt":"1"}]}`,
		`{"wait":1e9,"jobs":[]}`,
		`{"jobUuid":"x","data":"aGVsbG8=","seq":3}`,
		`{"at":"2026-11-28T00:00:00Z","exitCode":-1}`,
		`{"a":{"b":[1,2,{"c":null}]},"instanceId":"\u00e9\ud83d\ude00"}`,
	} {
		f.Add([]byte(d))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if checkJSON(doc) != nil {
			return
		}
		for _, msg := range protocolMessages() {
			fast, std, fastErr, stdErr := decodeBoth(msg, doc)
			if fastErr == nil && (stdErr != nil || !reflect.DeepEqual(fast, std)) {
				t.Fatalf("%T: go-json took %q as %+v, encoding/json as %+v (%v)", msg, doc, fast, std, stdErr)
			}
		}
	})
}

// BenchmarkDecodeHeartbeat compares the two decoders on a heartbeat of eight jobs.
func BenchmarkDecodeHeartbeat(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"instanceId":"3f9c2a7d11e04b6a","jobs":[`)
	for i := range 8 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"jobUuid":"5d7c3f0e-0000-4000-8000-%012d","attempt":1,"containerId":"%064d","status":"RUNNING",`+
			`"usage":{"cpuPercent":%d.25,"memoryMiB":%d,"gpus":[{"index":%d,"utilPercent":87.5,"memoryUsedMiB":30211}]}}`, i, i, 100+i, 2048*i, i)
	}
	sb.WriteString(`],"accepting":true}`)
	doc := []byte(sb.String())
	for _, c := range []struct {
		name   string
		decode func([]byte, any) error
	}{{"encoding-json", unmarshalStrict}, {"protocol", unmarshalProtocol}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var hb heartbeat
				if err := c.decode(doc, &hb); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Messages decoded by decodeBody keep nothing of the buffer it reads them into, which the next
// message is read into (protocolBodies): every message type, filled with random values, still
// marshals to the same JSON after a hundred other messages of its type were decoded.
func TestDecodedMessagesOutliveTheirBuffer(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 5))
	decode := func(msg any) (any, []byte) {
		v := reflect.New(reflect.TypeOf(msg).Elem())
		fill(rng, v.Elem(), 0)
		doc, err := json.Marshal(v.Interface())
		if err != nil {
			t.Fatal(err)
		}
		got := reflect.New(reflect.TypeOf(msg).Elem()).Interface().(validator)
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(doc))
		_ = decodeBody(httptest.NewRecorder(), r, got) // a refused message is decoded all the same
		after, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		return got, after
	}
	for _, msg := range protocolMessages() {
		first, want := decode(msg)
		for range 100 {
			decode(msg)
		}
		if got, _ := json.Marshal(first); !bytes.Equal(got, want) {
			t.Fatalf("%T changed after later messages were decoded:\nwas %s\nnow %s", msg, want, got)
		}
	}
}
