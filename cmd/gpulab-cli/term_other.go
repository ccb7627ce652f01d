//go:build !linux

package main

import (
	"errors"
	"os"
)

// isTerminal reports false where terminal handling is not implemented: the password must then
// be given with -p or GPULAB_PASSWORD.
func isTerminal(*os.File) bool { return false }

func readPasswordNoEcho(*os.File) (string, error) {
	return "", errors.New("reading a password from the terminal is not supported on this system")
}
