//go:build !linux

package chaos

import "context"

func awaitFile(context.Context, string, string) (string, error) { return "", supported() }
