package localcluster

import "strings"

// WithoutFlag returns a copy of args without the flag name and its value,
// however written: -name value, --name value, -name=value, --name=value
// (flags after a "--" argument are not flags and are kept). It is for
// passing a launcher's arguments to its tasks without the flag that made it
// a launcher. It treats the flag as one that takes a value; call it once per
// spelling (local-cluster, local_cluster).
func WithoutFlag(args []string, name string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		flag, ok := strings.CutPrefix(a, "-")
		if ok {
			flag = strings.TrimPrefix(flag, "-")
		}
		switch {
		case ok && flag == name:
			i++ // and its value
		case ok && strings.HasPrefix(flag, name+"="):
		default:
			out = append(out, a)
		}
	}
	return out
}
