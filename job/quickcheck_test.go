package job

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// checkLimits are the limits the tests of plainJSON use: small, so that the edges are cheap.
var checkLimits = Limits{DocumentBytes: 1 << 20, StringBytes: 16, ListItems: 5}.withDefaults()

// slowOK is what decodeDocument, the reference, says of data: accepted as it is.
func slowOK(data []byte, lim Limits) bool {
	_, problems, err := decodeDocument(data, lim)
	return err == nil && len(problems) == 0
}

// heartbeatDoc is a slave's heartbeat as it sends one: eight jobs with their usage.
func heartbeatDoc(jobs int) []byte {
	var b strings.Builder
	b.WriteString(`{"instanceId":"3f9c2a7d11e04b6a","jobs":[`)
	for i := range jobs {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"jobUuid":"5d7c3f0e-0000-4000-8000-%012d","attempt":1,"containerId":"%064d","status":"RUNNING",`+
			`"usage":{"cpuPercent":%d.25,"memoryMiB":%d,"gpus":[{"index":%d,"utilPercent":87.5,"memoryUsedMiB":30211}]}}`, i, i, 100+i, 2048*i, i)
	}
	b.WriteString(`],"accepting":true}`)
	return []byte(b.String())
}

// TestPlainJSON: plainJSON takes the documents machines send, and leaves every problem (and
// what is merely unusual) to decodeDocument; whatever it takes, decodeDocument accepts too.
func TestPlainJSON(t *testing.T) {
	long := strings.Repeat("x", 16)
	deep := strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth)
	tooDeep := strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1)
	for _, tc := range []struct {
		doc   string
		plain bool
	}{
		{`{}`, true},
		{` [ ] `, true},
		{`"` + long + `"`, true},
		{`{"a":1,"b":[1,2,3,4,5],"c":{"d":null,"e":true,"f":false},"g":-0.5e+10,"h":"é ü"}`, true},
		{`{"a":"\n\t\"\\\/\u00e9"}`, true},
		{`{"` + long + `":1}`, true},
		{deep, true},
		{`1234567890123456789012345678901234567890`, true},
		// Problems: decodeDocument names them.
		{`{"a":1,"a":2}`, false},
		{`{"a":{"b":1,"b":1}}`, false},
		{`"` + long + `x"`, false},
		{`{"` + long + `x":1}`, false},
		{`[1,2,3,4,5,6]`, false},
		{tooDeep, false},
		{`12345678901234567890123456789012345678901`, false},
		{`"a\u0000b"`, false},
		{"\"a\xffb\"", false},
		// Not JSON.
		{``, false}, {` `, false}, {`{`, false}, {`{"a"}`, false}, {`{"a":}`, false}, {`[1,]`, false},
		{`{"a":1,}`, false}, {`01`, false}, {`1.`, false}, {`-`, false}, {`.5`, false}, {`1e`, false},
		{`tru`, false}, {`truex`, false}, {`nul`, false}, {`{} {}`, false}, {"\"a\tb\"", false},
		{`"\x"`, false}, {`"\u12g4"`, false}, {`"abc`, false}, {`{'a':1}`, false}, {`[1 2]`, false},
		// Unusual but accepted by decodeDocument: left to it all the same.
		{"\xEF\xBB\xBF{}", false},
		{`{"a\u0062":1}`, false},
		{`"` + strings.Repeat(`\u00e9`, 6) + `"`, false}, // 12 bytes unescaped, counted as 18
	} {
		data := []byte(tc.doc)
		got := plainJSON(data, checkLimits)
		if got != tc.plain {
			t.Errorf("plainJSON(%q) = %v, want %v", tc.doc, got, tc.plain)
		}
		if got && !slowOK(data, checkLimits) {
			t.Errorf("plainJSON took %q, which decodeDocument refuses", tc.doc)
		}
	}
	if hb := heartbeatDoc(8); !plainJSON(hb, DefaultLimits()) {
		t.Errorf("a heartbeat is not plain: %s", hb)
	}
}

// TestPlainJSONKeepsTheMessages: CheckJSON's errors are those of decodeDocument, path and all.
func TestPlainJSONKeepsTheMessages(t *testing.T) {
	for _, doc := range []string{`{"a":{"b":1,"b":2}}`, `{"jobs":[1,2,3,4,5,6]}`, `{"s":"` + strings.Repeat("y", 17) + `"}`, `{"a":"\u0000"}`} {
		err := CheckJSON([]byte(doc), checkLimits)
		var ve *ValidationError
		if !errors.As(err, &ve) || len(ve.Problems) == 0 || ve.Problems[0].Path == "" {
			t.Errorf("CheckJSON(%s) = %v, want a problem with its path", doc, err)
		}
	}
}

