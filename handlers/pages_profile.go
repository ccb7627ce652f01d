package handlers

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/opengpulab/gpulab/mail"
	"github.com/opengpulab/gpulab/store"
	"github.com/opengpulab/gpulab/views"
)

// ProfilePage is GET /profile: the user, his projects, the API certificate download and his
// SSH public keys.
func (h *Handlers) ProfilePage(w http.ResponseWriter, r *http.Request) error {
	c, err := requirePerson(r)
	if err != nil {
		return err
	}
	v, err := h.profileView(r, c)
	if err != nil {
		return err
	}
	return h.render(w, r, http.StatusOK, views.ProfilePage(v))
}

func (h *Handlers) profileView(r *http.Request, c *Caller) (views.ProfileView, error) {
	v := views.ProfileView{Chrome: h.chrome(r, views.NavProfile), User: c.User}
	var err error
	if v.Projects, err = h.store.ListUserProjects(r.Context(), c.User.ID); err != nil {
		return v, err
	}
	if v.SSHKeys, err = h.store.ListSSHKeys(r.Context(), c.User.ID); err != nil {
		return v, err
	}
	if v.Certificates, err = h.store.ListCertificates(r.Context(), store.CertUser, c.User.Name); err != nil {
		return v, err
	}
	off, err := h.store.GetMailOff(r.Context(), c.User.ID)
	if err != nil {
		return v, err
	}
	for _, mc := range mail.Categories {
		v.Mail = append(v.Mail, views.MailCategory{Name: string(mc.Category), Label: mc.Label, On: !slices.Contains(off, string(mc.Category))})
	}
	return v, nil
}

// SetMailSettings is POST /profile/mail: the form has a checkbox "on" per category the user
// keeps; the categories left unchecked are turned off for every mail to his address.
func (h *Handlers) SetMailSettings(w http.ResponseWriter, r *http.Request) error {
	c, err := requirePerson(r)
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	on := r.PostForm["on"]
	for _, name := range on {
		if !mail.ValidCategory(name) {
			return fieldError("on", "unknown mail category %q", name)
		}
	}
	off := []string{}
	for _, mc := range mail.Categories {
		if !slices.Contains(on, string(mc.Category)) {
			off = append(off, string(mc.Category))
		}
	}
	if err := h.store.SetMailOff(r.Context(), c.User.ID, off); err != nil {
		return err
	}
	h.log.InfoContext(r.Context(), "mail settings changed", "user", c.User.Name, "off", off)
	return seeOther(w, r, "/profile#mail")
}

// DownloadCertificate is POST /profile/certificate: a new client certificate for the user,
// with its private key, in one PEM (the key encrypted when a password is given) — the file
// `gpulab-cli --cert` reads as it is. The key is made here and never stored.
func (h *Handlers) DownloadCertificate(w http.ResponseWriter, r *http.Request) error {
	c, err := requirePerson(r)
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	if h.cfg.CA == nil {
		return errorf(http.StatusServiceUnavailable, "this master cannot sign certificates")
	}
	password := r.PostForm.Get("password")
	if password != r.PostForm.Get("password2") {
		v, err := h.profileView(r, c)
		if err != nil {
			return err
		}
		v.CertError = "The two passwords differ: type the same password twice, or leave both empty."
		return h.render(w, r, http.StatusBadRequest, views.ProfilePage(v))
	}
	cert, data, err := h.issueUserCertificate(r.Context(), c.User, password)
	if err != nil {
		return err
	}
	h.log.InfoContext(r.Context(), "user certificate issued", "user", c.User.Name, "serial", cert.SerialNumber.String(),
		"encrypted", password != "", "via", c.Via)
	w.Header().Set("Content-Type", "application/x-pem-file")
	w.Header().Set("Content-Disposition", `attachment; filename="`+CertificateFileName(c.User.Name)+`"`)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	_, _ = w.Write(data)
	return nil
}

// RevokeCertificateForm is POST /profile/certificates/{serial}/revoke: the user revokes one of
// his certificates (an admin any); it is refused at its next request on every master.
func (h *Handlers) RevokeCertificateForm(w http.ResponseWriter, r *http.Request) error {
	c, err := requirePerson(r)
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	if _, err := h.revokeCertificate(r.Context(), c, r.PathValue("serial")); err != nil {
		return err
	}
	return seeOther(w, r, "/profile#cert-heading")
}

// CertificateFileName is the name the profile's certificate download is saved under.
func CertificateFileName(user string) string { return "gpulab-" + user + ".pem" }

