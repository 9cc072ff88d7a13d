package dashboard

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/distflow/distflow/trace"
)

// TraceInfo names the newest step trace in Config.TraceDir.
type TraceInfo struct {
	Name    string  `json:"name"`
	Bytes   int64   `json:"bytes"`
	ModTime float64 `json:"mtime"` // Unix seconds
	URL     string  `json:"url"`
}

// latestTrace returns the newest step trace in dir, or nil: the trace
// writers' own choice (trace.Newest: trace-<step>.json with the highest
// step), else the *.json file modified last (a --trace-file of another
// name).
func latestTrace(dir string) *TraceInfo {
	if dir == "" {
		return nil
	}
	if p, err := trace.Newest(dir); err == nil && p != "" {
		if fi, err := os.Stat(p); err == nil {
			return &TraceInfo{Name: filepath.Base(p), Bytes: fi.Size(), ModTime: float64(fi.ModTime().UnixNano()) / 1e9, URL: "/trace/latest.json"}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var best *TraceInfo
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		mt := float64(fi.ModTime().UnixNano()) / 1e9
		if best == nil || mt > best.ModTime || (mt == best.ModTime && e.Name() > best.Name) {
			best = &TraceInfo{Name: e.Name(), Bytes: fi.Size(), ModTime: mt}
		}
	}
	if best != nil {
		best.URL = "/trace/latest.json"
	}
	return best
}

// tracePath is the file of the newest trace, or "".
func tracePath(dir string) string {
	t := latestTrace(dir)
	if t == nil {
		return ""
	}
	return filepath.Join(dir, t.Name)
}
