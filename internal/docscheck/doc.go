// Package docscheck holds the test behind `make docs-check`: every shell
// command shown in README.md and docs/*.md that names a make target, a Go
// test or a trainq binary is checked against the code, so that a renamed
// target, test or flag cannot leave the docs telling a reader something that
// no longer runs. It needs no server: the binaries are only asked for --help.
package docscheck