// sshKeyTypes are the public key algorithms accepted (OpenSSH's current ones).
var sshKeyTypes = map[string]bool{
	"ssh-ed25519": true, "ssh-rsa": true,
	"ecdsa-sha2-nistp256": true, "ecdsa-sha2-nistp384": true, "ecdsa-sha2-nistp521": true,
	"sk-ssh-ed25519@openssh.com": true, "sk-ecdsa-sha2-nistp256@openssh.com": true,
}

// SSHPublicKey is a checked public key in the authorized_keys notation.
type SSHPublicKey struct {
	// Line is "type base64 [comment]" with blanks normalised; Fingerprint is SHA256:…, as
	// `ssh-keygen -l` prints it.
	Line, Type, Comment, Fingerprint string
}

// ParseSSHPublicKey checks a public key as pasted from a .pub file (one authorized_keys line,
// without options): a known type, valid base64, and a key blob that names the same type.
// A private key pasted by mistake is refused with a warning.
func ParseSSHPublicKey(s string) (SSHPublicKey, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "PRIVATE KEY") {
		return SSHPublicKey{}, errors.New("this is a private key: never share it; paste the contents of the .pub file instead")
	}
	if strings.ContainsAny(s, "\r\n") {
		return SSHPublicKey{}, errors.New("paste one key, on one line")
	}
	fields := strings.Fields(s)
	if len(fields) < 2 {
		return SSHPublicKey{}, errors.New(`expected "type key [comment]", e.g. "ssh-ed25519 AAAA… you@laptop"`)
	}
	typ := fields[0]
	if !sshKeyTypes[typ] {
		return SSHPublicKey{}, fmt.Errorf("unknown key type %q (ssh-ed25519, ecdsa-sha2-nistp256 or ssh-rsa, for example)", typ)
	}
	blob, err := base64.StdEncoding.DecodeString(fields[1])
	if err != nil {
		return SSHPublicKey{}, errors.New("the key is not valid base64: was it cut off?")
	}
	if len(blob) < 4 {
		return SSHPublicKey{}, errors.New("the key is too short: was it cut off?")
	}
	n := binary.BigEndian.Uint32(blob)
	if uint64(n) > uint64(len(blob)-4) || !bytes.Equal(blob[4:4+n], []byte(typ)) {
		return SSHPublicKey{}, fmt.Errorf("the key data is not a %s key: was it cut off or changed?", typ)
	}
	sum := sha256.Sum256(blob)
	k := SSHPublicKey{Type: typ, Comment: strings.Join(fields[2:], " "),
		Fingerprint: "SHA256:" + base64.RawStdEncoding.EncodeToString(sum[:])}
	k.Line = typ + " " + fields[1]
	if k.Comment != "" {
		k.Line += " " + k.Comment
	}
	return k, nil
}

// AddSSHKey is POST /profile/ssh-keys.
func (h *Handlers) AddSSHKey(w http.ResponseWriter, r *http.Request) error {
	c, err := requirePerson(r)
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	name, text := strings.TrimSpace(r.PostForm.Get("name")), r.PostForm.Get("public_key")
	refuse := func(status int, msg string) error {
		v, err := h.profileView(r, c)
		if err != nil {
			return err
		}
		v.KeyError, v.KeyName, v.KeyText = msg, name, text
		return h.render(w, r, status, views.ProfilePage(v))
	}
	k, err := ParseSSHPublicKey(text)
	if err != nil {
		return refuse(http.StatusBadRequest, err.Error())
	}
	if name == "" {
		name = k.Comment
	}
	if len(name) > 100 {
		return refuse(http.StatusBadRequest, "the name is too long (at most 100 characters)")
	}
	if _, err := h.store.AddSSHKey(r.Context(), c.User.ID, name, k.Line, k.Fingerprint); errors.Is(err, store.ErrConflict) {
		return refuse(http.StatusConflict, "This key ("+k.Fingerprint+") is on your profile already.")
	} else if err != nil {
		return err
	}
	h.log.InfoContext(r.Context(), "ssh key added", "user", c.User.Name, "fingerprint", k.Fingerprint)
	return seeOther(w, r, "/profile#ssh-keys")
}

// DeleteSSHKey is POST /profile/ssh-keys/{id}/delete.
func (h *Handlers) DeleteSSHKey(w http.ResponseWriter, r *http.Request) error {
	c, err := requirePerson(r)
	if err != nil {
		return err
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		return errorf(http.StatusNotFound, "no SSH key %q", r.PathValue("id"))
	}
	if err := h.store.DeleteSSHKey(r.Context(), c.User.ID, id); errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, "no SSH key %d on your profile", id)
	} else if err != nil {
		return err
	}
	return seeOther(w, r, "/profile#ssh-keys")
}
