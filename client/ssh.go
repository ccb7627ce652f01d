package client

import (
	"context"
	"fmt"
	"net/http"
)

// SSHKnownHosts fetches the host keys of the master's SSH jump host and of the slaves that
// serve SSH, in known_hosts form. It needs no certificate.
func (c *Client) SSHKnownHosts(ctx context.Context) ([]byte, error) {
	resp, err := c.do(ctx, request{method: http.MethodGet, path: "ssh/known_hosts", accept: "text/plain"})
	if err != nil {
		return nil, fmt.Errorf("get ssh host keys: %w", err)
	}
	return resp.body, nil
}
