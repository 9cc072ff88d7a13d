package graph

import "errors"

// ErrNotFound is wrapped by errors about names that do not exist in a graph.
var ErrNotFound = errors.New("not found")
