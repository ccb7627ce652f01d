// Package migrations holds the database schema as numbered SQL files, embedded in the binary so
// that a master always carries the schema it was built for. Files are named NNNN_title.sql and
// applied in order by store.Migrate; a file, once released, is never edited: add a new one.
package migrations

import "embed"

// FS holds the *.sql files of this folder.
//
//go:embed *.sql
var FS embed.FS
