package job

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestSplitCommand(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"   ", nil},
		{"nvidia-smi", []string{"nvidia-smi"}},
		{"echo 'Hello World!'", []string{"echo", "Hello World!"}},
		// Seed 001: bash gets the whole loop as one argument; nothing is expanded.
		{"bash -c 'nvidia-smi; for i in `seq 1 5`; do echo $i; sleep 1; done;'",
			[]string{"bash", "-c", "nvidia-smi; for i in `seq 1 5`; do echo $i; sleep 1; done;"}},
		// Seed 001: no shell runs, so the redirection is passed as arguments.
		{"/root/run-my-job.sh > /project/job-log-${GPULAB_JOB_ID}.log 2>&1",
			[]string{"/root/run-my-job.sh", ">", "/project/job-log-${GPULAB_JOB_ID}.log", "2>&1"}},
		{"  a \t b\nc  ", []string{"a", "b", "c"}},
		{`a"b c"d`, []string{"ab cd"}},
		{`'' ""`, []string{"", ""}},
		{`a ''`, []string{"a", ""}},
		{`"a \"b\" \\ \$x \` + "`" + `y\` + "`" + ` \n"`, []string{`a "b" \ $x ` + "`y`" + ` \n`}},
		{`'a \" b'`, []string{`a \" b`}},
		{`a\ b`, []string{"a b"}},
		{`\'x\'`, []string{"'x'"}},
		{`\\`, []string{`\`}},
		{"a\\\nb", []string{"ab"}},
		{"\"a\\\nb\"", []string{"ab"}},
		{`python -c "print('hi')"`, []string{"python", "-c", "print('hi')"}},
		{`echo $HOME * ~ # not a comment`, []string{"echo", "$HOME", "*", "~", "#", "not", "a", "comment"}},
		{"héllo wörld", []string{"héllo", "wörld"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := SplitCommand(tt.in)
			if err != nil {
				t.Fatalf("SplitCommand(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("SplitCommand(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestSplitCommandErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"echo 'oops", "unterminated single quote at character 6"},
		{`echo "oops`, "unterminated double quote at character 6"},
		{`echo "a\"`, "unterminated double quote"},
		{`echo \`, "backslash"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := SplitCommand(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("SplitCommand(%q) error = %v, want %q", tt.in, err, tt.want)
			}
		})
	}
}

func TestCommandArgs(t *testing.T) {
	tests := []struct {
		name string
		c    Command
		want []string
		zero bool
	}{
		{"zero", Command{}, nil, true},
		{"text", Command{Text: "echo hi"}, []string{"echo", "hi"}, false},
		{"blank text", Command{Text: "  "}, nil, false},
		{"list", Command{List: []string{"a b", "c"}, IsList: true}, []string{"a b", "c"}, false},
		{"empty list", Command{IsList: true}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.c.Args()
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Args() = %q, %v; want %q", got, err, tt.want)
			}
			if tt.c.IsZero() != tt.zero {
				t.Errorf("IsZero() = %v, want %v", tt.c.IsZero(), tt.zero)
			}
		})
	}
	if _, err := (Command{Text: "'"}).Args(); err == nil {
		t.Error("Args() of an unterminated quote: no error")
	}
}

func TestCommandJSON(t *testing.T) {
	tests := []struct {
		in   string
		want Command
	}{
		{`"echo hi"`, Command{Text: "echo hi"}},
		{`["echo", "hi"]`, Command{List: []string{"echo", "hi"}, IsList: true}},
		{`null`, Command{}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var c Command
			if err := json.Unmarshal([]byte(tt.in), &c); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c, tt.want) {
				t.Errorf("Unmarshal = %#v, want %#v", c, tt.want)
			}
			if tt.in == "null" {
				return
			}
			b, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			var back any
			var orig any
			_ = json.Unmarshal(b, &back)
			_ = json.Unmarshal([]byte(tt.in), &orig)
			if !reflect.DeepEqual(back, orig) {
				t.Errorf("Marshal = %s, want the form given: %s", b, tt.in)
			}
		})
	}
	for _, in := range []string{`3`, `[1]`, `{}`} {
		var c Command
		if err := json.Unmarshal([]byte(in), &c); err == nil {
			t.Errorf("Unmarshal(%s) accepted", in)
		}
	}
	// omitzero leaves an absent command out of the docker JSON.
	b, _ := json.Marshal(Docker{Image: "x"})
	if strings.Contains(string(b), "command") {
		t.Errorf("zero command marshalled: %s", b)
	}
}
