package job

import (
	"strings"
	"testing"
)

func TestParseImage(t *testing.T) {
	tests := []struct {
		in        string
		want      Image
		reference string
		redacted  string
	}{
		// The examples of seeds 000 and 001.
		{in: "ubuntu:bionic", want: Image{Path: "ubuntu", Tag: "bionic"}},
		{in: "debian:stable", want: Image{Path: "debian", Tag: "stable"}},
		{in: "nvidia/cuda:10.1-cudnn7-devel-ubuntu18.04", want: Image{Path: "nvidia/cuda", Tag: "10.1-cudnn7-devel-ubuntu18.04"}},
		{in: "osrf/ros:melodic-desktop-full-bionic", want: Image{Path: "osrf/ros", Tag: "melodic-desktop-full-bionic"}},
		{in: "gitlab.ilabt.imec.be:4567/ilabt/gpulab-examples/nvidia/sample:nvidia-smi",
			want: Image{Registry: "gitlab.ilabt.imec.be:4567", Path: "ilabt/gpulab-examples/nvidia/sample", Tag: "nvidia-smi"}},
		{in: "gitlab+deploy-token-3:XXXXXXXXXXXXX@gitlab.ilabt.imec.be:4567/ilabt/gpulab/sample:nvidia-smi",
			want:      Image{User: "gitlab+deploy-token-3", Password: "XXXXXXXXXXXXX", Registry: "gitlab.ilabt.imec.be:4567", Path: "ilabt/gpulab/sample", Tag: "nvidia-smi"},
			reference: "gitlab.ilabt.imec.be:4567/ilabt/gpulab/sample:nvidia-smi",
			redacted:  "gitlab+deploy-token-3:XXXX@gitlab.ilabt.imec.be:4567/ilabt/gpulab/sample:nvidia-smi"},
		{in: "gitlab.ilabt.imec.be:4567/my-public-proj/sample:v1", want: Image{Registry: "gitlab.ilabt.imec.be:4567", Path: "my-public-proj/sample", Tag: "v1"}},
		{in: "gpulab.ilabt.imec.be:5000/sample:nvidia-smi", want: Image{Registry: "gpulab.ilabt.imec.be:5000", Path: "sample", Tag: "nvidia-smi"}},
		// Other forms.
		{in: "ubuntu", want: Image{Path: "ubuntu"}},
		{in: "library/ubuntu:22.04", want: Image{Path: "library/ubuntu", Tag: "22.04"}},
		{in: "localhost/img", want: Image{Registry: "localhost", Path: "img"}},
		{in: "localhost:5000/a/b", want: Image{Registry: "localhost:5000", Path: "a/b"}},
		{in: "[::1]:5000/a:b", want: Image{Registry: "[::1]:5000", Path: "a", Tag: "b"}},
		{in: "a_b__c-e---f/g.h", want: Image{Path: "a_b__c-e---f/g.h"}},
		{in: "ubuntu@sha256:" + strings.Repeat("ab", 32), want: Image{Path: "ubuntu", Digest: "sha256:" + strings.Repeat("ab", 32)}},
		{in: "reg.io/x/y:1@sha256:" + strings.Repeat("0", 64), want: Image{Registry: "reg.io", Path: "x/y", Tag: "1", Digest: "sha256:" + strings.Repeat("0", 64)}},
		{in: "u:p@ss:w@rd@reg.io/x@sha256:" + strings.Repeat("0", 64),
			want:      Image{User: "u", Password: "p@ss:w@rd", Registry: "reg.io", Path: "x", Digest: "sha256:" + strings.Repeat("0", 64)},
			reference: "reg.io/x@sha256:" + strings.Repeat("0", 64),
			redacted:  "u:XXXX@reg.io/x@sha256:" + strings.Repeat("0", 64)},
		// Credentials for a private Docker Hub repository.
		{in: "me:secret@me/private:1", want: Image{User: "me", Password: "secret", Path: "me/private", Tag: "1"},
			reference: "me/private:1", redacted: "me:XXXX@me/private:1"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseImage(tt.in)
			if err != nil {
				t.Fatalf("ParseImage: %v", err)
			}
			if got != tt.want {
				t.Errorf("ParseImage = %+v, want %+v", got, tt.want)
			}
			ref, red := tt.reference, tt.redacted
			if ref == "" {
				ref, red = tt.in, tt.in
			}
			if got.Reference() != ref {
				t.Errorf("Reference() = %q, want %q", got.Reference(), ref)
			}
			if got.Redacted() != red {
				t.Errorf("Redacted() = %q, want %q", got.Redacted(), red)
			}
			if got.HasCredentials() != (tt.want.User != "") {
				t.Errorf("HasCredentials() = %v", got.HasCredentials())
			}
			if got.Password != "" && strings.Contains(got.String(), got.Password) {
				t.Errorf("String() shows the password: %s", got)
			}
		})
	}
}

func TestParseImageInvalid(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "empty"},
		{"<MYIMAGE>", "invalid repository name"},
		{"Ubuntu:latest", "must be lowercase"},
		{"reg.io/My/Repo", "must be lowercase"},
		{"ubuntu:", "invalid tag"},
		{"ubuntu:a/b", "invalid registry host"},
		{"ubuntu latest", "blanks"},
		{" ubuntu", "blanks"},
		{"user@reg.io/x", "user:password"},
		{":pw@reg.io/x", "user:password"},
		{"user:@reg.io/x", "user:password"},
		{"u:p@", "no repository"},
		{"reg.io/", "no repository name"},
		{"a//b", "empty path component"},
		{"bad_host.io:port/x", "invalid registry host"},
		{"-x", "invalid repository name"},
		{"x:" + strings.Repeat("t", 129), "invalid tag"},
		{"r.io/" + strings.Repeat("a", 260), "longer than 255"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := ParseImage(tt.in)
			if err == nil {
				t.Fatalf("ParseImage(%q) accepted", tt.in)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
		})
	}
	t.Run("password never in the error", func(t *testing.T) {
		_, err := ParseImage("me:Sup3rSecret@reg.io/Bad/Name")
		if err == nil || strings.Contains(err.Error(), "Sup3rSecret") {
			t.Errorf("error = %v", err)
		}
	})
}

func TestRedactImage(t *testing.T) {
	tests := []struct{ in, want string }{
		{"debian:stable", "debian:stable"},
		{"u:secret@reg.io/x:1", "u:XXXX@reg.io/x:1"},
		// Strings that do not parse are redacted too.
		{"u:secret@reg.io/Bad:1", "u:XXXX@reg.io/Bad:1"},
		{"u:s@c:ret@reg.io/Bad", "u:XXXX@reg.io/Bad"},
		{"Bad/Name", "Bad/Name"},
	}
	for _, tt := range tests {
		if got := redactImage(tt.in); got != tt.want {
			t.Errorf("redactImage(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
