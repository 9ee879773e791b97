// Command weir receives event data on /datafeed and stores every post
// durably as a stream. See `weir help`.
package main

import (
	"os"

	"github.com/weirhq/weir/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
