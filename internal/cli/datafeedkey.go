package cli

import "io"

// adminDataFeedKey runs `weir admin datafeed-key create|list|revoke`.
func adminDataFeedKey(action string, args []string, stdout, stderr io.Writer) error {
	return usagef("unknown admin command %q", "datafeed-key "+action)
}
