// Command gpulab-cli is the command-line client of GPULab's API, command-compatible with imec
// iLab.t's Python gpulab-cli: the same commands, flags, environment variables and output
// layouts, so that users' habits and scripts keep working against this master.
//
// All of the work happens in run, which takes its arguments, environment and streams as
// parameters so that tests drive the very same code in-process.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}
