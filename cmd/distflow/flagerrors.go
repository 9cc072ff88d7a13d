package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/distflow/distflow/internal/suggest"
)

// flagError is the root command's flag error function, which every
// subcommand inherits. An unknown flag is told with the command's flag the
// user probably meant ("unknown flag --eopchs: did you mean --epochs?"),
// spelt in the user's style (--task_indx suggests --task_index, --task-indx
// --task-index); with the command that has it, when it is another command's
// flag; or else with where to look. Other errors pass unchanged. The
// returned error wraps err, so errors.As still finds *pflag.NotExistError.
func flagError(cmd *cobra.Command, err error) error {
	var ne *pflag.NotExistError
	if !errors.As(err, &ne) {
		return err
	}
	fs := cmd.Flags()
	name, what := ne.GetSpecifiedName(), ""
	if group := ne.GetSpecifiedShortnames(); group != "" {
		// -epochs: a long flag written with one dash is parsed as the
		// shorthands e, p, o, ...; suggest the long flag it may be.
		what = fmt.Sprintf("unknown shorthand flag '%s' in -%s", name, group)
		name, _, _ = strings.Cut(group, "=")
		if len(name) < 2 {
			return &suggestionError{what + ": see " + cmd.CommandPath() + " --help", err}
		}
		if fs.Lookup(name) != nil {
			return &suggestionError{fmt.Sprintf("%s: did you mean --%s?", what, name), err}
		}
	} else {
		what = "unknown flag --" + name
	}
	norm := name
	if f := fs.GetNormalizeFunc(); f != nil {
		norm = string(f(fs, name))
	}
	if m := nearestFlag(norm, fs); m != "" {
		return &suggestionError{fmt.Sprintf("%s: did you mean --%s?", what, inStyleOf(name, m)), err}
	}
	if others := commandsWithFlag(cmd, norm); len(others) > 0 {
		return &suggestionError{fmt.Sprintf("%s: it is a flag of %s, not of %s", what, strings.Join(others, " and "), cmd.CommandPath()), err}
	}
	return &suggestionError{what + ": see " + cmd.CommandPath() + " --help", err}
}

// suggestionError is a flag error told better; it unwraps to pflag's.
type suggestionError struct {
	msg string
	err error
}

func (e *suggestionError) Error() string { return e.msg }
func (e *suggestionError) Unwrap() error { return e.err }

// nearestFlag returns the name of the visible flag of fs nearest to name by
// edit distance (at most one edit for names of up to three letters, two
// beyond), else one that name abbreviates ("eps" for "epochs"), or "".
func nearestFlag(name string, fs *pflag.FlagSet) string {
	var names []string
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && f.Deprecated == "" {
			names = append(names, f.Name)
		}
	})
	return suggest.Nearest(name, names)
}

// commandsWithFlag returns the paths of the commands other than cmd that
// have a visible flag named name (normalised).
func commandsWithFlag(cmd *cobra.Command, name string) []string {
	var paths []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c != cmd && !c.Hidden {
			if f := c.Flags().Lookup(name); f != nil && !f.Hidden {
				paths = append(paths, c.CommandPath())
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(cmd.Root())
	return paths
}

// inStyleOf spells the flag name like typed: with underscores when the
// user wrote underscores and no dashes (--task_index), else as registered.
func inStyleOf(typed, name string) string {
	if strings.Contains(typed, "_") && !strings.Contains(typed, "-") {
		return strings.ReplaceAll(name, "-", "_")
	}
	return name
}
