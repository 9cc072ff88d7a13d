package checkpoint

import "github.com/distflow/distflow/checkpoint/bundle"

// The file format and the directory (package bundle, which the Save and
// Restore kernels use without the graph builders here), under the names
// this package has always had.

// Sentinel errors: see package bundle.
var (
	ErrNoCheckpoint = bundle.ErrNoCheckpoint
	ErrCorrupt      = bundle.ErrCorrupt
	ErrIncomplete   = bundle.ErrIncomplete
	ErrNotFound     = bundle.ErrNotFound
)

// StateFile is bundle.StateFile.
const StateFile = bundle.StateFile

type (
	// VariableEntry is bundle.VariableEntry.
	VariableEntry = bundle.VariableEntry
	// ShardInfo is bundle.ShardInfo.
	ShardInfo = bundle.ShardInfo
	// Index is bundle.Index.
	Index = bundle.Index
	// VerifyCache is bundle.VerifyCache.
	VerifyCache = bundle.VerifyCache
)

// Functions of package bundle.
var (
	ShardFile     = bundle.ShardFile
	IndexFile     = bundle.IndexFile
	Prefix        = bundle.Prefix
	WriteShard    = bundle.WriteShard
	WriteIndex    = bundle.WriteIndex
	ReadIndex     = bundle.ReadIndex
	Read          = bundle.Read
	ReadVariables = bundle.ReadVariables
	ParsePrefix   = bundle.ParsePrefix
	Latest        = bundle.Latest
	FindLatest    = bundle.FindLatest
	Verify        = bundle.Verify
	Retain        = bundle.Retain
	RetainLog     = bundle.RetainLog
	RetainCached  = bundle.RetainCached
	ReadState     = bundle.ReadState
)
