module github.com/trainq/trainq/tools/lint

go 1.26.8

require (
	github.com/kisielk/errcheck v1.30.0
	golang.org/x/tools v0.51.0
	mvdan.cc/unparam v0.0.0-20260823230713-2fa3d841b0c8
)

require (
	golang.org/x/mod v0.41.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
)
