module github.com/distflow/distflow

go 1.26.0

require (
	golang.org/x/sys v0.49.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
