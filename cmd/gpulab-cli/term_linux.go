//go:build linux

package main

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// isTerminal reports whether f is a terminal, so that a password is only asked for when a
// person can type it (scripts get a clear error instead of a hang).
func isTerminal(f *os.File) bool {
	var t syscall.Termios
	return ioctl(f.Fd(), syscall.TCGETS, &t) == nil
}

// readPasswordNoEcho reads one line from the terminal f with echo turned off.
func readPasswordNoEcho(f *os.File) (string, error) {
	fd := f.Fd()
	var old syscall.Termios
	if err := ioctl(fd, syscall.TCGETS, &old); err != nil {
		return "", fmt.Errorf("read terminal settings: %w", err)
	}
	quiet := old
	quiet.Lflag &^= syscall.ECHO
	quiet.Lflag |= syscall.ICANON | syscall.ISIG
	quiet.Iflag |= syscall.ICRNL
	if err := ioctl(fd, syscall.TCSETS, &quiet); err != nil {
		return "", fmt.Errorf("turn terminal echo off: %w", err)
	}
	defer func() { _ = ioctl(fd, syscall.TCSETS, &old) }()
	var line []byte
	buf := make([]byte, 1)
	for {
		n, err := f.Read(buf)
		if n == 1 {
			if buf[0] == '\n' {
				break
			}
			line = append(line, buf[0])
		}
		if err != nil {
			if len(line) > 0 {
				break
			}
			return "", fmt.Errorf("read password: %w", err)
		}
	}
	return string(line), nil
}

func ioctl(fd uintptr, req uintptr, t *syscall.Termios) error {
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, req, uintptr(unsafe.Pointer(t))); errno != 0 {
		return errno
	}
	return nil
}
