package bundle

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/distflow/distflow/tensor"
)

// Sentinel errors wrapped by this package's errors.
var (
	// ErrNoCheckpoint is returned by Latest when the directory holds no
	// complete and valid checkpoint.
	ErrNoCheckpoint = errors.New("no complete checkpoint")
	// ErrCorrupt is wrapped when a file of a checkpoint fails a check: a
	// checksum, a size, a header or an index that does not parse.
	ErrCorrupt = errors.New("corrupt checkpoint")
	// ErrIncomplete is wrapped when a checkpoint has no index (its writer
	// stopped before the chief wrote it) or misses a shard file.
	ErrIncomplete = errors.New("incomplete checkpoint")
	// ErrNotFound is wrapped when a variable asked for is not in a checkpoint.
	ErrNotFound = errors.New("variable not in checkpoint")
)

// castagnoli is the CRC32C table (the checksum TensorFlow's formats use).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Shard file layout (all integers little-endian):
//
//	header  magic "DFCKPT01" | u32 shard | u32 num_shards | u32 records | u32 crc32c(previous 20 bytes)
//	record  u64 body_len | body | u32 crc32c(body), once per variable, sorted by name
//	body    uvarint name_len | name | tensor encoding (dtype byte, uvarint rank, uvarint dims, raw bytes)
//
// The index names, for every variable, the offset and length of its whole
// record and the CRC32C of its body, so a reader seeks straight to the
// variables it needs.
const (
	shardMagic      = "DFCKPT01"
	shardHeaderSize = 24
	recordOverhead  = 8 + 4
)

// VariableEntry locates one saved variable: its dtype and shape, and where
// its record lies.
type VariableEntry struct {
	Name  string `json:"name"`
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
	// Shard is the index of the data file holding the record.
	Shard int `json:"shard"`
	// Offset and Length delimit the whole record (framing included).
	Offset int64 `json:"offset"`
	Length int64 `json:"length"`
	// CRC32C is the Castagnoli checksum of the record's body.
	CRC32C uint32 `json:"crc32c"`
}

// ShardInfo describes one written data file. WriteShard returns it and
// WriteIndex gathers one per shard; it marshals to JSON, which is how the
// SaveVariables op hands it from a ps task to the chief.
type ShardInfo struct {
	Shard     int    `json:"shard"`
	NumShards int    `json:"num_shards"`
	File      string `json:"file"` // base name, in the checkpoint's directory
	Size      int64  `json:"size"`
	// CRC32C is the Castagnoli checksum of the whole file.
	CRC32C    uint32          `json:"crc32c"`
	Variables []VariableEntry `json:"variables"`
}

// ShardFile returns the base name of data file shard of numShards of the
// checkpoint prefix: "model.ckpt-100.data-00000-of-00002".
func ShardFile(prefix string, shard, numShards int) string {
	return fmt.Sprintf("%s.data-%05d-of-%05d", prefix, shard, numShards)
}

// IndexFile returns the base name of the index of prefix: "model.ckpt-100.index".
func IndexFile(prefix string) string { return prefix + ".index" }

// Prefix returns the checkpoint prefix of basename at step: "model.ckpt-100".
func Prefix(basename string, step int64) string { return fmt.Sprintf("%s-%d", basename, step) }

// WriteShard writes the data file shard (of numShards) of checkpoint prefix
// in dir, atomically: a reader sees either no file or the whole file. The
// variables are written sorted by name; the tensors are only read. The
// returned ShardInfo is what WriteIndex needs from this shard.
func WriteShard(dir, prefix string, shard, numShards int, vars map[string]*tensor.Tensor) (ShardInfo, error) {
	if numShards <= 0 || shard < 0 || shard >= numShards {
		return ShardInfo{}, fmt.Errorf("checkpoint: shard %d of %d is out of range", shard, numShards)
	}
	if err := checkPrefix(prefix); err != nil {
		return ShardInfo{}, err
	}
	names := make([]string, 0, len(vars))
	for n, t := range vars {
		if n == "" || t == nil {
			return ShardInfo{}, fmt.Errorf("checkpoint: shard %d of %s: a variable has an empty name or a nil value", shard, prefix)
		}
		names = append(names, n)
	}
	sort.Strings(names)
	info := ShardInfo{Shard: shard, NumShards: numShards, File: ShardFile(prefix, shard, numShards)}
	err := writeAtomic(dir, info.File, func(f io.Writer) error {
		whole := crc32.New(castagnoli)
		w := &countingWriter{w: io.MultiWriter(f, whole)}
		var hdr [shardHeaderSize]byte
		copy(hdr[:], shardMagic)
		binary.LittleEndian.PutUint32(hdr[8:], uint32(shard))
		binary.LittleEndian.PutUint32(hdr[12:], uint32(numShards))
		binary.LittleEndian.PutUint32(hdr[16:], uint32(len(names)))
		binary.LittleEndian.PutUint32(hdr[20:], crc32.Checksum(hdr[:20], castagnoli))
		if _, err := w.Write(hdr[:]); err != nil {
			return err
		}
		for _, n := range names {
			e, err := writeRecord(w, n, vars[n])
			if err != nil {
				return err
			}
			e.Shard = shard
			info.Variables = append(info.Variables, e)
		}
		info.Size, info.CRC32C = w.n, whole.Sum32()
		return nil
	})
	if err != nil {
		return ShardInfo{}, fmt.Errorf("checkpoint: writing %s: %w", filepath.Join(dir, info.File), err)
	}
	return info, nil
}