// TestPlainJSONRandom: random documents, made to sit on the edges (strings of 15 to 17 bytes,
// lists of 4 to 6, keys that repeat, escapes, nesting near the bound), then bytes changed at
// random: whatever plainJSON takes, decodeDocument accepts; and a document built within the
// limits without escapes is taken (the fast path is the usual one).
func TestPlainJSONRandom(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	taken := 0
	for n := range 20000 {
		g := docGen{r: r}
		v := g.value(0)
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if g.dupKeys {
			data = []byte(strings.Replace(string(data), `"k1"`, `"k0"`, 1))
		}
		if n%2 == 1 {
			for range 1 + r.IntN(3) {
				const bytes = " {}[],:\"\\0aeu-.1\x00\xff"
				data[r.IntN(len(data))] = bytes[r.IntN(len(bytes))]
			}
		}
		fast := plainJSON(data, checkLimits)
		if fast && !slowOK(data, checkLimits) {
			t.Fatalf("plainJSON took %q, which decodeDocument refuses (seed %d)", data, seed)
		}
		if fast {
			taken++
		}
		if n%2 == 0 && g.plain && !g.dupKeys && !fast {
			t.Fatalf("plainJSON left a plain document to the slow path: %q (seed %d)", data, seed)
		}
	}
	t.Logf("%d of 20000 documents taken by the fast path", taken)
}

// docGen makes random JSON values near checkLimits's edges; plain says whether all of it is
// within the limits and written without escapes (json.Marshal escapes <, > and & too).
type docGen struct {
	r       *rand.Rand
	plain   bool
	dupKeys bool
	started bool
	budget  int // values left to make: then only scalars
}

func (g *docGen) value(depth int) any {
	if !g.started {
		g.started, g.plain, g.budget = true, true, 60
	}
	g.budget--
	kind := g.r.IntN(8)
	if (depth >= maxDepth-1 || g.budget <= 0) && kind >= 6 {
		kind = 0
	}
	if depth == 0 && g.r.IntN(50) == 0 {
		// Nesting at and past the bound.
		d := maxDepth - 1 + g.r.IntN(3)
		if d >= maxDepth {
			g.plain = false
		}
		var v any = []any{}
		for range d {
			v = []any{v}
		}
		return v
	}
	switch kind {
	case 0:
		return g.str()
	case 1:
		return g.r.NormFloat64() * 1e6
	case 2:
		return g.r.IntN(2) == 0
	case 3:
		return nil
	case 4:
		return g.r.Int64()
	case 5:
		return g.str()
	case 6:
		n := 4 + g.r.IntN(3)
		if g.r.IntN(4) == 0 {
			n = g.r.IntN(3)
		}
		if n > checkLimits.ListItems {
			g.plain = false
		}
		l := make([]any, n)
		for i := range l {
			l[i] = g.value(depth + 1)
		}
		return l
	default:
		m := map[string]any{}
		for i := range g.r.IntN(20) {
			k := fmt.Sprintf("k%d", i)
			if g.r.IntN(10) == 0 {
				k = g.str()
			}
			m[k] = g.value(depth + 1)
		}
		if _, ok := m["k1"]; ok && g.r.IntN(8) == 0 {
			if _, ok := m["k0"]; ok {
				g.dupKeys = true
			}
		}
		return m
	}
}

func (g *docGen) str() string {
	alphabet := []string{"a", "Z", "7", " ", "é", "€", "😀", "\n", "\"", "\\", "<", "\u2028", "\x00", "\x7f"}
	n := 15 + g.r.IntN(3)
	if g.r.IntN(3) == 0 {
		n = g.r.IntN(6)
	}
	var b strings.Builder
	for b.Len() < n {
		c := alphabet[g.r.IntN(4)]
		if g.r.IntN(10) == 0 {
			c = alphabet[g.r.IntN(len(alphabet))]
		}
		b.WriteString(c)
	}
	s := b.String()
	if len(s) > checkLimits.StringBytes || strings.ContainsAny(s, "\n\"\\<\u2028\x00\x7f") {
		g.plain = false // \x7f is plain JSON, but rare enough to count with the rest
	}
	return s
}

// FuzzPlainJSON: whatever plainJSON takes, decodeDocument accepts.
func FuzzPlainJSON(f *testing.F) {
	f.Add(heartbeatDoc(2))
	f.Add([]byte(`{"a":[1,2,{"b":"\u00e9"}],"c":-1.5e3}`))
	f.Add([]byte(`{"k0":1,"k1":2,"k2":3,"k3":4,"k4":5,"k5":6,"k6":7,"k7":8,"k8":9,"k9":10,"k10":11,"k11":12,"k12":13,"k13":14,"k14":15,"k15":16,"k16":17,"k0":18}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if plainJSON(data, checkLimits) && !slowOK(data, checkLimits) {
			t.Fatalf("plainJSON took %q, which decodeDocument refuses", data)
		}
	})
}

// BenchmarkCheckJSONHeartbeat is CheckJSON on a heartbeat of eight jobs, with the fast path
// (plain) and the tree decodeDocument builds (tree).
func BenchmarkCheckJSONHeartbeat(b *testing.B) {
	hb := heartbeatDoc(8)
	lim := DefaultLimits()
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := CheckJSON(hb, lim); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("tree", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, p, err := decodeDocument(hb, lim); err != nil || len(p) > 0 {
				b.Fatal(err, p)
			}
		}
	})
}
