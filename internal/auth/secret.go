package auth

import (
	"fmt"
	"os"
)

// CheckSecretFile refuses a file holding keys or secrets that users other
// than its owner (and group) could read: such a secret must be assumed
// leaked. The error names the file and the fix.
func CheckSecretFile(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("secret file: %w", err)
	}
	if fi.Mode().Perm()&0o004 != 0 {
		return fmt.Errorf("refusing to read secrets from %s: it is readable by every user (mode %04o); "+
			"restrict it with: chmod o-rwx %s", path, fi.Mode().Perm(), path)
	}
	return nil
}
