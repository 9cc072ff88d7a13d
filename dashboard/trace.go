package dashboard

import (
	"os"
	"path/filepath"
	"strings"
)

// TraceInfo names the newest step trace in Config.TraceDir.
type TraceInfo struct {
	Name    string  `json:"name"`
	Bytes   int64   `json:"bytes"`
	ModTime float64 `json:"mtime"` // Unix seconds
	URL     string  `json:"url"`
}

// latestTrace returns the newest *.json file directly in dir (the rule the
// trace writers follow: one Chrome trace JSON file per --trace-steps
// recording), or nil.
func latestTrace(dir string) *TraceInfo {
	if dir == "" {
		return nil
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
