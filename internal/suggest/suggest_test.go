package suggest

import "testing"

func TestNearest(t *testing.T) {
	flags := []string{"epochs", "steps", "batch", "task_index", "ps_hosts", "lr"}
	for _, tc := range []struct{ name, want string }{
		{"eopchs", "epochs"}, // a swap
		{"epoch", "epochs"},  // a deletion
		{"task_indx", "task_index"},
		{"ps_host", "ps_hosts"},
		{"eps", "epochs"}, // an abbreviation
		{"lx", "lr"},      // one edit for a short name
		{"xyz", ""},       // nothing close
		{"epochs", ""},    // an exact match is no suggestion
		{"", ""},
	} {
		if got := Nearest(tc.name, flags); got != tc.want {
			t.Errorf("Nearest(%q) = %q; want %q", tc.name, got, tc.want)
		}
	}
}
