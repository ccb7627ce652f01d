package testenv

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"mime"
	"mime/quotedprintable"
	"net/mail"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SMTPServer is a real SMTP server for tests: scripts/mailcatcher.py on Debian's aiosmtpd,
// storing each mail it receives as a file in Dir. It may be stopped and started again on the
// same port (an SMTP outage).
type SMTPServer struct {
	Host string
	Port int
	Dir  string
	// Args are more arguments of the catcher (--tls, --auth-user: see scripts/mailcatcher.py).
	Args []string
	cmd  *exec.Cmd
	done chan struct{}
	log  *SyncBuffer
}

// Mail is a mail the server received.
type Mail struct {
	File    string
	To      []string // the envelope recipients
	Subject string
	Header  mail.Header
	Body    string
}

// StartSMTP starts an SMTP server on a free port; a missing aiosmtpd skips the test (fails it
// under GPULAB_REQUIRE_SERVICES=1).
func StartSMTP(t testing.TB, args ...string) *SMTPServer {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import aiosmtpd").Run(); err != nil {
		Missing(t, "aiosmtpd (apt-get install python3-aiosmtpd)", err.Error())
	}
	s := &SMTPServer{Host: "127.0.0.1", Dir: t.TempDir(), Args: args}
	s.Start(t)
	t.Cleanup(func() { s.Stop(t) })
	return s
}

var listeningRE = regexp.MustCompile(`listening on [^:]+:(\d+)`)

// Start starts the server (again): on a free port the first time, on the same port after.
func (s *SMTPServer) Start(t testing.TB) {
	t.Helper()
	script := filepath.Join(RepoRoot(t), "scripts", "mailcatcher.py")
	var err error
	for try := 0; ; try++ {
		s.log = &SyncBuffer{}
		s.cmd = exec.Command("/usr/bin/python3", append([]string{script, "--dir", s.Dir, "--host", s.Host, "--port", fmt.Sprint(s.Port)}, s.Args...)...)
		out, perr := s.cmd.StdoutPipe()
		if perr != nil {
			t.Fatal(perr)
		}
		s.cmd.Stderr = s.log
		if err = s.cmd.Start(); err != nil {
			t.Fatalf("start the SMTP catcher: %v", err)
		}
		s.done = make(chan struct{})
		lines := make(chan string, 1)
		go func() {
			defer close(s.done)
			sc := bufio.NewScanner(out)
			first := true
			for sc.Scan() {
				if first {
					lines <- sc.Text()
					first = false
				}
				_, _ = s.log.Write([]byte(sc.Text() + "\n"))
			}
			_ = s.cmd.Wait()
			close(lines)
		}()
		select {
		case l, ok := <-lines:
			if m := listeningRE.FindStringSubmatch(l); ok && m != nil {
				if s.Port, err = strconv.Atoi(m[1]); err == nil {
					return
				}
			}
			err = fmt.Errorf("the SMTP catcher said %q: %s", l, s.log.String())
		case <-time.After(time.Minute):
			err = fmt.Errorf("the SMTP catcher did not listen within a minute: %s", s.log.String())
		}
		s.Stop(t)
		// The port of a stopped server may stay busy a moment: try again.
		if try >= 20 || s.Port == 0 {
			t.Fatal(err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Stop stops the server (an SMTP outage until Start).
func (s *SMTPServer) Stop(t testing.TB) {
	t.Helper()
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Log is what the server printed.
func (s *SMTPServer) Log() string { return s.log.String() }

// Mails returns the mails received so far, oldest first.
func (s *SMTPServer) Mails(t testing.TB) []Mail {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(s.Dir, "*.eml"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	var out []Mail
	for _, n := range names {
		f, err := os.Open(n)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := mail.ReadMessage(f)
		if err != nil {
			_ = f.Close()
			t.Fatalf("read mail %s: %v", n, err)
		}
		r := msg.Body
		switch strings.ToLower(msg.Header.Get("Content-Transfer-Encoding")) {
		case "quoted-printable":
			r = quotedprintable.NewReader(r)
		case "base64":
			r = base64.NewDecoder(base64.StdEncoding, r)
		}
		body, err := io.ReadAll(r)
		_ = f.Close()
		if err != nil {
			t.Fatalf("read mail %s: %v", n, err)
		}
		dec := new(mime.WordDecoder)
		subject, err := dec.DecodeHeader(msg.Header.Get("Subject"))
		if err != nil {
			subject = msg.Header.Get("Subject")
		}
		out = append(out, Mail{File: n, To: msg.Header["X-Envelope-To"], Subject: subject, Header: msg.Header, Body: strings.ReplaceAll(string(body), "\r\n", "\n")})
	}
	return out
}
