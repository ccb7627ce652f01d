package job

import (
	"fmt"
	"strings"
)

// Problem is one thing wrong with a submitted job. Path names the field in the document the user
// sent ("request.resources.cpus", "request.docker.storage[1].containerPath", or for a version 1
// document "jobDefinition.dockerImage"), so that the API can list it and the portal can show it
// next to the field. An empty Path means the document as a whole.
type Problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// String renders the problem as "path: message", the form used in error texts and logs.
func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// ValidationError lists every problem found in a job, sorted by path, so that a user fixes them
// all in one round instead of one per submission. Nothing with a ValidationError is ever stored.
type ValidationError struct {
	Problems []Problem
}

// Error joins all problems: "invalid job: request.resources.cpus: must be at least 1; ...".
func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	return "invalid job: " + strings.Join(parts, "; ")
}

// SyntaxError says that a submission is not JSON at all, and where: people edit job files by
// hand, and "line 12, column 5" is what lets them find the missing comma.
type SyntaxError struct {
	Line   int    `json:"line"`   // 1-based
	Column int    `json:"column"` // 1-based, in characters (not bytes)
	Msg    string `json:"message"`
}

// Error renders the position and the fault: "invalid JSON at line 3, column 7: ...".
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at line %d, column %d: %s", e.Line, e.Column, e.Msg)
}