// writeRecord writes the record of variable name and returns its entry
// (without the shard).
func writeRecord(w *countingWriter, name string, t *tensor.Tensor) (VariableEntry, error) {
	head := binary.AppendUvarint(nil, uint64(len(name)))
	head = append(head, name...)
	head = append(head, byte(t.DType()))
	head = binary.AppendUvarint(head, uint64(t.Rank()))
	for _, d := range t.Shape() {
		head = binary.AppendUvarint(head, uint64(d))
	}
	raw := t.RawBytes()
	bodyLen := int64(len(head) + len(raw))
	e := VariableEntry{
		Name: name, DType: t.DType().String(), Shape: append([]int{}, t.Shape()...),
		Offset: w.n, Length: bodyLen + recordOverhead,
	}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(bodyLen))
	h := crc32.New(castagnoli)
	h.Write(head)
	h.Write(raw)
	e.CRC32C = h.Sum32()
	var crcBuf [4]byte
	binary.LittleEndian.PutUint32(crcBuf[:], e.CRC32C)
	for _, b := range [][]byte{lenBuf[:], head, raw, crcBuf[:]} {
		if _, err := w.Write(b); err != nil {
			return e, err
		}
	}
	return e, nil
}

// readRecord reads and checks the record e of the open shard file f.
func readRecord(f io.ReaderAt, file string, e VariableEntry) (*tensor.Tensor, error) {
	if e.Length < recordOverhead || e.Offset < shardHeaderSize || e.Length > 1<<40 {
		return nil, fmt.Errorf("checkpoint: %s: variable %q: %w: bad record bounds offset %d length %d", file, e.Name, ErrCorrupt, e.Offset, e.Length)
	}
	buf := make([]byte, e.Length)
	if _, err := f.ReadAt(buf, e.Offset); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: variable %q: %w: reading %d bytes at %d: %v", file, e.Name, ErrCorrupt, e.Length, e.Offset, err)
	}
	bodyLen := binary.LittleEndian.Uint64(buf)
	if bodyLen != uint64(e.Length-recordOverhead) {
		return nil, fmt.Errorf("checkpoint: %s: variable %q: %w: record length %d, index says %d", file, e.Name, ErrCorrupt, bodyLen, e.Length-recordOverhead)
	}
	body := buf[8 : 8+bodyLen]
	sum := binary.LittleEndian.Uint32(buf[8+bodyLen:])
	if got := crc32.Checksum(body, castagnoli); got != sum || got != e.CRC32C {
		return nil, fmt.Errorf("checkpoint: %s: variable %q: %w: crc32c %08x, record says %08x, index says %08x", file, e.Name, ErrCorrupt, got, sum, e.CRC32C)
	}
	nameLen, n := binary.Uvarint(body)
	if n <= 0 || nameLen > uint64(len(body)-n) || string(body[n:n+int(nameLen)]) != e.Name {
		return nil, fmt.Errorf("checkpoint: %s: record at %d is not variable %q: %w", file, e.Offset, e.Name, ErrCorrupt)
	}
	var t tensor.Tensor
	if err := t.UnmarshalBinary(body[n+int(nameLen):]); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: variable %q: %w: %v", file, e.Name, ErrCorrupt, err)
	}
	if t.DType().String() != e.DType || !slices.Equal(t.Shape(), e.Shape) {
		return nil, fmt.Errorf("checkpoint: %s: variable %q: %w: record holds %v%v, index says %s%v", file, e.Name, ErrCorrupt, t.DType(), t.Shape(), e.DType, e.Shape)
	}
	return &t, nil
}

// checkShardFile checks a data file against its ShardInfo: size, header and
// whole-file checksum.
func checkShardFile(dir string, s ShardInfo) error {
	path := filepath.Join(dir, s.File)
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("checkpoint: %s: %w: shard %d is missing", path, ErrIncomplete, s.Shard)
		}
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if st.Size() != s.Size {
		return fmt.Errorf("checkpoint: %s: %w: size %d, index says %d", path, ErrCorrupt, st.Size(), s.Size)
	}
	h := crc32.New(castagnoli)
	r := bufio.NewReaderSize(f, 1<<16)
	var hdr [shardHeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return fmt.Errorf("checkpoint: %s: %w: header: %v", path, ErrCorrupt, err)
	}
	h.Write(hdr[:])
	if !goodHeader(hdr[:], s) {
		return fmt.Errorf("checkpoint: %s: %w: bad header", path, ErrCorrupt)
	}
	if _, err := io.Copy(h, r); err != nil {
		return fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	if got := h.Sum32(); got != s.CRC32C {
		return fmt.Errorf("checkpoint: %s: %w: crc32c %08x, index says %08x", path, ErrCorrupt, got, s.CRC32C)
	}
	return nil
}

// goodHeader reports whether hdr is the valid header of shard s.
func goodHeader(hdr []byte, s ShardInfo) bool {
	return len(hdr) == shardHeaderSize && string(hdr[:8]) == shardMagic &&
		crc32.Checksum(hdr[:20], castagnoli) == binary.LittleEndian.Uint32(hdr[20:]) &&
		binary.LittleEndian.Uint32(hdr[8:]) == uint32(s.Shard) && binary.LittleEndian.Uint32(hdr[12:]) == uint32(s.NumShards)
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
