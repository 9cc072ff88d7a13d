package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestFlagErrors runs the command in-process with a misspelt flag, which
// fails while parsing, before any command runs.
func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // the whole message
	}{
		{[]string{"train", "--eopchs", "3"}, "unknown flag --eopchs: did you mean --epochs?"},
		{[]string{"train", "--eopchs=3"}, "unknown flag --eopchs: did you mean --epochs?"},
		{[]string{"train", "--task_indx", "1"}, "unknown flag --task_indx: did you mean --task_index?"},
		{[]string{"train", "--task-indx", "1"}, "unknown flag --task-indx: did you mean --task-index?"},
		{[]string{"train", "--worker_host=a:1"}, "unknown flag --worker_host: did you mean --worker_hosts?"},
		{[]string{"train", "--jsn"}, "unknown flag --jsn: did you mean --json?"},
		{[]string{"train", "-epochs", "3"}, "unknown shorthand flag 'e' in -epochs: did you mean --epochs?"},
		{[]string{"train", "-log_every=3"}, "unknown shorthand flag 'l' in -log_every=3: did you mean --log_every?"},
		{[]string{"train", "--zzzzzz"}, "unknown flag --zzzzzz: see distflow train --help"},
		{[]string{"train", "-x"}, "unknown shorthand flag 'x' in -x: see distflow train --help"},
		{[]string{"server", "--ps_host=a:1"}, "unknown flag --ps_host: did you mean --ps_hosts?"},
		{[]string{"status", "--jsno", "h:1"}, "unknown flag --jsno: did you mean --json?"},
		{[]string{"status", "--timeuot=1s", "h:1"}, "unknown flag --timeuot: did you mean --timeout?"},
		{[]string{"status", "--epochs", "3", "h:1"}, "unknown flag --epochs: it is a flag of distflow train, not of distflow status"},
		{[]string{"--eopchs", "3"}, "unknown flag --eopchs: see distflow --help"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			root := newRootCommand()
			var out bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&out)
			root.SetArgs(tc.args)
			err := root.Execute()
			if err == nil || err.Error() != tc.want {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			var ne *pflag.NotExistError
			if !errors.As(err, &ne) {
				t.Errorf("error %v does not wrap pflag's", err)
			}
		})
	}
}

func TestNearestFlag(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	for _, n := range []string{"epochs", "steps", "lr", "log-every", "json", "secret"} {
		fs.Bool(n, false, "")
	}
	if err := fs.MarkHidden("secret"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, want string }{
		{"eopchs", "epochs"},
		{"epoch", "epochs"},
		{"eps", "epochs"}, // an abbreviation
		{"step", "steps"},
		{"lt", "lr"},
		{"x", ""},
		{"logevery", "log-every"},
		{"secrte", ""}, // hidden
		{"zzzzzz", ""},
		{"jsonn", "json"},
	} {
		if got := nearestFlag(tc.name, fs); got != tc.want {
			t.Errorf("nearestFlag(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}
