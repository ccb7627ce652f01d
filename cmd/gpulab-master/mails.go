package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// mailList is `gpulab-master mail-list`: the outbox, newest first, so that an operator sees
// mails waiting for an SMTP server that fails, and why (attempts, last error).
func mailList(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c config
	fs := flag.NewFlagSet("mail-list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pending := fs.Bool("pending", false, "only mails not sent yet (and not given up)")
	limit := fs.Int("limit", 50, "at most this many mails")
	st, err := adminSetup(ctx, fs, &c, args, getenv)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	if *limit < 1 {
		return fmt.Errorf("%w: --limit %d: must be 1 or more", errUsage, *limit)
	}
	mails, err := st.ListMails(ctx, *limit)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCREATED\tTO\tCATEGORY\tJOB\tSTATE\tATTEMPTS\tLAST ERROR")
	for _, m := range mails {
		state := "pending"
		switch {
		case m.SentAt != nil:
			state = "sent " + m.SentAt.UTC().Format(time.DateTime)
		case m.FailedAt != nil:
			state = "given up " + m.FailedAt.UTC().Format(time.DateTime)
		}
		if *pending && state != "pending" {
			continue
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", m.ID, m.CreatedAt.UTC().Format(time.DateTime), m.Recipient, m.Category,
			shortUUID(m.JobUUID), state, m.Attempts, strings.ReplaceAll(m.LastError, "\n", " "))
	}
	return tw.Flush()
}

func shortUUID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
