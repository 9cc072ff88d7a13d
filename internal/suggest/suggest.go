// Package suggest finds the name a user most likely meant: the flags,
// TF_CONFIG keys and job names of error messages' "did you mean ...?".
package suggest

// Nearest returns the candidate name most likely meant, or "" when none is
// close: the nearest by edit distance (insertions, deletions, substitutions
// and swaps of neighbours; at most one edit for names of up to three
// letters, two beyond), else the first candidate that name abbreviates (same
// first letter, the rest of name in order: "idx" for "index"; names of three
// letters or more). Ties go to the earlier candidate; an exact match is not a
// suggestion.
func Nearest(name string, candidates []string) string {
	limit := 1
	if len(name) > 3 {
		limit = 2
	}
	best, bestD := "", limit+1
	for _, c := range candidates {
		if d := editDistance(name, c); d > 0 && d < bestD {
			best, bestD = c, d
		}
	}
	if best != "" || len(name) < 3 {
		return best
	}
	for _, c := range candidates {
		if c != "" && c != name && c[0] == name[0] && isSubsequence(name, c) {
			return c
		}
	}
	return ""
}

// isSubsequence reports whether the bytes of s appear in t in order.
func isSubsequence(s, t string) bool {
	i := 0
	for j := 0; i < len(s) && j < len(t); j++ {
		if s[i] == t[j] {
			i++
		}
	}
	return i == len(s)
}

// editDistance is the optimal-string-alignment distance between a and b,
// counted in bytes.
func editDistance(a, b string) int {
	// Three rows: the one before the previous is needed for swaps.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
