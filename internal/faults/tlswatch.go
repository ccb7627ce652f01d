package faults

import "encoding/binary"

// TLS record content types (RFC 8446 §5.1).
const (
	recordChangeCipherSpec = 20
	recordHandshake        = 22
	recordApplicationData  = 23
)

// tls13Finished256 and tls13Finished384 are the sizes of the encrypted record that carries a TLS 1.3 client's
// Finished message: 4 bytes of handshake header, the verify data (32 bytes for SHA-256
// suites, 48 for SHA-384), 1 byte of inner content type and a 16-byte AEAD tag. No other
// client handshake record (Certificate, CertificateVerify, an empty Certificate) has either
// size, and the clients we meet (Go, OpenSSL, curl) add no record padding.
const (
	tls13Finished256 = 4 + 32 + 1 + 16
	tls13Finished384 = 4 + 48 + 1 + 16
)

// requestWatch follows the bytes a client sends and tells which of them carry a request, as
// opposed to the client's half of a TLS handshake. A Proxy drops "the reply to a request" so
// that the server has done the work; counting the server's handshake messages as a reply
// would cut connections before any request reached the server. TLS 1.3 encrypts the
// handshake's end, so the watch reads only the cleartext record headers (type and length):
//
//   - not TLS (the first byte is not a handshake record): every byte is a request;
//   - TLS 1.2: the client sends handshake records (ClientKeyExchange…) before its
//     ChangeCipherSpec; its Finished is the handshake record after it; application data
//     records follow;
//   - TLS 1.3: after the optional ChangeCipherSpec every record is "application data"; the
//     handshake ends with the record whose length is that of an encrypted Finished.
//
// A TLS 1.2 session resumption (no handshake record before ChangeCipherSpec) is read as TLS
// 1.3 and its requests are only seen if a record happens to have a Finished's length: such a
// connection is not cut, which weakens a fault but never misplaces one.
type requestWatch struct {
	records int     // records whose header has been read
	tls     bool    // decided by the first byte
	hdr     [5]byte // header being read
	hdrLen  int
	skip    int  // body bytes of the current record still to pass
	ccs     bool // the client sent ChangeCipherSpec
	tls12   bool
	done    bool // handshake over: application data records are requests
}

// feed reads the next bytes the client sent and reports whether they carry request bytes.
func (w *requestWatch) feed(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	if w.records == 0 && w.hdrLen == 0 {
		w.tls = b[0] == recordHandshake
	}
	if !w.tls {
		return true
	}
	request := false
	for len(b) > 0 {
		if w.skip > 0 {
			k := min(w.skip, len(b))
			w.skip -= k
			b = b[k:]
			continue
		}
		k := copy(w.hdr[w.hdrLen:], b)
		w.hdrLen += k
		b = b[k:]
		if w.hdrLen < len(w.hdr) {
			break
		}
		w.hdrLen = 0
		w.skip = int(binary.BigEndian.Uint16(w.hdr[3:5]))
		if w.record(w.hdr[0], w.skip) {
			request = true
		}
	}
	return request
}

// record notes one record header and reports whether the record is application data.
func (w *requestWatch) record(typ byte, length int) bool {
	w.records++
	switch {
	case w.records == 1: // the ClientHello
	case w.done:
		return typ == recordApplicationData
	case typ == recordChangeCipherSpec:
		w.ccs = true
	case typ == recordHandshake && !w.ccs:
		w.tls12 = true
	case typ == recordHandshake && w.tls12:
		w.done = true // TLS 1.2's encrypted Finished
	case typ == recordApplicationData && w.tls12:
		w.done = true // not seen in practice: the Finished comes first
		return true
	case typ == recordApplicationData:
		w.done = length == tls13Finished256 || length == tls13Finished384
	}
	return false
}
