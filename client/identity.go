package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Identities, disabling and revocation (issue 10): the caller's certificates, and for admins
// users and slaves.

// Certificate is a client certificate the master issued.
type Certificate struct {
	Serial    string     `json:"serial"`
	Kind      string     `json:"kind"`
	Owner     string     `json:"owner"`
	NotAfter  time.Time  `json:"notAfter"`
	CreatedAt time.Time  `json:"createdAt"`
	RevokedAt *time.Time `json:"revokedAt,omitempty"`
	State     string     `json:"state"`
}

// User is a user as GET users (admins) lists him.
type User struct {
	Name          string    `json:"name"`
	URN           string    `json:"urn"`
	Email         string    `json:"email"`
	EmailVerified bool      `json:"emailVerified"`
	IsAdmin       bool      `json:"isAdmin"`
	Disabled      bool      `json:"disabled"`
	Issuer        string    `json:"issuer"`
	Subject       string    `json:"subject"`
	CreatedAt     time.Time `json:"createdAt"`
}

// Certificates lists the caller's certificates (an admin's: all).
func (c *Client) Certificates(ctx context.Context) ([]Certificate, error) {
	raw, err := c.getList(ctx, "certificates", nil)
	if err != nil {
		return nil, fmt.Errorf("list certificates: %w", err)
	}
	var out []Certificate
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("decode certificates: %w", err)
	}
	return out, nil
}

// RevokeCertificate revokes a certificate by serial (revoking twice is no error).
func (c *Client) RevokeCertificate(ctx context.Context, serial string) (Certificate, error) {
	resp, err := c.do(ctx, request{method: http.MethodPost, path: "certificates/" + url.PathEscape(serial) + "/revoke", replayable: true})
	if err != nil {
		return Certificate{}, fmt.Errorf("revoke certificate %s: %w", serial, err)
	}
	var cert Certificate
	if err := json.Unmarshal(resp.body, &cert); err != nil {
		return Certificate{}, fmt.Errorf("decode answer: %w", err)
	}
	return cert, nil
}

// Users lists every user (admins).
func (c *Client) Users(ctx context.Context) ([]User, error) {
	raw, err := c.getList(ctx, "users", nil)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	var out []User
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("decode users: %w", err)
	}
	return out, nil
}

// SetUserDisabled disables or enables a user (admins).
func (c *Client) SetUserDisabled(ctx context.Context, name string, disabled bool) error {
	return c.putDisabled(ctx, "users/"+url.PathEscape(name)+"/disabled", disabled)
}

// SetSlaveDisabled disables or enables a slave (admins).
func (c *Client) SetSlaveDisabled(ctx context.Context, name string, disabled bool) error {
	return c.putDisabled(ctx, "slaves/"+url.PathEscape(name)+"/disabled", disabled)
}

func (c *Client) putDisabled(ctx context.Context, path string, disabled bool) error {
	body, _ := json.Marshal(map[string]bool{"disabled": disabled})
	if _, err := c.do(ctx, request{method: http.MethodPut, path: path, body: body, contentType: "application/json"}); err != nil {
		return fmt.Errorf("set %s: %w", path, err)
	}
	return nil
}
