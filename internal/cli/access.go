package cli

import "io"

// adminAccess runs `weir admin api-key|user|group ...`.
func adminAccess(subject, action string, args []string, stdout, stderr io.Writer) error {
	return usagef("unknown admin command %q", subject+" "+action)
}
