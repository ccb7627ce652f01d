package views

// The *_templ.go files are generated from the *.templ files by templ, pinned as a Go tool in
// go.mod (`go tool templ`), and committed; TestGeneratedFilesAreFresh fails when they are stale.
//go:generate go tool templ generate -path . -log-level error
