// Command tidegate-sandbox is `tidegate sandbox` alone, for trying the sandbox before it is wired
// into cmd/tidegate: go run ./internal/sandbox/cmd/tidegate-sandbox sandbox up --demo.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/tidegate/tidegate/internal/sandbox"
)

func main() {
	root := &cobra.Command{Use: "tidegate", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(sandbox.NewCommand())
	err := root.ExecuteContext(context.Background())
	if err == nil {
		return
	}
	fmt.Fprintf(os.Stderr, "error: %v\n", err)
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		os.Exit(ec.ExitCode())
	}
	os.Exit(2)
}
